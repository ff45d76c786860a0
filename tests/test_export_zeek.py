"""`tailscope export zeek`: a conn.log Zeek's own log readers take, whose connections agree with
Zeek's conn.log baselines in the corpus (the same comparison test_flows_vs_peers makes on the
flows table, here through the exported text)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from support import corpus, peers
from tailscope.jobs.analytics.db import connect
from tailscope.jobs.analytics.zeek import FIELDS, write_conn_log
from tailscope.jobs.run.local import AnalyzeOptions, analyze
from test_flows_vs_peers import ZEEK_DIFFERENCES, ZEEK_FULL

CHECKED = [n for n in ZEEK_FULL if n not in ZEEK_DIFFERENCES]


def read_ours(path):
    """Our conn.log through the peers' Zeek reader (it wants the btest header line first)."""
    text = path.read_text()
    wrapped = path.with_suffix(".btest")
    wrapped.write_text("### BTest baseline data\n" + text)
    kind, names, types, data, set_sep = peers._zeek_read(wrapped)
    assert kind == "zeek" and names == [f for f, _ in FIELDS] and types == dict(FIELDS)
    assert text.splitlines()[-1].startswith("#close\t")
    return [{n: peers._zeek_value(types[n], c, set_sep) for n, c in zip(names, cells)} for cells in data]


@pytest.mark.parametrize("name", CHECKED)
def test_exported_conn_log_agrees_with_zeek(name, tmp_path):
    out = tmp_path / "ds"
    analyze([str(corpus.pcap_path(name))], out, AnalyzeOptions(progress=False))
    log = tmp_path / "conn.log"
    con = connect(out)
    with open(log, "w") as fh:
        write_conn_log(con, fh)
    con.close()
    ours = {}
    for r in read_ours(log):
        k = (peers.norm_addr(r["id.orig_h"]), r["id.orig_p"], peers.norm_addr(r["id.resp_h"]), r["id.resp_p"], r["proto"])
        ours[k] = r
    compared = services = 0
    (bare,) = [z.bare_mode for z in peers.zeek_logs(name, "conn") if z.full]
    for z in peers.zeek_conn_full(name):
        if z["proto"] not in ("tcp", "udp"):
            continue
        k = (peers.norm_addr(z["id.orig_h"]), z["id.orig_p"], peers.norm_addr(z["id.resp_h"]), z["id.resp_p"], z["proto"])
        r = ours.get(k)
        assert r is not None, f"{name}: no exported connection {k}"
        for col in ("orig_pkts", "resp_pkts", "orig_ip_bytes", "resp_ip_bytes", "conn_state"):
            assert r[col] == z[col], f"{name} {k}: {col} ours {r[col]!r}, Zeek {z[col]!r}"
        # service: where Zeek names one, the same name. Where it names none, ours may name one only
        # when that baseline's Zeek ran bare (-b) and so loaded no analyzer for it.
        if z["service"] is not None or not bare:
            assert r["service"] == z["service"], f"{name} {k}: service ours {r['service']!r}, Zeek {z['service']!r}"
            services += z["service"] is not None
        compared += 1
    assert compared
    if name == "wikipedia.pcap":  # Zeek names 32 services there: dns on 53/137/5353/5355, http on 80
        assert services == 32


def test_cli_writes_the_file(tmp_path):
    out = tmp_path / "ds"
    analyze([str(corpus.pcap_path("get.pcap"))], out, AnalyzeOptions(progress=False))
    r = subprocess.run([sys.executable, "-m", "tailscope", "export", "zeek", str(out), "-o", str(tmp_path / "conn.log")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "1 connections" in r.stderr
    rows = read_ours(tmp_path / "conn.log")
    assert len(rows) == 1 and rows[0]["community_id"].startswith("1:") and rows[0]["uid"].startswith("T")

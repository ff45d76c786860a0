"""Network duplicates are no loss, and QUIC flows are UDP flows (issue 30, items 6 and 7): on a
SPAN-style capture with every packet twice (corpus ssh-dups.pcap) the flow's 166 resends are all
`network_duplicate`, so `stats --table network` shows no retransmission and no lossy
connection; the overview counts QUIC flows among the UDP flows."""
from __future__ import annotations

import subprocess
import sys

import duckdb

from support import corpus
from tailscope.jobs.analytics import db
from tailscope.jobs.analytics.stats import compute_stats
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def metric(tables, name):
    (row,) = [r for r in tables["network"] if r["metric"] == name]
    return row


def test_network_duplicates_are_not_loss(tmp_path):
    out = analyze([str(corpus.pcap_path("ssh-dups.pcap"))], tmp_path / "ds", AnalyzeOptions(progress=False)).out
    con = duckdb.connect(str(db.build(out)), read_only=True)
    try:
        (dups, nondup), = con.execute(
            "SELECT count(*) FILTER (WHERE retx_cause = 'network_duplicate'), "
            "count(*) FILTER (WHERE retx_cause <> 'network_duplicate') FROM packets").fetchall()
        lossy = con.execute("SELECT count(*) FILTER (WHERE lossy), count(*) FROM flow_facts WHERE protocol = 'tcp'").fetchall()
        retx = con.execute("SELECT (SELECT sum(retransmissions) FROM queries), "
                           "(SELECT sum(retransmissions) FROM flow_facts)").fetchall()
        per_dir = con.execute("SELECT c2s_retx_packets, c2s_network_duplicates, s2c_retx_packets, s2c_network_duplicates "
                              "FROM flows").fetchall()
        by_dir = con.execute("SELECT direction, count(*) FROM packets WHERE retx_cause = 'network_duplicate' "
                             "AND payload_len > 0 GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        con.close()
    assert (dups, nondup) == (166, 0), "the capture's premise: every resend is a duplicate the SPAN made"
    assert lossy == [(0, 1)]
    # per direction: every data resend tcptrace would count is a duplicate, as the packets say
    assert by_dir == [("c2s", 72), ("s2c", 90)]
    assert per_dir == [(72, 72, 90, 90)]
    assert retx == [(0, 0)], "neither the queries nor flow_facts count the copies as resends"
    # and `tailscope conn` lists no resend for it (it showed retx 162)
    r = subprocess.run([sys.executable, "-m", "tailscope", "conn", str(out), "-c", "retx", "-f", "csv"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.splitlines() == ["retx", "0"], r.stdout + r.stderr
    t = compute_stats(out)
    assert (metric(t, "retransmitted_packets")["numerator"], metric(t, "lossy_connections")["numerator"]) == (0, 0)
    assert metric(t, "retransmitted_packets")["denominator"] > 0
    assert metric(t, "loss_rate_lossy")["value"] is None and metric(t, "retx_delay")["n"] == 0


def test_quic_flows_are_counted_as_udp(tmp_path):
    pcaps = [str(corpus.pcap_path(n)) for n in ("quic-v2.pcapng", "wikipedia.pcap")]
    out = analyze(pcaps, tmp_path / "ds", AnalyzeOptions(progress=False)).out
    con = duckdb.connect(str(db.build(out)), read_only=True)
    try:
        by = dict(con.execute("SELECT protocol, count(*) FROM flows GROUP BY 1").fetchall())
    finally:
        con.close()
    assert by.get("quic", 0) > 0 and by.get("udp", 0) > 0
    (ov,) = compute_stats(out)["overview"]
    assert (ov["udp_flows"], ov["quic_flows"], ov["tcp_flows"]) == (by["udp"] + by["quic"], by["quic"], by["tcp"])

"""Precision and recall of tailscope's QUIC signatures and of the quic_fallback view against real QUIC
in the ground-truth lab (DESIGN.md §5.2; the TCP twin is tests/test_lab_signatures.py).

The QUIC scenarios (tests/lab/scenarios.py QUIC_SCENARIOS: an aioquic client and server from
tests/lab/quic_apps.py, TLS-over-TCP fallback to the same server name) run once, in parallel, in a
module fixture, through the same relay as the TCP lab with the capture at the server. tailscope
analyses each pcap and builds its database; tests/lab/quic_eval.py derives the truth from the
client's log and qlog, the server's qlog, the relay log and the server-namespace nftables drop sets,
and counts TP/FP/FN per attempt. The table is printed (also without -s), written to
<pytest tmp>/lab-quic*/quic-table.txt and attached to the report as a user property.

Targets (the issue): >= 0.95 precision and recall for Initial loss, the handshake failure class and
the fallback outcome; no QUIC signature in quic_clean; and the quic_fallback view's share of
QUIC-first sessions that ended on TCP equal to the truth. Where tailscope does not meet a target the
test is xfail(strict=True) with the reason (the evidence is in the table's FP/FN lines): fix
tailscope, and the strict xfail turns into a failure that asks for the marker to go.

Needs root, the lab's tools and aioquic (test extra). ~40 s on 2 cores.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.report import failed_runs, require_lab, show_table, why  # noqa: E402
from tests.lab.evaluate import TARGET  # noqa: E402
from tests.lab.quic_apps import aioquic_available  # noqa: E402

# one worker for the whole module: the scenarios run once and are timing-sensitive
pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-quic")]

TARGETS = [
    "quic_initial_loss",
    "handshake=no_server_reply",
    "handshake=no_client_handshake",
    "handshake=version_negotiation_failed",
    "outcome=fallback",
    "outcome=quic_failed",
    "outcome=quic_ok",
    "outcome=race",
    "outcome=cached_broken",
]


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    require_lab()
    ok, why = aioquic_available()
    if not ok:
        pytest.skip(why)
    from tests.lab.quic_eval import QUIC_EVAL_SCENARIOS, evaluate, format_table

    out = tmp_path_factory.mktemp("lab-quic")
    t0 = time.monotonic()
    results = run_scenarios(QUIC_EVAL_SCENARIOS, out, max_parallel=3, return_exceptions=True)
    t_run = time.monotonic() - t0
    ev = evaluate(results, out)
    t_eval = time.monotonic() - t0 - t_run
    runs = ", ".join(f"{n} {r.duration_s:.1f}" for n, r in results.items() if not isinstance(r, Exception))
    ev.table = (format_table(ev, details=12)
                + f"\n\nruntime: scenarios {t_run:.1f} s (3 in parallel; per scenario s: {runs}), "
                  f"tailscope + scoring {t_eval:.1f} s")
    ev.table_path = out / "quic-table.txt"
    ev.table_path.write_text(ev.table + "\n")
    return ev


def test_print_table(evaluation, request, capsys):
    show_table(evaluation, request, capsys, "quic_table")


def test_runs_are_trustworthy(evaluation):
    """Every scenario ran and the lab saw no loss it did not log (else the truth is incomplete)."""
    bad = failed_runs(evaluation.results)
    assert not bad, bad


def test_truth_joins(evaluation):
    """The client's qlog and the relay log agree datagram by datagram, every attempt has its
    tailscope QUIC flow, and tailscope's quic_ocid is the client's original DCID."""
    assert not evaluation.warnings, evaluation.warnings[:10]


def test_scenarios_did_what_they_intend(evaluation):
    """The lab produced the events the targets are scored on (else a pass would mean little)."""
    t = evaluation.truths
    il = [a for a in t["quic_initial_drop"].attempts if a.initial_loss]
    assert len(il) >= 6, "Initial drops after the capture point"
    assert all(a.ok for a in t["quic_initial_drop"].attempts), "every Initial loss recovered"
    assert all(a.handshake == "no_server_reply" for a in t["quic_udp_blocked"].attempts)
    assert sum(a.handshake == "no_client_handshake" for a in t["quic_reply_blocked"].attempts) >= 3
    assert sum(a.server_initial_loss for a in t["quic_loss"].attempts) >= 1, "a ServerHello lost"
    race = t["quic_race"]
    assert all(a.outcome == "race" for a in race.attempts)
    won = {a.session for a in race.attempts if a.ok}
    assert len(won) >= 2 and all(not c.tls_sent for c in race.tcp if c.session in won), \
        "where QUIC won the race, its TCP was cancelled before TLS"
    assert sum(c.cached_broken for c in t["quic_cached_broken"].tcp) >= 3
    assert all(a.client_outcome == "icmp_error" and a.outcome == "fallback" for a in t["quic_udp_closed"].attempts)
    vn = t["quic_version_mismatch"].attempts
    assert sum(a.handshake == "version_negotiation_failed" and a.outcome == "fallback" for a in vn) == 3
    assert sum(a.ok and a.s2c > 1 for a in vn) == 3, "Version Negotiation, then a completed v1 handshake"
    assert all(s.ok for tr in t.values() for s in tr.sessions if s.effective != "quic_only")


def _handshake_seen(r, proto: str, port: int) -> dict:
    """Why a handshake the client completed did not decrypt (for the failure message): the
    connection's packets as tshark dissects them, and whether the key log holds its secrets."""
    cp = subprocess.run(["tshark", "-r", str(r.pcap), "-o", f"tls.keylog_file:{r.files['keylog']}",
                         "-Y", f"{proto}.port == {port}", "-T", "fields", "-e", "frame.number",
                         "-e", f"{proto}.srcport", "-e", "quic.long.packet_type", "-e", "tls.handshake.type",
                         "-e", "tls.handshake.random", "-e", "_ws.expert.message"],
                        check=False, capture_output=True, text=True, timeout=60)
    rows = [line.split("\t") for line in cp.stdout.splitlines()]
    # the ClientHello's random names the connection's lines in the key log
    randoms = {x for row in rows if len(row) > 4 and row[1] == str(port) for x in row[4].split(",") if x}
    keylog = Path(r.files["keylog"]).read_text(errors="replace")
    return {"port": port, "packets": len(rows), "first": [" ".join(row[:4] + row[5:]) for row in rows[:12]],
            "client randoms in key log": sorted(x[:16] for x in randoms if x in keylog),
            "client randoms not in key log": sorted(x[:16] for x in randoms if x not in keylog)}


def _decrypted_handshakes(r, pcap: Path | None = None) -> set:
    """(proto, client port) of every connection whose EncryptedExtensions tshark could decrypt
    with the run's key log (they are only visible decrypted, in QUIC and in TLS 1.3 over TCP)."""
    cp = subprocess.run(["tshark", "-r", str(pcap or r.pcap), "-o", f"tls.keylog_file:{r.files['keylog']}",
                         "-Y", "tls.handshake.type == 8", "-T", "fields", "-e", "udp.dstport", "-e", "tcp.dstport"],
                        check=False, capture_output=True, text=True, timeout=60)
    out = set()
    for line in cp.stdout.splitlines():
        u, _, t = line.partition("\t")
        if u:
            out.add(("udp", int(u)))
        if t:
            out.add(("tcp", int(t)))
    return out


def _decrypts_alone(r, proto: str, port: int, tmp: Path) -> bool:
    """Does the connection decrypt in a capture of its own packets? tshark tracks QUIC connections
    across the whole file, and once (one CI run of many; 29 runs of the scenario since did not
    repeat it) it threw "Malformed Packet (Exception occurred)" on one connection's server packets
    and decrypted nothing of it: the key log is the truth checked here, not tshark's state across
    connections."""
    alone = tmp / f"{r.pcap.stem}-{proto}{port}.pcap"
    subprocess.run(["tshark", "-r", str(r.pcap), "-Y", f"{proto}.port == {port}", "-w", str(alone)],
                   check=False, capture_output=True, timeout=60)
    return alone.exists() and (proto, port) in _decrypted_handshakes(r, alone)


def test_key_log_decrypts_every_completed_handshake(evaluation, tmp_path):
    """The client's SSLKEYLOGFILE is ground truth too: with it a peer (tshark) decrypts exactly the
    handshakes the client log says completed, QUIC and TLS over TCP, and no other. (Not the QUIC
    connections that went through Version Negotiation first: tshark 4.0 keeps the v2 Initial keys
    for the client's v1 retry - "Decryption (checktag) failed" on a v1 Initial, which needs no key
    log at all.)"""
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed")
    res = {n: r for n, r in evaluation.results.items() if not isinstance(r, Exception)}
    with ThreadPoolExecutor(max_workers=3) as ex:
        got = dict(zip(res, ex.map(_decrypted_handshakes, res.values())))
    bad = {}
    for n, t in evaluation.truths.items():
        want = {("udp", a.key[1]) for a in t.attempts if a.ok} | {("tcp", c.key[1]) for c in t.tcp if c.ok}
        skip = {("udp", a.key[1]) for a in t.attempts if a.vn}
        got[n] -= skip
        want -= skip
        missing = {k for k in want - got[n] if not _decrypts_alone(res[n], *k, tmp_path)}
        if missing or got[n] - want:
            bad[n] = {"client log only": sorted(missing), "tshark only": sorted(got[n] - want),
                      "what tshark saw": [_handshake_seen(res[n], *k) for k in sorted(missing)]}
    if bad:
        print(json.dumps(bad, indent=1))   # the whole evidence: the assertion's repr is cut short
    assert not bad, bad


@pytest.mark.parametrize("signature", TARGETS)
def test_target(evaluation, signature):
    row = evaluation.row(signature)
    assert row.tp + row.fn > 0, f"no occurrences of {signature} in the scenarios"
    precision_ok = row.precision is not None and row.precision >= TARGET
    recall_ok = row.recall >= TARGET
    assert precision_ok and recall_ok, why(evaluation, row)


def test_quic_clean_has_no_signature(evaluation):
    row = evaluation.row("no QUIC signature in quic_clean")
    assert row.tp + row.fp > 0
    assert row.fp == 0, why(evaluation, row)


def test_initial_loss_before_the_capture_point_is_not_claimed(evaluation):
    """The relay drops these ClientHellos before the server's capture: the server sees one
    ClientHello, so quic_initial_loss there would be a guess (reported as not observable)."""
    row = evaluation.row("quic_initial_loss (ClientHello dropped before the capture point)")
    assert row.tp + row.fn > 0
    assert row.tp == 0, why(evaluation, row)


def test_initial_loss_on_answered_attempts(evaluation):
    """Where the server answered, quic_initial_loss is exactly the ClientHellos lost after the capture."""
    row = evaluation.row("quic_initial_loss (answered attempts only)")
    assert row.tp + row.fn > 0
    assert row.precision >= TARGET and row.recall >= TARGET, why(evaluation, row)


def test_share_of_quic_first_sessions_ending_on_tcp(evaluation):
    """The video company's question, answered by quic_fallback as docs/signatures.md says:
    QUIC attempts with ended_on_tcp (fallback, or a race QUIC did not complete) / QUIC attempts ==
    the client's own count of QUIC-first sessions answered over TCP, per scenario and overall.
    cached_broken sessions never tried QUIC: they are in neither count (quic_eval.py's truth)."""
    ev = evaluation
    per = {n: (s["truth"], s["view"]) for n, s in ev.shares.items() if s["truth"] != s["view"]}
    truth, view = ev.share_total("truth"), ev.share_total("view")
    assert truth[1] > 0 and truth[0] > 0
    assert not per and truth == view, (f"overall truth {truth[0]}/{truth[1]}, view {view[0]}/{view[1]}; "
                                       f"scenarios (truth, view): {per}")

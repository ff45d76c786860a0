"""Precision and recall of the key-log QUIC signatures in the ground-truth lab (DESIGN.md §5.2; the
rules are docs/signatures.md's "QUIC with a key log"; the truth, from the endpoints' qlogs, is
tests/lab/quic_keylog_eval.py's).

The key-log scenarios (tests/lab/scenarios.py QUIC_KEYLOG_SCENARIOS: loss on 1-RTT packets both
ways, bursty loss at response tails, reordering) run once in a module fixture through the QUIC lab
(aioquic client and server, capture at the server); tailscope analyses each pcap with the run's
SSLKEYLOGFILE. The table is printed and written to <pytest tmp>/lab-quic-keylog*/keylog-table.txt.
Targets >= 0.95; where tailscope does not reach one, the test is a strict xfail naming why. The
causes of losses outside reordering vary around the target from run to run (a few packets whose
trigger depends on the sender's clock): they are `lab_targets`, run by hand (the TCP signature targets gate CI).

Needs root, the lab's tools and aioquic (test extra).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.report import failed_runs, require_lab, show_table, why  # noqa: E402
from tests.lab.evaluate import TARGET  # noqa: E402
from tests.lab.quic_apps import aioquic_available  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-quic-keylog")]

XFAIL_TIMER_RACE = pytest.mark.xfail(strict=True, reason=(
    "signatures/src/quic_recovery.rs replays the server's time threshold with the RTT the capture measures; "
    "under reordering (quic_keylog_reordering: every 5th server datagram held 5 ms) the client's ACK that covers "
    "a held packet arrives within ~1-2 ms of 9/8 RTT after its send, and aioquic's estimate is ~1 ms higher "
    "(its packet stamps include its own I/O and flush delays, which the capture cannot see; its first samples "
    "are the handshake's), so its ACK wins the race where our timer fires: ~10-15 packets per run declared "
    "lost (then acknowledged: also spurious) that aioquic never declared. Estimating the server's lag from its "
    "reaction to ACKs (~0.5 ms) and stamping bursts at their start did not change a single verdict"))

TARGETS = [
    "quic_packet_lost (s2c)",
    "retransmission (s2c)",
    "out_of_order (c2s)",
    pytest.param("quic_packet_lost cause=packet_threshold (s2c)", marks=pytest.mark.lab_targets),
    pytest.param("quic_packet_lost cause=time_threshold (s2c)", marks=pytest.mark.lab_targets),
    pytest.param("quic_packet_lost cause=packet_threshold (s2c) under reordering", marks=pytest.mark.lab_targets),
    pytest.param("quic_packet_lost (s2c) under reordering", marks=XFAIL_TIMER_RACE),
    pytest.param("quic_packet_lost cause=time_threshold (s2c) under reordering", marks=XFAIL_TIMER_RACE),
    pytest.param("quic_spurious_retransmission (s2c) under reordering", marks=XFAIL_TIMER_RACE),
]


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    require_lab()
    ok, why = aioquic_available()
    if not ok:
        pytest.skip(why)
    from tests.lab.quic_keylog_eval import KEYLOG_EVAL_SCENARIOS, evaluate, format_table

    out = tmp_path_factory.mktemp("lab-quic-keylog")
    t0 = time.monotonic()
    results = run_scenarios(KEYLOG_EVAL_SCENARIOS, out, max_parallel=3, return_exceptions=True)
    ev = evaluate(results, out)
    ev.results = results
    ev.table = format_table(ev, details=12) + f"\n\nruntime {time.monotonic() - t0:.1f} s"
    ev.table_path = out / "keylog-table.txt"
    ev.table_path.write_text(ev.table + "\n")
    return ev


def test_print_table(evaluation, request, capsys):
    show_table(evaluation, request, capsys, "quic_keylog_table")


def test_runs_are_trustworthy(evaluation):
    """Every scenario ran, the lab saw no loss it did not log, every QUIC connection whose handshake
    completed was decrypted, and every server qlog trace has its tailscope flow."""
    bad = failed_runs(evaluation.results)
    assert not bad, bad
    assert not evaluation.warnings, evaluation.warnings[:10]


@pytest.mark.parametrize("signature", TARGETS)
def test_target(evaluation, signature):
    row = evaluation.row(signature)
    assert row.tp + row.fn > 0, f"no occurrences of {signature} in the scenarios"
    precision_ok = row.precision is not None and row.precision >= TARGET
    assert precision_ok and row.recall >= TARGET, why(evaluation, row)

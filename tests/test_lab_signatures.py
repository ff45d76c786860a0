"""Precision and recall of tailscope's TCP signatures against the ground-truth lab (DESIGN.md §5.2).

The lab scenarios of tests/lab/evaluate.py (EVAL_SCENARIOS: the lab's catalogue plus variants with
more connections, so every targeted signature has enough occurrences) run once, in parallel, in a
module fixture; tailscope analyses each pcap; tests/lab/truth.py derives what it should have said
from the relay's log, the pcap, the client log and the kernels' counters; tests/lab/evaluate.py
counts TP/FP/FN per signature. The table is printed (also without -s), written to
<pytest tmp>/lab-signatures*/signature-table.txt and attached to the report as a user property.

Targets (the issue): >= 0.95 precision and recall for SYN and SYN-ACK loss, tail loss, the RTO vs
fast-retransmit cause, and flow-level reordering, policing and bufferbloat; no signature at all in
the clean scenarios. SYN loss before the capture point is reported, not scored: a server-side
capture cannot see it (truth.py). The targets gate CI: the variants have enough occurrences that
one odd decision moves a per-packet or per-episode score by at most ~0.025 (flow-level signatures
have 6-8 positives each and have been exact in every run). Needs root and the lab's tools; ~35 s
on 2 cores.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.report import (failed_runs, require_lab, rerun_once, show_table, unexplained_counter_checks,  # noqa: E402
                              untrustworthy, why)
from tests.lab.evaluate import EVAL_SCENARIOS, TARGET, evaluate, format_table  # noqa: E402

# one worker for the whole module: the scenarios run once and are timing-sensitive
pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-signatures")]

# Known gaps, asserted as they should be and marked strict: fixing them turns the mark into a
# failure that asks for its removal.
KNOWN_GAPS: dict[str, str] = {}
TARGETED = [
    pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[s])) if s in KNOWN_GAPS else s
    for s in ["syn_loss", "synack_loss", "tail_loss", "retx_cause=rto [s2c]", "retx_cause=fast_retransmit [s2c]",
              "reordering", "policing", "bufferbloat"]
]


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory):
    require_lab()
    out = tmp_path_factory.mktemp("lab-signatures")
    results = run_scenarios(EVAL_SCENARIOS, out, max_parallel=3, return_exceptions=True)
    ev = evaluate(results, out)
    # A run whose own ground truth is inconsistent (the client failed, a loss nothing logged, the
    # capture and the relay log disagree, or the replayed causes disagree with the senders' kernel
    # counters) is an experiment that went wrong on a busy machine, not a measurement of
    # tailscope: it is repeated once, and the checks below still fail if it goes wrong again.
    bad = untrustworthy(ev)
    if bad:
        results = rerun_once(EVAL_SCENARIOS, results, bad, out)
        (out / "retry-eval").mkdir()
        ev = evaluate(results, out / "retry-eval")
        ev.retried = sorted(bad)
    ev.table = format_table(ev, details=12)
    ev.table_path = out / "signature-table.txt"
    ev.table_path.write_text(ev.table + "\n")
    return ev


def test_print_table(evaluation, request, capsys):
    show_table(evaluation, request, capsys, "signature_table")


def test_runs_are_trustworthy(evaluation):
    """Every scenario ran and the lab saw no loss it did not log (else the truth is incomplete)."""
    bad = failed_runs(evaluation.results)
    assert not bad, bad


def test_truth_agrees_with_the_senders_counters(evaluation):
    """The replayed retransmission causes (truth.py) match what the senders' kernels counted:
    TCPFastRetrans, TCPSlowStartRetrans, TCPTimeouts, TCPLossProbes, but for the replay's
    documented RACK-timer gap (report.counter_gap_explained), held the same as in the pools."""
    bad = unexplained_counter_checks(evaluation.truths)
    assert not bad, bad


def test_truth_joins_the_capture(evaluation):
    """Every captured frame found its relay record and vice versa."""
    bad = [w for w in evaluation.warnings if "relay record" in w or "no flow" in w]
    assert not bad, bad[:10]


@pytest.mark.parametrize("signature", TARGETED)
def test_target(evaluation, signature):
    row = evaluation.row(signature)
    assert row.tp + row.fn > 0, f"no occurrences of {signature} in the scenarios"
    precision_ok = row.precision is not None and row.precision >= TARGET
    recall_ok = row.recall >= TARGET
    assert precision_ok and recall_ok, why(evaluation, row)


def test_clean_runs_have_no_signature(evaluation):
    row = evaluation.row("no signature in clean runs")
    assert row.tp + row.fp > 0
    assert row.fp == 0, why(evaluation, row)


def test_syn_loss_before_the_capture_point_is_not_claimed(evaluation):
    """The relay drops these SYNs before the server's capture: the server sees one SYN, so any
    syn_loss there would be a guess (reported as 'not observable', not as recall)."""
    row = evaluation.row("syn_loss (SYN dropped before the capture point)")
    assert row.tp + row.fn > 0
    assert row.tp == 0, why(evaluation, row)


def test_tables_agree_on_every_lab_run(evaluation):
    """One truth across tables (tests/support/invariants.py) on the dataset of every scenario."""
    broken = {n: o.invariant_violations for n, o in evaluation.outputs.items() if o.invariant_violations}
    assert not broken, broken

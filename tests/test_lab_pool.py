"""Precision and recall over a pool of randomized lab draws (tests/lab/draws.py, tests/lab/pool.py).

The named scenarios (test_lab_signatures.py) were built by the people who wrote the detectors; the
pool draws each impairment family's parameters from wide ranges (RTT 20-400 ms with jitter, loss
0.5-8 % Bernoulli or bursty, reordering 1-10 % held 10-80 ms, policers 0.5-10 Mbit/s with 8-256 kB
buckets, bottlenecks 1-50 Mbit/s holding 20 ms-2 s, cubic/bbr/reno, 1-8 connections, 1 kB-20 MB),
seeded, so a threshold fitted to one scenario shows here. The CI pool is `pool.CI_SEEDS`, drawn
without the stack/capture axes; `AXIS_SEEDS` are drawn with them (issue 29: per-axis rows); the
table is printed (also without -s) and written to <pytest tmp>/lab-pool*/pool-table.txt. A larger
pool is run by hand (`make lab-pool SEEDS=1-200`) and kept in docs/accuracy.md.

Gates: the pooled targets (>= 0.95 precision and recall) of `pool.POOL_TARGETS` (the time budget's
rows, issue 27: >= 0.90 of qualifying queries within tolerance, pool.ROW_TARGETS), no trouble in
clean draws and nothing charged to loss or queueing in their budgets, every table consistent with
the others. Rows the pool still misses are KNOWN_GAPS:
marked xfail (not strict: a pooled figure near its line passes on some pools) with what the pool
showed; their rows stay in the printed table.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.draws import AXES, at_client, parse_seeds, pool  # noqa: E402
from tests.lab.pool import (CI_SEEDS, CLIENT_TARGETS, POOL_TARGETS, RWND_ROW, broken_tables, format_pool,  # noqa: E402
                            score)
from tests.lab.report import (failed_runs, require_lab, rerun_once, show_table, unexplained_counter_checks,  # noqa: E402
                              untrustworthy, why)
from tests.lab.evaluate import TARGET  # noqa: E402
from tests.lab.budget_check import CLEAN_ROW, POLICING_ROW, QUEUE_ROW  # noqa: E402
from tests.lab.pool import FLOOR_ROW  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-pool")]

# What the pool showed and the detectors do not do yet (docs/accuracy.md has the table).
KNOWN_GAPS: dict[str, str] = {}   # none since 2026-11-26 (docs/accuracy.md: what the pool changed)


def _marked(targets: list, gaps: dict) -> list:
    """The targets, those with a known gap marked xfail (not strict) with what the pool showed."""
    return [pytest.param(s, marks=pytest.mark.xfail(strict=False, reason=gaps[s])) if s in gaps else s
            for s in targets]


# The main pool runs each seed without the stack/capture axes (draws.draw(axes=False)): the gates
# above were measured on Linux defaults at both ends, and the axes' own pool is below.
MAIN_TARGETS = [t for t in POOL_TARGETS if t != RWND_ROW]
TARGETS = _marked(MAIN_TARGETS, KNOWN_GAPS)


# Draws captured at the client's eth0 (draws.at_client): two of each family, ~1 minute on 2 cores.
CLIENT_SEEDS = "1-16"
# What the client-side pool showed and tailscope does not do yet (docs/accuracy.md).
KNOWN_GAPS_AT_CLIENT: dict[str, str] = {}   # none since reordering closed (docs/accuracy.md)
CLIENT_TARGETS_MARKED = _marked(CLIENT_TARGETS, KNOWN_GAPS_AT_CLIENT)


def _run_pool(tmp_path_factory, name: str, draws: list, targets=None):
    require_lab()
    out = tmp_path_factory.mktemp(name)
    results = run_scenarios(draws, out, max_parallel=3, return_exceptions=True)
    by_name = {d.name: d for d in draws}
    pe = score(results, out / "eval", by_name, targets=targets)
    # as test_lab_signatures: a draw whose ground truth went wrong is repeated once
    bad = untrustworthy(pe.ev)
    if bad:
        results = rerun_once(draws, results, bad, out)
        kept = {n: o for n, o in pe.ev.outputs.items() if n not in bad}
        pe = score(results, out / "retry-eval", by_name, kept, targets=targets)
    pe.table = pe.ev.table = format_pool(pe, details=10)
    pe.table_path = pe.ev.table_path = out / "pool-table.txt"
    pe.table_path.write_text(pe.table + "\n")
    return pe


@pytest.fixture(scope="module")
def pooled(tmp_path_factory):
    return _run_pool(tmp_path_factory, "lab-pool", pool(parse_seeds(CI_SEEDS), axes=False))


# ---- the stack/capture axes (issue 29) ------------------------------------------------------------
# Eight CI seeds drawn with their axes (draws.py: timestamps off, SACK off, IPv6, slow reader, GSO,
# BBR behind a policer; every axis in at least one draw, most in several), ~1 minute on a shared
# 2-core machine (seeds 20 and 29 left out: 52 s and 29 s alone). Each targeted row is held per axis
# (pool.py's "<row> [<axis>]" rows) where the axis's draws hold an occurrence of it, and the
# receiver-limited time against the kernel's over all of them. Seed 37 (timestamps and SACK off
# behind a policer, ~30 s) is back since its truth holds: the replay of NewReno recovery had
# taken resends of a hole already resent in the episode for fast retransmits where the server's
# kernel counted timeouts (one run in five: TCPTimeouts 7 vs 8); with the replay's fix, three
# runs of it agreed with every counter (docs/accuracy.md).
AXIS_SEEDS = "1,3,12,21,24,37,67,70"
AXIS_ROWS = [f"{row} [{axis}]" for axis in AXES for row in [*POOL_TARGETS, "no signature in clean runs"]]
# What the axis pool showed and tailscope does not do yet (docs/accuracy.md "Stack and capture axes",
# with causes); xfail, not strict (timing moves a draw's misses between runs).
_SACK_OFF_POLICER = ("seed 37 (timestamps and SACK off, reno, 1.9 Mbit/s policer): 4 of 4 policed flows fitted in every "
                     "run since 2026-11-29 (0-1 unfitted before); draws outside CI without SACK still miss: seed 213 "
                     "(BBR, 2.5 Mbit/s) 0 of 4 fitted on 2026-11-29, the policer dropping go-back-N resends of bytes "
                     "whose originals had passed; only the receiver's duplicate ACKs tell which copy arrived, and only on a "
                     "path without jitter (docs/accuracy.md, \"Which copy arrived\")")
_POLICING_ROWS = ["policing", "policing rate within 15%", FLOOR_ROW, "policing burst within 50%", POLICING_ROW]
_RWND = ("receiver-limited time against one kernel's accounting: Linux counts nothing while the congestion window "
         "binds as the window does (seed 3: cwnd 12 = 12 unacknowledged, kernel 44 vs 89-91 ms), and counts its TSO "
         "deferral with room left (seed 276: 72 ms); docs/accuracy.md, \"Receiver-limited time against the kernel's "
         "clock\"")
KNOWN_AXIS_GAPS: dict[str, str] = {
    # the SACK-off draws (1, 37, 67, 70) and the other axes they carry (their tail losses hold since
    # 2026-11-29: docs/accuracy.md, "Timeouts inside NewReno recovery")
    **{f"{row} [{a}]": _SACK_OFF_POLICER for a in ("timestamps off", "sack off", "ipv6") for row in _POLICING_ROWS},
    **{f"{row} [bbr behind a policer]": "seed 21 (BBR, 5.6 Mbit/s): 1 of 4 policed flows unfitted (252 drops) in "
                                                 "some runs, 4 of 4 fitted in others (2026-11-29)"
       for row in _POLICING_ROWS},
    **{f"{QUEUE_ROW} [{a}]": "seed 70 (BBR, 305 ms, 3.5 Mbit/s): queueing 19 vs 30 ms on a 2-sample response"
       for a in ("timestamps off", "sack off", "ipv6")},
    **{f"{RWND_ROW} [{a}]": _RWND for a in AXES},
    RWND_ROW: _RWND,
}


@pytest.fixture(scope="module")
def pooled_axes(tmp_path_factory):
    return _run_pool(tmp_path_factory, "lab-pool-axes", pool(parse_seeds(AXIS_SEEDS)))


def test_print_table_axes(pooled_axes, request, capsys):
    show_table(pooled_axes.ev, request, capsys, "pool_table_axes")


def test_every_axis_draw_ran_and_its_truth_holds(pooled_axes):
    assert not failed_runs(pooled_axes.ev.results)
    bad = unexplained_counter_checks(pooled_axes.ev.truths)
    assert not bad, bad


# Eight draws hold few occurrences of most rows per axis: below this many decisions one odd one
# moves a score by more than the 0.05 the target allows (0.923 at 13: a run's seed 3 left one fast
# retransmit of 13 undecided), so such a row is reported in the table, not held; the hand-run pools
# of docs/accuracy.md are the measure there. Clean rows are held whatever their size.
AXIS_MIN_POSITIVES = 20


@pytest.mark.parametrize("row", _marked(AXIS_ROWS, KNOWN_AXIS_GAPS))
def test_pooled_target_per_axis(pooled_axes, row):
    r = next((x for x in pooled_axes.axis_rows if x.signature == row), None)
    if r is None or (r.kind == "pr" and r.tp + r.fn == 0 and r.fp == 0) or (r.kind == "clean" and r.tp + r.fp == 0):
        pytest.skip(f"no occurrence of {row} among the axis draws")
    if r.kind == "pr" and r.tp + r.fn + r.fp < AXIS_MIN_POSITIVES:
        pytest.skip(f"{row}: {r.tp + r.fn + r.fp} decisions, under {AXIS_MIN_POSITIVES} (TP {r.tp} FP {r.fp} "
                    f"FN {r.fn}; reported in the table)")
    if r.kind == "clean":
        assert r.fp == 0, why(pooled_axes.ev, r)
    else:
        assert r.result == "PASS", why(pooled_axes.ev, r)


@pytest.mark.parametrize("signature", _marked([RWND_ROW], KNOWN_AXIS_GAPS))
def test_receiver_limited_time_against_the_kernels(pooled_axes, signature):
    _assert_target(pooled_axes, signature)


@pytest.fixture(scope="module")
def pooled_at_client(tmp_path_factory):
    return _run_pool(tmp_path_factory, "lab-pool-client", [at_client(d) for d in pool(parse_seeds(CLIENT_SEEDS))],
                     targets=CLIENT_TARGETS)


def test_print_table(pooled, request, capsys):
    show_table(pooled.ev, request, capsys, "pool_table")


def test_every_draw_ran(pooled):
    bad = failed_runs(pooled.ev.results)
    assert not bad, bad


def _assert_target(pe, signature: str) -> None:
    row = pe.row(signature)
    target = row.target or TARGET          # the pool's figure for the row (pool.ROW_TARGETS)
    assert row.tp + row.fn > 0, f"no occurrences of {signature} in the pool"
    assert (row.precision or 0) >= target and (row.recall or 0) >= target, why(pe.ev, row)


def test_truth_agrees_with_the_senders_counters(pooled):
    bad = unexplained_counter_checks(pooled.ev.truths)
    assert not bad, bad


@pytest.mark.parametrize("signature", TARGETS)
def test_pooled_target(pooled, signature):
    _assert_target(pooled, signature)


def test_clean_draws_have_no_trouble(pooled):
    """No packet tag, event or flow signature of trouble in draws without impairment, except what
    the lab's own path did (truth.py measures its queue) and the bufferbloat gap above."""
    row = pooled.row("no signature in clean runs")
    assert row.tp + row.fp > 0
    other = [d for d in row.details if not all(p.strip().startswith("flow signature bufferbloat")
                                               for p in d.split(":", 2)[2].split(";"))]
    assert not other, why(pooled.ev, row)


def test_clean_draws_charge_nothing_to_loss_or_queueing(pooled):
    """Issue 27: no query of a clean draw has a loss part or queueing in its time budget, except
    queueing the truth measured on the lab's own path (budget_check.py)."""
    row = pooled.row(CLEAN_ROW)
    assert row.tp + row.fp > 0 and row.fp == 0, why(pooled.ev, row)


def test_tables_agree_on_every_draw(pooled):
    broken = broken_tables(pooled)
    assert not broken, broken


# ---- captured at the client -------------------------------------------------------------------

def test_print_table_at_client(pooled_at_client, request, capsys):
    show_table(pooled_at_client.ev, request, capsys, "pool_table_at_client")


def test_every_draw_at_the_client_ran_and_its_truth_holds(pooled_at_client):
    assert not failed_runs(pooled_at_client.ev.results)
    bad = unexplained_counter_checks(pooled_at_client.ev.truths)
    assert not bad, bad


@pytest.mark.parametrize("signature", CLIENT_TARGETS_MARKED)
def test_pooled_target_at_client(pooled_at_client, signature):
    _assert_target(pooled_at_client, signature)


def test_clean_draws_at_the_client_have_no_trouble(pooled_at_client):
    row = pooled_at_client.row("no signature in clean runs")
    assert row.tp + row.fp > 0 and row.fp == 0, why(pooled_at_client.ev, row)


def test_clean_draws_at_the_client_charge_no_loss(pooled_at_client):
    row = pooled_at_client.row(CLEAN_ROW)
    assert row.tp + row.fp > 0 and row.fp == 0, why(pooled_at_client.ev, row)


def test_tables_agree_at_the_client(pooled_at_client):
    broken = broken_tables(pooled_at_client)
    assert not broken, broken

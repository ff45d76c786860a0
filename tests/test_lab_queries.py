"""tailscope's queries and tail-latency attribution against the ground-truth lab (the proof items of
the queries/attribution issue):

1. On the lab scenarios, inferred query latencies agree with the client's own request log within
   one RTT for at least 95 % of requests, and no request is missed or invented.
2. In each impairment scenario the attribution names the injected impairment as the top
   contributor to the p99; in the clean scenario nothing is charged.
3. (issue 27) Each query's time budget agrees with the relay log (budget_check.py).

The scenarios of tests/lab/queries_check.py (QUERY_SCENARIOS: the lab's catalogue, evaluate.py's
midburst_loss_x3 and bufferbloat_p99) run once, in parallel, in a module fixture; tailscope
analyses each pcap; the queries are joined to the client's request log (5-tuple + order) and the
p99 attribution is computed by `tailscope stats`' own code on each scenario's dataset. Matching
rules, the RTT tolerance, what "invented" means, the expected signature per scenario and the
ground-truth precondition are explained in queries_check.py. Both tables are printed (also
without -s), written to <pytest tmp>/lab-queries*/queries-table.txt and attached to the report.

Where today's tailscope cannot pass, the test asserts the right thing and is marked
xfail(strict=True) with the reason: fixing tailscope turns it into an XPASS failure, and the mark
goes. Needs root and the lab's tools; ~30 s on 2 cores.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.lab import run_scenarios  # noqa: E402
from tests.lab.report import failed_runs, require_lab, show_table  # noqa: E402
from tests.lab.budget_check import CLEAN_ROW, LOSS_ROW, POLICING_ROW  # noqa: E402
from tests.lab.queries_check import (  # noqa: E402
    CLEAN,
    EXPECTED,
    PSEUDO,
    QUERY_SCENARIOS,
    REPAIR_SCENARIOS,
    TARGET,
    evaluate,
)

# one worker for the whole module: the scenarios run once and are timing-sensitive
pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("lab-queries")]

# Known failures would be listed here as xfail(strict=True) reasons; none remain.
ATTRIBUTION_XFAIL: dict[str, str] = {}


@pytest.fixture(scope="module")
def qeval(tmp_path_factory):
    require_lab()
    out = tmp_path_factory.mktemp("lab-queries")
    results = run_scenarios(QUERY_SCENARIOS, out, max_parallel=3, return_exceptions=True)
    ev = evaluate(results, out)
    ev.table_path = out / "queries-table.txt"
    ev.table_path.write_text(ev.table + "\n")
    return ev


def _where(ev) -> str:
    return f"(tables: {ev.table_path})"


def test_print_tables(qeval, request, capsys):
    show_table(qeval, request, capsys, "queries_tables")


def test_runs_are_trustworthy(qeval):
    """Every scenario ran and the lab saw no loss it did not log (else the truth is incomplete)."""
    bad = failed_runs(qeval.results)
    assert not bad, bad
    assert set(qeval.latency) == {s.name for s in QUERY_SCENARIOS}


def test_no_request_missed_or_invented(qeval):
    """Every client request has its query and every query its request, with the same bytes."""
    problems = []
    for c in qeval.latency.values():
        problems += [f"{c.scenario} missed: {p.describe()}" for p in c.missed]
        problems += [f"{c.scenario} invented: {p.describe()}" for p in c.invented]
        problems += [f"{c.scenario} mismatched bytes: {p.describe()}" for p in c.mismatched]
    assert sum(c.requests for c in qeval.latency.values()) > 0
    assert not problems, "\n".join(problems[:20] + [_where(qeval)])


def test_latency_within_one_rtt(qeval):
    """>= 95 % of all requests: |tailscope latency_ns - client (t_last_byte - t_send)| <= the flow's
    minimum RTT."""
    checks = list(qeval.latency.values())
    n = sum(c.requests for c in checks)
    within = sum(len(c.within) for c in checks)
    outside = [f"{c.scenario}: {p.describe()}" for c in checks for p in c.outside]
    assert n > 0
    assert within >= TARGET * n, (f"{within} of {n} requests ({within / n:.1%}) within one RTT\n"
                                  + "\n".join(outside[:20] + [_where(qeval)]))


def _scored(name: str):
    if name in ATTRIBUTION_XFAIL:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=ATTRIBUTION_XFAIL[name]))
    return name


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_truth_p99_is_the_impairment(qeval, scenario):
    """Precondition of the attribution test: in the ground truth (client log + emulator log) the
    scenario's p99 requests were hit by the injected impairment."""
    c = qeval.attribution[scenario]
    assert c.truth.requests, f"{scenario}: no requests in the client log"
    assert c.truth.impaired, f"{scenario}: the p99 was not made by the impairment: {c.truth.describe()}"


@pytest.mark.parametrize("scenario", [_scored(n) for n in EXPECTED])
def test_p99_attribution_names_the_impairment(qeval, scenario):
    """`tailscope stats`' attribution at p99: the signature charged the most delay is the injected
    impairment's (queries_check.EXPECTED)."""
    c = qeval.attribution[scenario]
    rows = ", ".join(f"{r['signature']}: {r['charged_delay_ms']} ms" for r in c.rows)
    assert c.top in c.expected, (f"{scenario}: top contributor {c.top!r} ({c.top_delay_ms} ms), expected "
                                 f"{'|'.join(c.expected)}; p99 >= {c.threshold_ms} ms, {c.level_queries} "
                                 f"queries, rows: {rows}; truth: {c.truth.describe()} {_where(qeval)}")


@pytest.mark.parametrize("scenario", CLEAN)
def test_clean_nothing_charged(qeval, scenario):
    """No query carries a signature or a delay, and the attribution has only its pseudo rows."""
    c = qeval.attribution[scenario]
    assert c.queries > 0
    charged = [(q["flow_id"], q["query_index"], q["signatures"], q["delays"]) for q in c.charged_queries]
    assert not charged, charged
    assert c.all_rows, "no attribution rows"
    named = [(r["level"], r["signature"], r["charged_delay_ms"]) for r in c.all_rows if r["signature"] not in PSEUDO]
    assert not named, named


@pytest.mark.parametrize("scenario", REPAIR_SCENARIOS)
def test_lost_requests_and_final_acks(qeval, scenario):
    """Issue 16: a request the capture first sees as the client's resend still opens its query,
    flagged `request_retransmitted`, its latency from the earliest copy seen; `end` is never before
    the last transmission of the response's bytes (a resend after a lost final ACK); query indices
    follow the requests — each against the client's log and the relay's drops
    (queries_check.check_repairs)."""
    c = qeval.repairs[scenario]
    assert c.exercised, f"{scenario}: the relay dropped nothing the check is about {_where(qeval)}"
    assert not c.problems, "\n".join(c.problems + [_where(qeval)])


def test_time_budget_against_the_relay_log(qeval):
    """Issue 27 (tests/lab/budget_check.py): a tail-loss response's loss-recovery parts within one
    RTT of the relay log's wait for the repair, a policed response's policing part within 20 % of
    the policer's drops' waits, and nothing charged to loss or queueing in the clean scenario;
    the share of qualifying queries at least the rows' target (0.90). The bufferbloat scenarios'
    queue is tbf's (sampled every 50 ms, not per packet): their queueing is scored in the pool."""
    rows = {r.signature: r for r in qeval.budget}
    for name in (LOSS_ROW, POLICING_ROW):
        r = rows[name]
        assert r.tp + r.fn > 0, f"no query qualified for {name}"
        assert r.recall >= r.target, "\n".join([repr(r)] + r.details[:10])
    clean = rows[CLEAN_ROW]
    assert clean.tp > 0 and clean.fp == 0, "\n".join(clean.details[:10])

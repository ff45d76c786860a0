"""One definition per figure (sql/README.md#one-definition-per-figure). The SQL layer defines the ISO
week, a lossy connection and how latency is charged to signatures (the tail attribution) once;
`tailscope stats`, the report, the dashboards and the marts query it. Two guards: the defining text
appears in one file only (a second definition written anywhere fails here), and on one dataset the
stats, the marts and the dashboards' panels give the same numbers.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("h3")

from support import demo as demo_data
from support.demo import WEEK

from support import corpus
from support.duck import rows
from support import duck
from tailscope.jobs.analytics.stats import Slice, compute_stats

ROOT = Path(__file__).resolve().parents[1]
# where the project computes figures: SQL, the Python packages and scripts, the dashboards
SOURCES = [
    p
    for d in ("sql", "jobs", "python", "scripts", "capture", "dashboards")
    for p in sorted((ROOT / d).rglob("*"))
    if p.suffix in (".sql", ".py", ".json") and p.is_file()
]

# (figure, the text only its definition writes, the one file allowed to hold it)
DEFINITIONS = [
    ("ISO week", r"%G-W%V|isocalendar\(", "sql/marts/005_weeks.sql"),
    ("lossy connection", r"retx_unknown", "sql/marts/010_flow_facts.sql"),
    ("signatures charged to a query", r"\['\(connection setup\)'\]", "sql/marts/015_attribution.sql"),
    ("delay charged to a signature", r"d\.delay_ns FOR d IN", "sql/marts/015_attribution.sql"),
    ("the tail of a group", r"latency_ns\s*>=", "sql/marts/015_attribution.sql"),
    ("QUIC tail reduction", r"quic_p99_ms\s*/|bootstrap_uniform\(|lowbias32", "sql/marts/070_quic_vs_tcp.sql"),
    ("a quantile's bootstrap", r"lgamma\(", "sql/marts/070_quic_vs_tcp.sql"),
    ("the parts of the time budget", r"\(\d+,\s*'spurious_retransmission'", "sql/marts/016_budget.sql"),
    ("a part's share of a tail", r"UNPIVOT", "sql/marts/016_budget.sql"),
    ("what changed week over week", r"MACRO what_changed_min_tail|design effect", "sql/marts/080_what_changed.sql"),
    ("loss signature", r"'fast_retransmit',\s*'tlp'", "sql/marts/070_quic_vs_tcp.sql"),
]


@pytest.mark.parametrize("figure,pattern,home", DEFINITIONS, ids=[d[0] for d in DEFINITIONS])
def test_a_figure_is_defined_in_one_file(figure, pattern, home):
    holders = sorted(str(p.relative_to(ROOT)) for p in SOURCES if re.search(pattern, p.read_text(errors="replace")))
    assert holders == [home], f"{figure}: defined in {holders}, expected only in {home} (query it from there)"


@pytest.mark.parametrize("consumer", ["jobs/analytics/stats.py", "scripts/make-dashboards.py", "sql/marts/050_signature_marts.sql",
                                      "sql/marts/070_quic_vs_tcp.sql"])
def test_the_consumers_call_the_attribution_macro(consumer):
    assert "tail_attribution(" in (ROOT / consumer).read_text()


@pytest.mark.parametrize("consumer,calls", [
    ("jobs/analytics/stats.py", ("tail_budget(", "budget_what_if(", "what_changed(")),
    ("scripts/make-dashboards.py", ("tail_budget(", "budget_what_if(", "what_changed_slices(")),
    ("jobs/analytics/report.py", ("mart_carrier_budget", "mart_week_budget", "what_changed_slices(")),
    ("sql/marts/055_budget_marts.sql", ("tail_budget(", "budget_what_if(")),
    ("sql/marts/070_quic_vs_tcp.sql", ("tail_budget(", "bootstrap_quantile(")),
    ("sql/marts/080_what_changed.sql", ("tail_budget(", "tail_of(", "bootstrap_quantile(")),
    ("dashboards/provisioning/alerting/tailscope.yaml", ("what_changed_slices(",)),
])
def test_the_consumers_call_the_budget_and_change_macros(consumer, calls):
    """Where the time went, what if and what changed come from sql/ (016, 080) in every consumer."""
    text = (ROOT / consumer).read_text()
    assert all(c in text for c in calls), [c for c in calls if c not in text]


@pytest.mark.parametrize("consumer", ["jobs/analytics/stats.py", "jobs/analytics/report.py", "scripts/make-dashboards.py"])
def test_the_consumers_call_the_quic_vs_tcp_macro(consumer):
    """stats, the report and the dashboards take QUIC vs TCP from sql/'s quic_vs_tcp (directly or
    through mart_quic_vs_tcp), never computing a percentile ratio or a bootstrap of their own."""
    text = (ROOT / consumer).read_text()
    assert "quic_vs_tcp(" in text or "mart_quic_vs_tcp" in text


# ----------------------------------------------------------------------------------------------
# the same numbers from every consumer


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    corpus.require_samples()
    return demo_data.analyze_demo(tmp_path_factory.mktemp("one-definition"))


@pytest.fixture(scope="module")
def con(demo):
    c = duck.connect(demo)
    yield c
    c.close()


def panel_sql(dashboard: str, title: str) -> str:
    """A panel's SQL with every template variable at "All" and no time limit."""
    def walk(panels):
        for p in panels:
            yield p
            yield from walk(p.get("panels", []))

    doc = json.loads((ROOT / "dashboards" / "json" / dashboard).read_text())
    panel = next(p for p in walk(doc["panels"]) if p.get("title") == title)
    sql = panel["targets"][0]["rawSql"]
    sql = re.sub(r"\$__timeFilter\([^()]*\)", "true", sql)
    return re.sub(r"\b\w+ IN \(\$\w+\)", "true", sql)


def test_lossy_share_is_the_same_everywhere(con, demo):
    assert [r["week"] for r in rows(con, "SELECT DISTINCT week FROM flow_facts")] == [WEEK]
    stats = compute_stats(demo)
    lossy = next(n for n in stats["network"] if n["metric"] == "lossy_connections")
    mart = rows(con, "SELECT lossy_flows, tcp_flows, lossy_flow_share FROM mart_week WHERE week = ?", [WEEK])[0]
    panel = rows(con, panel_sql("tailscope-overview.json", "Lossy TCP connections"))[0]
    assert lossy["numerator"] > 0, "the demo has lossy connections"
    assert (mart["lossy_flows"], mart["tcp_flows"]) == (lossy["numerator"], lossy["denominator"])
    assert mart["lossy_flow_share"] == pytest.approx(lossy["value"], abs=1e-6)
    assert panel["lossy_share"] == pytest.approx(lossy["value"], abs=1e-6)


def test_p99_attribution_is_the_same_everywhere(con, demo):
    """Per carrier and signature of the p99 tail: `tailscope stats --by carrier` level p99, the
    carrier signature mart and the carrier dashboard's tail panel."""
    stats = {
        (a["group"], a["signature"]): a
        for a in compute_stats(demo, Slice(week=[WEEK]), by="carrier")["attribution"]
        if a["level"] == "p99"
    }
    mart = {
        (r["carrier"], r["signature"]): r
        for r in rows(con, "SELECT * EXCLUDE (period_start) FROM mart_carrier_signatures WHERE week = ? AND tail_with > 0", [WEEK])
    }
    panel = {
        (r["carrier"], r["signature"]): r
        for r in rows(con, panel_sql("tailscope-carrier.json", "Signatures in each carrier's p99 tail"))
    }
    assert len(stats) >= 3 and set(stats) == set(mart) == set(panel)
    for key, s in stats.items():
        m, p = mart[key], panel[key]
        assert s["queries"] == m["tail_queries"] == p["tail_queries"], key
        assert s["queries_with"] == m["tail_with"] == p["tail_with"], key
        for got in (m["tail_delay_ms"], p["charged_delay_ms"]):
            assert (got is None) == (s["charged_delay_ms"] is None), key
            if got is not None:
                assert got == pytest.approx(s["charged_delay_ms"], abs=1e-3), key


def test_p99_budget_is_the_same_everywhere(con, demo):
    """Per carrier and part of the p99 tail's time budget: `tailscope stats --by carrier` (table
    budget, level p99), the carrier budget mart and the carrier dashboard's panel."""
    stats = {(b["group"], b["part"]): b for b in compute_stats(demo, Slice(week=[WEEK]), by="carrier")["budget"]
             if b["level"] == "p99" and b["time_ms"]}
    mart = {(r["carrier"], r["part"]): r for r in rows(con, "SELECT * FROM mart_carrier_budget WHERE week = ? AND level = 'p99' "
                                                          "AND part_ms > 0", [WEEK])}
    labels = {r["label"]: r["part"] for r in rows(con, "SELECT part, label FROM budget_parts")}
    panel = {(r["carrier"], labels[r["part"]]): r for r in rows(con, panel_sql("tailscope-carrier.json",
                                                                                "Where each carrier's p99 tail's time went"))}
    assert len(stats) >= 3 and set(stats) == set(mart) == set(panel)
    for key, s in stats.items():
        m, p = mart[key], panel[key]
        assert s["queries"] == m["tail_queries"] == p["tail_queries"], key
        assert s["share"] == pytest.approx(m["share"], abs=1e-6) and p["tail_share"] == pytest.approx(m["share"], abs=1e-9), key
        assert p["p99_without_it_ms"] == pytest.approx(m["without_ms"], abs=1e-6), key


# ----------------------------------------------------------------------------------------------
# the session defaults: one table in Rust (signatures/src/defaults.rs), read through the native module


def test_session_defaults_come_from_the_native_table():
    import argparse
    import inspect

    from tailscope import _native, api
    from tailscope.jobs.commands import analyze
    from tailscope.jobs.run.local import AnalyzeOptions

    d = _native.defaults()
    assert d == {"tcp_idle_timeout_s": 900.0, "udp_idle_timeout_s": 120.0, "tcp_closed_linger_s": 120.0,
                 "max_flows": 1_000_000, "batch_rows": 65_536}
    opts = AnalyzeOptions()
    assert {k: getattr(opts, k) for k in d} == d
    params = inspect.signature(api.batches).parameters
    assert {k: params[k].default for k in d if k in params} == {k: d[k] for k in params if k in d}
    parser = argparse.ArgumentParser()
    analyze.register(parser.add_subparsers())
    args = parser.parse_args(["analyze", "x.pcap", "--out", "o"])
    assert (args.tcp_idle_timeout, args.udp_idle_timeout, args.max_flows) == (
        d["tcp_idle_timeout_s"], d["udp_idle_timeout_s"], d["max_flows"])


@pytest.mark.parametrize("path", ["jobs/run/local.py", "jobs/commands/analyze.py", "python/tailscope/api.py"])
def test_no_session_default_written_in_python(path):
    text = (ROOT / path).read_text()
    assert not re.search(r"\b(900\.0|120\.0|1_000_000|65_536)\b", text), f"{path}: a session default written out again"

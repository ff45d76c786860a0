"""The query time budget in SQL, stats, the report and the dashboards (issue 27, items 3 and 4): the
part list is the Rust one; every tail's parts are shares <= 100 % that sum to 100 %, recomputed
here from the queries; the what-if and what-changed figures are what their definitions say; and
no share anywhere (stats, report, dashboards' panels) passes 100 %. Over the bundled samples with
the enrichment fixture and a synthetic previous week (tests/support/demo.py); the demo weeks'
version of the last check is in tests/test_demo_week.py."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

pytest.importorskip("h3")

from support import demo as demo_data
from support import corpus
from support.duck import rows
from support import duck
from support.demo import PREV, WEEK

from tailscope.jobs.analytics.stats import Slice, compute_stats, render

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    corpus.require_samples()
    out = demo_data.analyze_demo(tmp_path_factory.mktemp("budget") / "ds")
    demo_data.add_previous_week(out)
    return out


@pytest.fixture(scope="module")
def con(ds):
    c = duck.connect(ds)
    yield c
    c.close()


def nearest_rank(values, q):
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


# ----------------------------------------------------------------------------------------------
# the part list: one in Rust, one in SQL, the same


def rust_parts() -> list[str]:
    src = (ROOT / "signatures" / "src" / "budget.rs").read_text()
    order = re.search(r"pub const PARTS: \[Part; \d+\] = \[(.*?)\];", src, re.S).group(1)
    names = dict(re.findall(r"(\w+) => \"(\w+)\"", src[src.index("pub fn name(self)"):]))
    return [names[v] for v in re.findall(r"\w+", order)]


def test_parts_are_the_rust_list_and_the_queries_columns(con):
    from tailscope import _native

    sql_parts = [r["part"] for r in rows(con, "SELECT part FROM budget_parts ORDER BY ord")]
    assert sql_parts == rust_parts() and len(sql_parts) == 16
    columns = [f.name for f in _native.query_schema() if f.name.startswith("budget_")]
    assert columns == [f"budget_{p}_ns" for p in sql_parts]
    assert [r["budget_column"] for r in rows(con, "SELECT budget_column FROM budget_parts ORDER BY ord")] == columns


def test_query_budget_is_the_long_form(con):
    per_query = rows(con, """
        SELECT flow_id, query_index, any_value(latency_ns) AS latency_ns, sum(part_ns) AS total, count(*) AS parts,
               list(part ORDER BY ord) AS names
        FROM query_budget GROUP BY ALL""")
    assert per_query and len(per_query) == con.execute("SELECT count(*) FROM query_facts").fetchone()[0]
    names = rust_parts()
    for q in per_query:
        assert q["total"] == q["latency_ns"] and q["parts"] == 16 and q["names"] == names, q


# ----------------------------------------------------------------------------------------------
# where the tail's time went


def test_carrier_budget_is_recomputed_from_the_queries(con):
    """mart_carrier_budget at every level: the tail is the queries at or above the nearest-rank
    percentile, a part's time their summed part, its share that over their summed latency."""
    facts = rows(con, "SELECT * FROM query_facts WHERE week = ?", [WEEK])
    parts = rust_parts()
    mart = rows(con, "SELECT * FROM mart_carrier_budget WHERE week = ?", [WEEK])
    assert {r["carrier"] for r in mart} == {q["carrier"] for q in facts}
    for r in mart:
        lat = [q for q in facts if q["carrier"] == r["carrier"]]
        level = {"all": 0, "p50": 0.5, "p95": 0.95, "p99": 0.99}[r["level"]]
        t = nearest_rank([q["latency_ns"] for q in lat], level) if level else 0
        tail = [q for q in lat if q["latency_ns"] >= t]
        assert r["tail_queries"] == len(tail)
        total = sum(q["latency_ns"] for q in tail)
        part = sum(q[f"budget_{r['part']}_ns"] for q in tail)
        assert r["part_ms"] == pytest.approx(part / 1e6) and r["tail_latency_ms"] == pytest.approx(total / 1e6)
        assert r["share"] == pytest.approx(part / total)
        assert r["mean_ms"] == pytest.approx(part / len(tail) / 1e6)
    for (carrier, level), group in _groups(mart, ("carrier", "level")).items():
        assert [g["part"] for g in sorted(group, key=lambda g: g["ord"])] == parts, "every part named, in order"
        assert sum(g["share"] for g in group) == pytest.approx(1.0, abs=1e-9), (carrier, level)
        assert all(0 <= g["share"] <= 1 for g in group)


def _groups(items, keys):
    out: dict[tuple, list] = {}
    for r in items:
        out.setdefault(tuple(r[k] for k in keys), []).append(r)
    return out


def test_every_budget_mart_share_is_a_share(con):
    for view in ("mart_week_budget", "mart_carrier_budget", "mart_hexagon_budget", "mart_carrier_hexagon_budget",
                 "mart_site_budget", "mart_hour_budget"):
        bad = rows(con, f"SELECT * FROM {view} WHERE share < 0 OR share > 1 + 1e-12")
        assert not bad, (view, bad[:3])
        sums = rows(con, f"SELECT level, * EXCLUDE (level, ord, part, label, share, part_ms, mean_ms, queries_with, without_ms, saved_ms), "
                         f"sum(share) AS total, count(*) AS parts FROM {view} GROUP BY ALL")
        assert sums and all(abs(s["total"] - 1) < 1e-9 and s["parts"] == 16 for s in sums if s["total"] is not None), view


def test_what_if_is_the_percentile_without_the_part(con):
    facts = rows(con, "SELECT * FROM query_facts WHERE week = ?", [WEEK])
    mart = rows(con, "SELECT * FROM mart_carrier_budget WHERE week = ? AND level = 'p99'", [WEEK])
    checked = 0
    for r in mart:
        lat = [q for q in facts if q["carrier"] == r["carrier"]]
        without = nearest_rank([q["latency_ns"] - q[f"budget_{r['part']}_ns"] for q in lat], 0.99)
        assert r["without_ms"] == pytest.approx(without / 1e6), r
        assert r["saved_ms"] == pytest.approx(r["threshold_ms"] - without / 1e6) and r["saved_ms"] >= 0
        checked += r["saved_ms"] > 0
    assert checked, "some part's removal moves some carrier's p99"


def test_stats_budget_is_the_mart(ds, con):
    stats = {(r["group"], r["level"], r["part"]): r
             for r in compute_stats(ds, Slice(week=[WEEK]), by="carrier")["budget"]}
    mart = {(r["carrier"], r["level"], r["part"]): r for r in rows(con, "SELECT * FROM mart_carrier_budget WHERE week = ?", [WEEK])}
    assert set(stats) == set(mart) and len(stats) >= 2 * 4 * 16
    for k, s in stats.items():
        m = mart[k]
        assert s["queries"] == m["tail_queries"] and s["share"] == pytest.approx(m["share"], abs=1e-6), k
        assert s["mean_ms"] == pytest.approx(m["mean_ms"], abs=1e-3) and s["time_ms"] == pytest.approx(m["part_ms"], abs=1e-3)
        if k[1] != "all":
            assert s["without_ms"] == pytest.approx(m["without_ms"], abs=1e-3), k


# ----------------------------------------------------------------------------------------------
# what changed


def test_what_changed_per_carrier(ds, con):
    """The synthetic previous week is this week halved (less one carrier): every carrier present in
    both has value = this week's nearest-rank percentile, value_prev last week's, the parts' means
    per tail query as recomputed, and the carrier the previous week lacks reads as new."""
    facts = rows(con, "SELECT * FROM query_facts")
    got = rows(con, "SELECT * FROM what_changed_slices(?) WHERE slice = 'carrier'", [WEEK])
    assert {r["level"] for r in got} == {"p50", "p95", "p99"}
    for r in got:
        q = {"p50": 0.5, "p95": 0.95, "p99": 0.99}[r["level"]]
        cur = [f for f in facts if f["carrier"] == r["carrier"] and f["week"] == WEEK]
        prev = [f for f in facts if f["carrier"] == r["carrier"] and f["week"] == PREV]
        assert r["value_ms"] == pytest.approx(nearest_rank([f["latency_ns"] for f in cur], q) / 1e6)
        if r["carrier"] == demo_data.DROPPED:
            assert not prev and r["value_prev_ms"] is None and r["delta_ms"] is None and not r["beyond_noise"]
            continue
        t_prev = nearest_rank([f["latency_ns"] for f in prev], q)
        assert r["value_prev_ms"] == pytest.approx(t_prev / 1e6)
        assert r["delta_ms"] == pytest.approx(r["value_ms"] - r["value_prev_ms"])
        assert r["delta_low_ms"] <= r["delta_high_ms"]
        assert r["beyond_noise"] == (r["enough"] and (r["delta_low_ms"] > 0 or r["delta_high_ms"] < 0))
        assert r["enough"] == (min(r["tail_queries"], r["tail_queries_prev"]) >= r["min_tail"])
        assert 1 <= r["effective_queries"] <= r["queries"] and 0 < r["p_value"] <= 1
        tail_prev = [f for f in prev if f["latency_ns"] >= t_prev]
        parts = {x["part"]: x for x in r["parts"]}
        assert list(parts) == rust_parts()
        for name, x in parts.items():
            mean_prev = sum(f[f"budget_{name}_ns"] for f in tail_prev) / len(tail_prev) / 1e6
            assert x["mean_prev_ms"] == pytest.approx(mean_prev, abs=1e-6)
            assert x["is_new"] == (x["mean_prev_ms"] == 0 and x["mean_ms"] > 0)
        # the part that moved most the way the percentile did
        sign = 1 if r["delta_ms"] >= 0 else -1
        assert parts[r["top_part"]]["delta_ms"] * sign == pytest.approx(max(x["delta_ms"] * sign for x in parts.values()))


def test_what_changed_of_a_doubled_week(con):
    """This week is last week doubled (by construction of the synthetic previous week), the same
    queries: every percentile doubled, every part's mean per tail query grew or stayed, the interval
    lies on the side of the change, and a part that took no time last week took none this week."""
    got = rows(con, "SELECT * FROM what_changed_slices(?) WHERE slice = 'carrier' AND carrier <> ?", [WEEK, demo_data.DROPPED])
    assert got
    for r in got:
        assert r["value_ms"] == pytest.approx(2 * r["value_prev_ms"], abs=1e-3)
        assert r["delta_high_ms"] > 0
        assert all(x["delta_ms"] >= -1e-3 and not x["is_new"] for x in r["parts"])
        assert r["top_part_delta_ms"] == pytest.approx(max(x["delta_ms"] for x in r["parts"]))


def test_stats_what_changed_is_the_macro(ds, con):
    stats = compute_stats(ds, Slice(), by="carrier")["what_changed"]
    mart = {(r["carrier"], r["level"]): r for r in rows(con, "SELECT * FROM what_changed_slices(?) WHERE slice = 'carrier'", [WEEK])}
    assert stats and {(s["group"], s["level"]) for s in stats} == set(mart)
    for s in stats:
        m = mart[(s["group"], s["level"])]
        assert s["week"] == WEEK and s["previous_week"] == PREV
        for k in ("value_ms", "value_prev_ms", "delta_ms", "delta_low_ms", "delta_high_ms"):
            assert (s[k] is None) == (m[k] is None) and (s[k] is None or s[k] == pytest.approx(m[k], abs=1e-3)), k
        assert s["beyond_noise"] == m["beyond_noise"] and s["top_part"] == m["top_part"]


# ----------------------------------------------------------------------------------------------
# no share past 100 %, anywhere


PERCENT = re.compile(r"(?<![\w.+\-−±])(\d+(?:\.\d+)?)\s?%")


def shares_in_text(text: str) -> list[float]:
    """Every unsigned percentage written in a text: a signed one (+44 %) is a change, not a share."""
    return [float(m) for m in PERCENT.findall(text)]


def test_percent_reader():
    assert shares_in_text("policing 12% (3 of 4); 100 % line; +44 % p99; -5% change; 0.5% x") == [12.0, 100.0, 0.5]


def share_values(obj, key=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from share_values(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from share_values(v, key)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and ("share" in key or key.endswith("_rate")):
        yield key, obj


def check_shares(ds: Path, con, week: str, tmp: Path) -> int:
    """Every share in stats (json, text, markdown), the report (Markdown and HTML) and the
    dashboards' panels, over a dataset: at most 100 %. Returns how many were checked."""
    from tailscope.jobs.analytics.report import ReportOptions, write_report
    from test_dashboards import FILES, data_time_range, interpolate, load, resolve_variables, walk_panels

    n = 0
    for by in (None, "carrier", "hexagon"):
        tables = compute_stats(ds, Slice(week=[week]), by=by)
        values = list(share_values(json.loads(render(tables, "json"))))
        assert all(v <= 1 + 1e-9 for _, v in values), [kv for kv in values if kv[1] > 1][:5]
        n += len(values)
        for fmt in ("text", "markdown"):
            texts = shares_in_text(render(tables, fmt))
            assert all(v <= 100 for v in texts), [v for v in texts if v > 100][:5]
            n += len(texts)
    paths = write_report(ds, tmp, ReportOptions(week=week))
    for path in (paths.markdown, paths.html):
        text = re.sub(r"<svg.*?</svg>", "", path.read_text(), flags=re.S) if path.suffix == ".html" else path.read_text()
        texts = shares_in_text(text)
        assert all(v <= 100 for v in texts), (path.name, [v for v in texts if v > 100][:5])
        n += len(texts)
    svg_shares = [float(m) for m in re.findall(r": (\d+(?:\.\d+)?) %</title>", paths.html.read_text())]
    assert all(v <= 100 for v in svg_shares)
    time_range = data_time_range(con)
    for f in FILES:
        dash = load(f)
        selected = resolve_variables(con, dash, time_range, {})
        for panel in walk_panels(dash["panels"]):
            for t in panel.get("targets", []):
                result = con.sql(interpolate(t["rawSql"], selected, time_range)).to_arrow_table()
                for c in result.column_names:
                    if "share" in c or c.endswith("_rate"):
                        vals = [v for v in result.column(c).to_pylist() if v is not None]
                        assert all(0 <= v <= 1 + 1e-9 for v in vals), (f.name, panel["title"], c, max(vals))
                        n += len(vals)
    return n


def test_every_share_is_at_most_100_percent(ds, con, tmp_path):
    assert check_shares(ds, con, WEEK, tmp_path) > 100

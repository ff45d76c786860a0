"""The marts and canned questions of sql/ on the demo (the bundled samples with the enrichment
fixture): the marts give the numbers `tailscope stats` gives, every question's rows are checked
against an independent computation over the Parquet files (pyarrow + Python, not the views), and
week-over-week is checked on the demo plus a synthetic previous week (the same traffic shifted by
7 days, with every latency halved and one carrier left out)."""
from __future__ import annotations

import datetime as dt
import math
import shutil
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("h3")

# one worker builds this module's dataset once (pytest -n with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("marts")

from support import demo as demo_data
from support.demo import DROPPED, PREV, WEEK
from support import corpus
from support.duck import rows
from support import duck
from tailscope.jobs.analytics.stats import Slice, compute_stats


def nearest_rank(values: list, q: float):
    v = sorted(values)
    return v[max(0, math.ceil(q * len(v)) - 1)]


def table(ds: Path, name: str) -> list[dict]:
    """A dataset table's rows, timestamps as integer nanoseconds."""
    parts = sorted((ds / name).glob("*/*.parquet"))
    if not parts:
        return []
    t = pa.concat_tables([pq.read_table(p, partitioning=None) for p in parts], promote_options="default")
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type):
            t = t.set_column(i, f.name, t[f.name].cast(pa.int64()))
    return t.to_pylist()


def iso_week(ns: int) -> str:
    y, w, _ = dt.datetime.fromtimestamp(ns // 10**9, tz=dt.timezone.utc).isocalendar()
    return f"{y}-W{w:02d}"


class Truth:
    """Per complete query: its latency (setup included for first queries), its flow's dimensions
    and week, its signatures and the delay charged to each — from the Parquet files."""

    def __init__(self, ds: Path):
        flows = {f["flow_id"]: f for f in table(ds, "flows")}
        self.flows = flows
        self.queries = []
        for q in table(ds, "queries"):
            if not q["complete"] or q["latency_ns"] is None or q["flow_id"] not in flows:
                continue
            f = flows[q["flow_id"]]
            setup = (q["setup_ns"] or 0) if q["query_index"] == 0 else 0
            delays = defaultdict(int)
            for d in q["delays"] or []:
                delays[d["signature"]] += d["delay_ns"]
            sigs = set(q["signatures"] or []) | set(delays)
            charged = {s: delays.get(s, 0) for s in sigs}
            if setup > 0:
                charged["(connection setup)"] = setup
            self.queries.append({
                "lat": q["latency_ns"] + setup, "week": iso_week(f["start"]), "carrier": f["carrier"],
                "h3_cell": f["h3_cell"], "site": f["site"], "flow_id": q["flow_id"], "sigs": sigs, "charged": charged,
            })

    def select(self, week=None, **dims) -> list[dict]:
        return [q for q in self.queries if (week is None or q["week"] == week) and all(q[k] == v for k, v in dims.items())]

    @staticmethod
    def tail(qs: list[dict]) -> tuple[int, list[dict]]:
        p99 = nearest_rank([q["lat"] for q in qs], 0.99)
        return p99, [q for q in qs if q["lat"] >= p99]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    corpus.require_samples()
    return demo_data.analyze_demo(tmp_path_factory.mktemp("marts-demo"))


@pytest.fixture(scope="module")
def two_weeks(demo, tmp_path_factory) -> Path:
    ds = tmp_path_factory.mktemp("marts-two-weeks") / "ds"
    shutil.copytree(demo, ds, ignore=shutil.ignore_patterns("tailscope.duckdb"))
    demo_data.add_previous_week(ds)
    return ds


@pytest.fixture(scope="module")
def con(demo):
    c = duck.connect(demo)
    yield c
    c.close()


@pytest.fixture(scope="module")
def con2(two_weeks):
    c = duck.connect(two_weeks)
    yield c
    c.close()


@pytest.fixture(scope="module")
def truth(demo) -> Truth:
    return Truth(demo)


@pytest.fixture(scope="module")
def truth2(two_weeks) -> Truth:
    return Truth(two_weeks)


# ----------------------------------------------------------------------------------------------
# facts and marts


def test_query_facts_are_the_complete_queries(con, truth):
    assert truth.queries, "the demo has complete queries"
    got = sorted(r["latency_ns"] for r in rows(con, "SELECT latency_ns FROM query_facts"))
    assert got == sorted(q["lat"] for q in truth.queries)
    assert rows(con, "SELECT count(*) AS n FROM flow_facts")[0]["n"] == len(truth.flows)


def test_mart_carrier_equals_tailscope_stats(con, demo):
    """Per carrier of the week: the same queries, p99 threshold, lossy share and flows as
    `tailscope stats --week W --by carrier` (which reads the Parquet files its own way)."""
    stats = compute_stats(demo, Slice(week=[WEEK]), by="carrier")
    marts = {r["carrier"]: r for r in rows(con, "SELECT * EXCLUDE (period_start) FROM mart_carrier WHERE week = ?", [WEEK])}
    assert set(marts) == {r["group"] for r in stats["overview"]}
    for ov in stats["overview"]:
        m = marts[ov["group"]]
        assert m["flows"] == ov["flows"] and m["tcp_flows"] == ov["tcp_flows"]
        assert m["queries"] == ov["complete_queries"]
        p99 = next(a for a in stats["attribution"] if a["group"] == ov["group"] and a["level"] == "p99")
        assert m["p99_ms"] == pytest.approx(p99["threshold_ms"], abs=1e-3)
        lossy = next(n for n in stats["network"] if n["group"] == ov["group"] and n["metric"] == "lossy_connections")
        assert m["lossy_flows"] == lossy["numerator"]
        assert m["lossy_flow_share"] == pytest.approx(lossy["value"] or 0, abs=1e-6)


def test_signature_mart_equals_tailscope_stats_attribution(con, demo):
    """mart_carrier_signatures at the `all` and `p99` levels of stats attribution."""
    stats = compute_stats(demo, Slice(week=[WEEK]), by="carrier")
    sigs = {(r["carrier"], r["signature"]): r for r in rows(con, "SELECT * EXCLUDE (period_start) FROM mart_carrier_signatures WHERE week = ?", [WEEK])}
    checked = 0
    for a in stats["attribution"]:
        if a["level"] not in ("all", "p99"):
            continue
        m = sigs[(a["group"], a["signature"])]
        if a["level"] == "all":
            assert m["queries"] == a["queries"] and m["queries_with"] == a["queries_with"]
            assert m["rate"] == pytest.approx(a["share"], abs=1e-6)
            assert (m["delay_ms"] is None) == (a["charged_delay_ms"] is None)
            if a["charged_delay_ms"] is not None:
                assert m["delay_ms"] == pytest.approx(a["charged_delay_ms"], abs=1e-3)
            for k in ("median_with_ms", "median_without_ms"):
                assert (m[k] is None and a[k] is None) or m[k] == pytest.approx(a[k], abs=1e-3)
        else:
            assert m["tail_queries"] == a["queries"] and m["tail_with"] == a["queries_with"]
            assert m["p99_ms"] == pytest.approx(a["threshold_ms"], abs=1e-3)
            if a["charged_delay_ms"] is not None:
                assert m["tail_delay_ms"] == pytest.approx(a["charged_delay_ms"], abs=1e-3)
        checked += 1
    assert checked >= 8


def test_every_grain_partitions_the_queries(con, truth):
    for grain in ("week", "carrier", "hexagon", "carrier_hexagon", "site", "network_type", "hour", "carrier_hour"):
        total = rows(con, "SELECT sum(queries) AS n, sum(flows) AS f FROM latency_mart(?)", [grain])[0]
        assert total["n"] == len(truth.queries), grain
        assert total["f"] == len(truth.flows), grain


def test_marts_do_not_depend_on_the_session_time_zone(demo):
    con = duck.connect(demo)
    try:
        sql = ("SELECT week, epoch(period_start) AS t, carrier, queries, p99_ms FROM latency_mart('carrier_hour') "
               "ORDER BY ALL")
        utc = rows(con, sql)
        con.execute("SET TimeZone = 'Asia/Kolkata'")  # +05:30: hour and week boundaries would move
        assert rows(con, sql) == utc
        assert rows(con, "SELECT DISTINCT week FROM flow_facts") == [{"week": WEEK}]
    finally:
        con.close()


def test_datasets_without_enrichment_columns_still_build(demo, tmp_path):
    """Runs written before enrichment existed lack its columns: the marts read them as unknown."""
    ds = tmp_path / "plain"
    shutil.copytree(demo, ds, ignore=shutil.ignore_patterns("tailscope.duckdb"))
    from tailscope.jobs.enrichment.enrich import ENRICHMENT_COLUMNS

    for part in [*ds.glob("flows/*/*.parquet"), *ds.glob("queries/*/*.parquet")]:
        t = pq.read_table(part, partitioning=None)
        pq.write_table(t.drop_columns([c for c in ENRICHMENT_COLUMNS if c in t.column_names]), part)
    con = duck.connect(ds)
    try:
        assert rows(con, "SELECT DISTINCT carrier, h3_cell, site FROM query_facts") == [
            {"carrier": "unknown", "h3_cell": "unknown", "site": "unknown"}]
        assert rows(con, "SELECT count(*) AS n FROM worst_hexagons(NULL, NULL, 10, 1)")[0]["n"] == 0
    finally:
        con.close()


# ----------------------------------------------------------------------------------------------
# Q1 worst hexagons


@pytest.mark.parametrize("carrier", ["Northwind Mobile", None])
def test_worst_hexagons(con, truth, carrier):
    got = rows(con, "SELECT * FROM worst_hexagons(?, ?, 10, 1)", [carrier.upper() if carrier else None, WEEK])
    by_cell = defaultdict(list)
    for q in truth.select(WEEK, **({"carrier": carrier} if carrier else {})):
        if q["h3_cell"] != "unknown":
            by_cell[q["h3_cell"]].append(q)
    assert len(got) == len(by_cell) >= 3
    assert [r["rank"] for r in got] == list(range(1, len(got) + 1))
    assert [r["p99_ms"] for r in got] == sorted((r["p99_ms"] for r in got), reverse=True)
    for r in got:
        qs = by_cell[r["h3_cell"]]
        assert r["carrier"] == (carrier or "(all)")
        assert r["queries"] == len(qs)
        assert r["p99_ms"] == pytest.approx(nearest_rank([q["lat"] for q in qs], 0.99) / 1e6)
        assert r["p50_ms"] == pytest.approx(nearest_rank([q["lat"] for q in qs], 0.5) / 1e6)
        _, tail = Truth.tail(qs)
        charged = defaultdict(int)
        for q in tail:
            for s, d in q["charged"].items():
                charged[s] += d
        if charged:
            best = max(charged.values())
            assert charged[r["top_signature"]] == best
            assert r["top_signature_tail_delay_ms"] == pytest.approx(best / 1e6)
            assert r["top_signature_tail_delay_share"] == pytest.approx(best / sum(q["lat"] for q in tail))
        else:
            assert r["top_signature"] is None


def test_worst_hexagons_limits(con):
    assert len(rows(con, "SELECT * FROM worst_hexagons(NULL, NULL, 2, 1)")) == 2
    many = rows(con, "SELECT h3_cell, queries FROM worst_hexagons(NULL, NULL, 100, 1)")
    threshold = sorted(r["queries"] for r in many)[len(many) // 2]
    kept = rows(con, "SELECT h3_cell, queries FROM worst_hexagons(NULL, NULL, 100, ?)", [threshold])
    assert kept and all(r["queries"] >= threshold for r in kept) and len(kept) < len(many)
    assert rows(con, "SELECT * FROM worst_hexagons('no such carrier', NULL, 10, 1)") == []
    assert rows(con, "SELECT * FROM worst_hexagons(NULL, '2020-W01', 10, 1)") == []


# ----------------------------------------------------------------------------------------------
# Q2 which signature explains the p99 in a hexagon


def test_p99_explained(con, truth):
    cell = rows(con, "SELECT h3_cell FROM worst_hexagons(NULL, NULL, 1, 1)")[0]["h3_cell"]
    got = rows(con, "SELECT * FROM p99_explained(?, NULL, ?)", [cell, WEEK])
    qs = truth.select(WEEK, h3_cell=cell)
    p99, tail = Truth.tail(qs)
    expected_sigs = {s for q in qs for s in q["charged"]} | ({"(none)"} if any(not q["sigs"] for q in qs) else set())
    assert {r["signature"] for r in got} == expected_sigs
    tail_latency = sum(q["lat"] for q in tail)
    for r in got:
        s = r["signature"]
        has = (lambda q: not q["sigs"]) if s == "(none)" else (lambda q, s=s: s in q["charged"])
        assert r["p99_ms"] == pytest.approx(p99 / 1e6)
        assert r["tail_queries"] == len(tail)
        assert r["tail_with"] == sum(1 for q in tail if has(q))
        assert r["rate"] == pytest.approx(sum(1 for q in qs if has(q)) / len(qs))
        if s == "(none)":
            assert r["tail_delay_ms"] is None
        else:
            d = sum(q["charged"][s] for q in tail if s in q["charged"])
            assert r["tail_delay_ms"] == pytest.approx(d / 1e6)
            assert r["tail_delay_share"] == pytest.approx(d / tail_latency)
    delays = [r["tail_delay_ms"] for r in got if r["tail_delay_ms"] is not None]
    assert delays == sorted(delays, reverse=True), "heaviest first"
    # per carrier: the same cell restricted to one carrier
    carrier = qs[0]["carrier"]
    one = rows(con, "SELECT * FROM p99_explained(?, ?, NULL)", [cell.upper(), carrier.lower()])
    assert one and all(r["carrier"] == carrier for r in one)
    assert one[0]["queries"] == len(truth.select(WEEK, h3_cell=cell, carrier=carrier))


# ----------------------------------------------------------------------------------------------
# Q3 week over week


def test_week_helpers(con):
    r = rows(con, "SELECT previous_week('2026-W01') AS a, previous_week('2021-W01') AS b, previous_week('2026-W47') AS c, "
                  "CAST(iso_week_start('2020-W53') AS VARCHAR) AS d, CAST(iso_week_start('2026-W47') AS VARCHAR) AS e, latest_week() AS f")[0]
    assert r == {"a": "2025-W52", "b": "2020-W53", "c": "2026-W46", "d": "2020-12-28", "e": "2026-11-16", "f": WEEK}
    for wk in ("2019-W01", "2020-W53", "2024-W52", "2026-W10"):
        monday = dt.date.fromisocalendar(int(wk[:4]), int(wk[6:]), 1)
        assert rows(con, "SELECT CAST(iso_week_start(?) AS VARCHAR) AS d", [wk])[0]["d"] == monday.isoformat()


def test_week_over_week_on_one_week(con):
    got = rows(con, "SELECT * FROM week_over_week('carrier', NULL)")
    assert got and all(r["week"] == WEEK and r["previous_week"] == PREV for r in got)
    assert all(r["queries_prev"] is None and r["p99_ms_delta"] is None for r in got)


def test_week_over_week(con2, truth2):
    got = {r["carrier"]: r for r in rows(con2, "SELECT * FROM week_over_week('carrier', ?)", [WEEK])}
    carriers = {q["carrier"] for q in truth2.select(WEEK)}
    assert set(got) == carriers and DROPPED in carriers
    for c, r in got.items():
        cur = [q["lat"] for q in truth2.select(WEEK, carrier=c)]
        prev = [q["lat"] for q in truth2.select(PREV, carrier=c)]
        assert r["queries"] == len(cur)
        assert r["p99_ms"] == pytest.approx(nearest_rank(cur, 0.99) / 1e6)
        if c == DROPPED:
            assert not prev and r["queries_prev"] is None and r["p99_ms_prev"] is None and r["p99_ms_delta"] is None
            continue
        assert r["queries_prev"] == len(prev) == len(cur)
        assert r["p99_ms_prev"] == pytest.approx(nearest_rank(prev, 0.99) / 1e6)
        assert r["p99_ms_delta"] == pytest.approx(r["p99_ms"] - r["p99_ms_prev"])
        assert r["p99_ms_delta"] > 0 and r["p99_change"] == pytest.approx(r["p99_ms"] / r["p99_ms_prev"] - 1)
        assert r["p50_ms_delta"] == pytest.approx((nearest_rank(cur, 0.5) - nearest_rank(prev, 0.5)) / 1e6)
    # the latest week is the default; the week before has nothing before it
    assert rows(con2, "SELECT count(*) AS n FROM week_over_week('carrier', NULL)")[0]["n"] == len(got)
    before = rows(con2, "SELECT * FROM week_over_week('hexagon', ?)", [PREV])
    assert before and all(r["queries_prev"] is None for r in before)


def test_signature_week_over_week(con2, truth2):
    got = rows(con2, "SELECT * FROM signature_week_over_week('carrier', ?)", [WEEK])
    assert got
    for r in got:
        if r["signature"] == "(none)" or r["carrier"] == DROPPED:
            continue
        for week, key in ((WEEK, "tail_delay_ms"), (PREV, "tail_delay_ms_prev")):
            qs = truth2.select(week, carrier=r["carrier"])
            _, tail = Truth.tail(qs)
            d = sum(q["charged"].get(r["signature"], 0) for q in tail)
            assert (r[key] or 0) == pytest.approx(d / 1e6), (r["carrier"], r["signature"], week)
    deltas = [abs((r["tail_delay_ms"] or 0) - (r["tail_delay_ms_prev"] or 0)) for r in got]
    assert deltas == sorted(deltas, reverse=True)


# ----------------------------------------------------------------------------------------------
# Q4 worst flows


def test_worst_flows(con, truth):
    got = rows(con, "SELECT rank, flow_id, community_id, worst_latency_ms, queries, carrier FROM worst_flows(NULL, 5)")
    assert [r["rank"] for r in got] == [1, 2, 3, 4, 5]
    worst = defaultdict(int)
    for q in truth.select(WEEK):
        worst[q["flow_id"]] = max(worst[q["flow_id"]], q["lat"])
    expected = sorted(worst.values(), reverse=True)[:5]
    assert [r["worst_latency_ms"] for r in got] == pytest.approx([v / 1e6 for v in expected])
    for r in got:
        assert worst[r["flow_id"]] / 1e6 == pytest.approx(r["worst_latency_ms"])
        assert r["community_id"] == truth.flows[r["flow_id"]]["community_id"]
        # the id drills down to the packets
        assert rows(con, "SELECT count(*) AS n FROM packets WHERE flow_id = ?", [r["flow_id"]])[0]["n"] > 0

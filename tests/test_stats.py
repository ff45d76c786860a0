"""`tailscope stats` on the bundled samples enriched with the synthetic fixture: every table
present, numbers consistent with each other and with independent DuckDB/Python counts, slices
that partition the flows, and every --format parses."""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("h3")

from support import corpus
from tailscope.jobs.analytics.db import packets_view
from tailscope.cli import main as cli_main
from tailscope.jobs.analytics.stats import (
    PERCENTILES,
    Slice,
    StatsError,
    compute_stats,
    parse_csv_sections,
    render,
)
from tailscope.jobs.enrichment.enrich import ENRICHMENT_COLUMNS, EnrichmentOptions, enrich_dataset

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
FIXTURE = ROOT / "tests" / "fixtures" / "enrichment"
NETWORK_METRICS = [
    "rtt",
    "rtt_stddev_connection",
    "rtt_stddev_all",
    "retransmitted_packets",
    "loss_rate_lossy",
    "lossy_connections",
    "lossy_establishment",
    "lossy_data",
    "retx_delay",
    "retx_per_segment",
]


def _options() -> EnrichmentOptions:
    return EnrichmentOptions(
        prefixes=[FIXTURE / "prefixes.csv"], sessions=[FIXTURE / "sessions.csv"], regions=FIXTURE / "regions.csv", site="lab1"
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    """The samples as a dataset without enrichment columns (as written before enrichment existed)."""
    import pyarrow.parquet as pq
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    corpus.require_samples()
    out = tmp_path_factory.mktemp("samples-plain")
    analyze([str(SAMPLES)], out, AnalyzeOptions(progress=False))
    for part in [*out.glob("flows/*/*.parquet"), *out.glob("queries/*/*.parquet")]:
        table = pq.read_table(part, partitioning=None)
        pq.write_table(table.drop_columns([c for c in ENRICHMENT_COLUMNS if c in table.column_names]), part)
    return out


@pytest.fixture(scope="module")
def ds(tmp_path_factory) -> Path:
    """The samples analysed with the enrichment fixture (through the engine when it takes
    enrichment options, else enriched in place afterwards)."""
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    corpus.require_samples()
    out = tmp_path_factory.mktemp("samples-enriched")
    if any(f.name == "enrichment" for f in dataclasses.fields(AnalyzeOptions)):
        analyze([str(SAMPLES)], out, AnalyzeOptions(progress=False, enrichment=_options()))
    else:
        analyze([str(SAMPLES)], out, AnalyzeOptions(progress=False))
        enrich_dataset(out, _options())
    return out


@pytest.fixture(scope="module")
def tables(ds) -> dict:
    return compute_stats(ds)


def sql(ds: Path, query: str):
    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    for t in ("flows", "queries"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{ds}/{t}/*/*.parquet', hive_partitioning=true)")
    packets_view(con, f"read_parquet('{ds}/packets/*/*.parquet', hive_partitioning=true)")
    return con.execute(query).fetchall()


def metric(tables: dict, name: str, group: str = "all") -> dict:
    (row,) = [r for r in tables["network"] if r["metric"] == name and r["group"] == group]
    return row


def nearest_rank(values: list, q: float):
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


# --- the tables ---------------------------------------------------------------------------------


def test_every_table_present(tables):
    assert set(tables) == {"overview", "network", "budget", "what_changed", "attribution", "quic_vs_tcp"}
    assert [r["metric"] for r in tables["network"]] == NETWORK_METRICS
    assert {r["level"] for r in tables["budget"]} == {"all", "p50", "p95", "p99"}
    assert {r["level"] for r in tables["what_changed"]} == {"p50", "p95", "p99"}
    assert tables["overview"][0]["flows"] > 0 and tables["attribution"]
    assert {r["level"] for r in tables["attribution"]} == {"all", "p50", "p95", "p99"}


def test_lossy_connections_match_an_independent_count(ds, tables):
    """Lossy = the flow has a retransmitted packet (counted from the packets table, not from the
    flow counters the stats use)."""
    ((lossy, tcp, est, data),) = sql(
        ds,
        """WITH r AS (SELECT flow_id, count(*) AS n, count(*) FILTER (WHERE (flags & 2) <> 0) AS syn,
                             count(*) FILTER (WHERE payload_len > 0) AS data
                      FROM packets WHERE retx_cause IS NOT NULL GROUP BY flow_id)
           SELECT count(r.flow_id), count(*), count(*) FILTER (WHERE r.syn > 0), count(*) FILTER (WHERE r.data > 0)
           FROM flows f LEFT JOIN r USING (flow_id) WHERE f.protocol = 'tcp'""",
    )
    row = metric(tables, "lossy_connections")
    assert (row["numerator"], row["denominator"]) == (lossy, tcp)
    assert row["value"] == pytest.approx(lossy / tcp)
    assert lossy > 0  # the samples do lose packets
    assert metric(tables, "lossy_establishment")["numerator"] == est
    assert metric(tables, "lossy_data")["numerator"] == data
    assert metric(tables, "lossy_establishment")["denominator"] == lossy


def test_retransmissions_match_independent_counts(ds, tables):
    rows = sql(ds, "SELECT retx_delay_ns, flow_id, direction, seq FROM packets WHERE retx_cause IS NOT NULL")
    ((segments,),) = sql(ds, "SELECT count(*) FROM packets WHERE ip_proto = 6 AND (payload_len > 0 OR (flags & 3) <> 0)")
    r = metric(tables, "retransmitted_packets")
    assert r["numerator"] == len(rows) and r["denominator"] == segments
    delays = [d for d, *_ in rows if d is not None]
    d = metric(tables, "retx_delay")
    for p in PERCENTILES:
        assert d[f"p{int(p * 100)}"] == pytest.approx(nearest_rank(delays, p) / 1e6)
    per_segment: dict = {}
    for _, *key in rows:
        per_segment[tuple(key)] = per_segment.get(tuple(key), 0) + 1
    s = metric(tables, "retx_per_segment")
    assert s["n"] == len(per_segment)
    for p in PERCENTILES:
        assert s[f"p{int(p * 100)}"] == nearest_rank(list(per_segment.values()), p)


def test_rtt_percentiles_are_nearest_rank_over_client_acks(ds, tables):
    samples = [r[0] for r in sql(ds, "SELECT rtt_ns FROM packets WHERE direction = 'c2s' AND rtt_ns IS NOT NULL")]
    r = metric(tables, "rtt")
    assert r["n"] == len(samples)
    values = [r[f"p{int(p * 100)}"] for p in PERCENTILES]
    assert values == sorted(values)
    for p, v in zip(PERCENTILES, values):
        assert v == pytest.approx(nearest_rank(samples, p) / 1e6)


def test_shares_are_consistent(tables):
    for r in tables["network"]:
        if r["unit"] == "share" and r["value"] is not None:
            assert 0 <= r["value"] <= 1
            assert r["numerator"] <= r["denominator"]
    lossy = metric(tables, "lossy_connections")["numerator"]
    assert metric(tables, "lossy_establishment")["numerator"] <= lossy
    assert metric(tables, "lossy_data")["numerator"] <= lossy
    # loss rate in lossy connections ≥ retransmitted share overall (same retransmissions, fewer packets)
    assert metric(tables, "loss_rate_lossy")["value"] >= metric(tables, "retransmitted_packets")["value"]
    assert metric(tables, "loss_rate_lossy")["numerator"] == metric(tables, "retransmitted_packets")["numerator"]


def test_attribution_is_consistent(ds, tables):
    ((complete,),) = sql(ds, "SELECT count(*) FROM queries WHERE complete")
    att = tables["attribution"]
    by_level = {}
    for r in att:
        by_level.setdefault(r["level"], []).append(r)
    assert by_level["all"][0]["queries"] == complete
    thresholds = [by_level[lv][0]["threshold_ms"] for lv in ("all", "p50", "p95", "p99")]
    assert thresholds == sorted(thresholds)
    counts = [by_level[lv][0]["queries"] for lv in ("all", "p50", "p95", "p99")]
    assert counts == sorted(counts, reverse=True) and counts[-1] >= 1
    # queries with no signature + queries with at least one = all, at each level (independently)
    lat = "latency_ns + CASE WHEN query_index = 0 THEN coalesce(setup_ns, 0) ELSE 0 END"
    for lv, rows in by_level.items():
        t_ns = rows[0]["threshold_ms"] * 1e6
        ((n, with_any),) = sql(
            ds,
            f"SELECT count(*), count(*) FILTER (WHERE len(signatures) > 0 OR len(delays) > 0) FROM queries "
            f"WHERE complete AND {lat} >= {t_ns} - 0.5",
        )
        assert rows[0]["queries"] == n, lv
        none = [r for r in rows if r["signature"] == "(none)"]
        assert (none[0]["queries_with"] if none else 0) == n - with_any, lv
        for r in rows:
            assert 0 < r["share"] <= 1
            assert r["queries_with"] <= r["queries"]
    # the delay charged to a signature: the sum of its `delays` entries (independently)
    ((fr,),) = sql(ds, "SELECT sum(d.delay_ns) FROM (SELECT unnest(delays) AS d FROM queries WHERE complete) WHERE d.signature = 'fast_retransmit'")
    (row,) = [r for r in by_level["all"] if r["signature"] == "fast_retransmit"]
    assert row["charged_delay_ms"] == pytest.approx(fr / 1e6)
    assert not any("share" in k and k != "share" for r in att for k in r), "no ratio of the overlapping charged delay"


def test_budget_adds_up_to_the_latency(ds, tables):
    """Per level the parts' shares are shares (0..1) summing to 1, and their time sums to the
    level's latency (independently: the budget columns of the queries table)."""
    lat = "latency_ns + CASE WHEN query_index = 0 THEN coalesce(setup_ns, 0) ELSE 0 END"
    by_level = {}
    for r in tables["budget"]:
        by_level.setdefault(r["level"], []).append(r)
    for lv, rows in by_level.items():
        assert len(rows) == 16 and all(0 <= r["share"] <= 1 for r in rows), lv
        assert sum(r["share"] for r in rows) == pytest.approx(1, abs=1e-5), lv
        total = sum(r["time_ms"] for r in rows)
        t_ns = (rows[0]["threshold_ms"] or 0) * 1e6
        ((want, n),) = sql(ds, f"SELECT sum({lat}), count(*) FROM queries WHERE complete AND {lat} >= {t_ns} - 0.5")
        assert total == pytest.approx(want / 1e6, abs=0.01) and rows[0]["queries"] == n, lv


# --- slices -------------------------------------------------------------------------------------


@pytest.mark.parametrize("by", ["carrier", "hexagon", "site", "week", "network_type", "region"])
def test_groups_partition_the_flows(ds, tables, by):
    grouped = compute_stats(ds, by=by)
    total = tables["overview"][0]
    for key in ("flows", "tcp_flows", "packets", "queries"):
        assert sum(r[key] for r in grouped["overview"]) == total[key], key
    lossy = sum(metric(grouped, "lossy_connections", g)["numerator"] for g in (r["group"] for r in grouped["overview"]))
    assert lossy == metric(tables, "lossy_connections")["numerator"]


def test_unknowns_are_counted_not_lost(ds, tables):
    ((flows, no_cell, no_type),) = sql(
        ds, "SELECT count(*), count(*) FILTER (WHERE h3_cell = 'unknown'), count(*) FILTER (WHERE network_type = 'unknown') FROM flows"
    )
    o = tables["overview"][0]
    assert o["flows"] == flows and o["flows_hexagon_unknown"] == no_cell and o["flows_network_type_unknown"] == no_type
    assert no_cell > 0  # the fixture leaves some samples without a session, deliberately
    only_unknown = compute_stats(ds, Slice(hexagon=["unknown"]))
    assert only_unknown["overview"][0]["flows"] == no_cell


def test_slices(ds, tables):
    ((cell, carrier, week, n_cell),) = sql(
        ds,
        "SELECT h3_cell, carrier, strftime(start, '%G-W%V'), count(*) OVER (PARTITION BY h3_cell) FROM flows "
        "WHERE h3_cell <> 'unknown' ORDER BY start LIMIT 1",
    )
    import h3

    assert compute_stats(ds, Slice(hexagon=[cell]))["overview"][0]["flows"] == n_cell
    parent = h3.cell_to_parent(cell, 4)  # a coarser cell takes the hexagons inside it
    ((inside,),) = sql(ds, "SELECT count(*) FROM flows WHERE h3_cell <> 'unknown'")
    assert compute_stats(ds, Slice(hexagon=[parent]))["overview"][0]["flows"] == inside
    ((n_carrier,),) = sql(ds, f"SELECT count(*) FROM flows WHERE carrier = '{carrier}'")
    assert compute_stats(ds, Slice(carrier=[carrier.upper()]))["overview"][0]["flows"] == n_carrier
    assert compute_stats(ds, Slice(week=[week]))["overview"][0]["flows"] == tables["overview"][0]["flows"]
    empty = compute_stats(ds, Slice(week=["1999-W01"]))
    assert empty == {"overview": [], "network": [], "budget": [], "what_changed": [], "attribution": [], "quic_vs_tcp": []}
    both = compute_stats(ds, Slice(carrier=[carrier], hexagon=[cell]))["overview"][0]["flows"]
    assert both <= min(n_cell, n_carrier)
    lte = compute_stats(ds, Slice(network_type=["lte", "4G"]))["overview"][0]["flows"]
    ((n_lte,),) = sql(ds, "SELECT count(*) FROM flows WHERE network_type = 'LTE'")
    assert lte == n_lte > 0


def test_bad_slices(ds):
    with pytest.raises(StatsError, match="YYYY-Www"):
        Slice(week=["2026-47"])
    with pytest.raises(StatsError, match="not an H3 cell"):
        compute_stats(ds, Slice(hexagon=["zzz"]))
    with pytest.raises(StatsError, match="--by"):
        compute_stats(ds, by="planet")
    with pytest.raises(StatsError, match="no such dataset"):
        compute_stats(ds / "missing")


def test_without_enrichment_slicing_is_refused_but_stats_work(plain, tables):
    with pytest.raises(StatsError, match="no enrichment columns for carrier"):
        compute_stats(plain, Slice(carrier=["x"]))
    bare = compute_stats(plain)
    assert [r["metric"] for r in bare["network"]] == NETWORK_METRICS
    assert metric(bare, "lossy_connections") == metric(tables, "lossy_connections")
    ((week,),) = sql(plain, "SELECT min(strftime(start, '%G-W%V')) FROM flows")
    assert compute_stats(plain, Slice(week=[week]), by="week")["overview"][0]["flows"] == tables["overview"][0]["flows"]


# --- formats ------------------------------------------------------------------------------------


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = cli_main(["stats", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_text(ds, capsys):
    code, out, _ = run_cli(capsys, ds)
    assert code == 0
    for needle in ("RTT p50 / p75 / p95 / p99", "connections with at least one loss", "retransmission delay", "Where the time went",
                   "What changed", "Signatures in the tail", "charged delay (overlapping)", "(none)"):
        assert needle in out
    code, out, _ = run_cli(capsys, ds, "--by", "carrier", "--table", "network")
    assert code == 0 and "Northwind Mobile" in out and "Fabrikam Wireless" in out


def test_json(ds, capsys, tables):
    code, out, _ = run_cli(capsys, ds, "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["tables"] == json.loads(json.dumps(tables))


def test_csv(ds, capsys, tables):
    code, out, _ = run_cli(capsys, ds, "--format", "csv")
    sections = parse_csv_sections(out)
    assert code == 0 and set(sections) == {"overview", "network", "budget", "what_changed", "attribution", "quic_vs_tcp"}
    for name, rows in sections.items():
        assert len(rows) == len(tables[name])
        for got, want in zip(rows, tables[name]):
            assert list(got) == list(want)
            for k, v in want.items():
                if isinstance(v, list):  # what_changed's parts: JSON in the cell
                    assert json.loads(got[k]) == json.loads(json.dumps(v)), (name, k)
                else:
                    assert got[k] == ("" if v is None else str(v)), (name, k)
    code, out, _ = run_cli(capsys, ds, "--format", "csv", "--table", "network")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["metric"] for r in rows] == NETWORK_METRICS


def test_markdown(ds, capsys):
    code, out, _ = run_cli(capsys, ds, "--format", "markdown", "--by", "hexagon")
    assert code == 0
    blocks = [b for b in out.split("\n\n") if b.startswith("|")]
    assert len(blocks) == 6  # overview, network, budget, what_changed, attribution, quic_vs_tcp
    for block in blocks:
        lines = block.strip().splitlines()
        assert set(lines[1].replace("|", "")) == {"-"}
        widths = {line.count("|") - line.count("\\|") for line in lines}
        assert len(widths) == 1, block  # every row has the header's columns


def test_cli_errors(ds, plain, capsys):
    code, _, err = run_cli(capsys, plain, "--carrier", "x")
    assert code == 2 and "no enrichment columns" in err
    code, _, err = run_cli(capsys, ds, "--week", "47")
    assert code == 2 and "YYYY-Www" in err
    code, _, err = run_cli(capsys, ds, "--carrier", "nobody")
    assert code == 0 and "no flows match" in err


def test_render_rejects_unknown_format(tables):
    with pytest.raises(StatsError):
        render(tables, "xml")


def test_runs_without_enrichment_read_together_count_as_unknown(ds, plain, tmp_path):
    """A dataset whose older runs predate enrichment: their flows are 'unknown', not lost."""
    import shutil

    mixed = tmp_path / "mixed"
    shutil.copytree(ds, mixed)
    for table in ("flows", "packets", "queries"):
        for part in plain.glob(f"{table}/*/*.parquet"):
            dest = mixed / table / part.parent.name / ("old-" + part.name)
            shutil.copy(part, dest)
    ((n_plain,),) = sql(plain, "SELECT count(*) FROM flows")
    ((n_known,),) = sql(ds, "SELECT count(*) FROM flows WHERE carrier <> 'unknown'")
    everything = compute_stats(mixed)["overview"][0]
    assert everything["flows"] == 2 * n_plain
    assert everything["flows_carrier_unknown"] == 2 * n_plain - n_known
    assert compute_stats(mixed, Slice(carrier=["unknown"]))["overview"][0]["flows"] == 2 * n_plain - n_known


def test_durations_scale_to_their_unit():
    """µs for LAN and loopback captures (never 'RTT p50 0.0 ms'), ms, s; no exponent form (issue 27)."""
    from tailscope.jobs.analytics.stats import _fmt_ms_series, fmt_delta, fmt_duration

    assert fmt_duration(0.045) == "45 µs" and fmt_duration(0.0004) == "0.40 µs"
    assert fmt_duration(3.25) == "3.2 ms" and fmt_duration(456) == "456 ms"
    assert fmt_duration(1569.185) == "1.6 s" and fmt_duration(1_234_000) == "1,234 s"
    assert fmt_duration(0) == "0 ms" and fmt_duration(None) == "-"
    assert fmt_delta(380.2) == "+380 ms" and fmt_delta(-0.5) == "-500 µs"
    assert _fmt_ms_series([0.045, 0.06, 0.2, 0.31], "ms") == "45 / 60 / 200 / 310 µs"
    assert _fmt_ms_series([40, 150, 1200, 1569], "ms") == "0.04 / 0.15 / 1.2 / 1.6 s"
    for v in (1e-4, 0.5, 9.99, 999.4, 1e3, 1.2e6, 3.7e9):
        assert "e+" not in fmt_duration(v) and "e-" not in fmt_duration(v)
    from tailscope.jobs.analytics.stats import fmt_change

    assert fmt_change({"delta_ms": 30.2, "delta_low_ms": 0.987, "delta_high_ms": 63.0}) == "+30 ms [+0.99 ms, +63 ms]"
    assert fmt_change({"delta_ms": None, "value_ms": 5.0}) == "new"

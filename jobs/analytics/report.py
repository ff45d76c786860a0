"""`tailscope report`: the weekly root-cause report, as self-contained HTML and as Markdown.

    paths = write_report(Path("ds"), Path("reports"), ReportOptions(week="2026-W47"))

The numbers come from the DuckDB views of sql/ (facts, marts and canned questions, built into a
temporary database) and from `tailscope stats` (the field-study tables); definitions are those of
docs/stats.md and sql/README.md. Sections, in order (SECTIONS): summary, the field-study tables,
p99 by carrier with the signatures that make each carrier's tail and the delay charged to them,
p99 by hexagon (the same per carrier and cell), a hexagon map, QUIC vs TCP (mart_quic_vs_tcp: the
QUIC tail reduction per carrier / network type / hexagon with its bootstrap interval and sample
sizes, fallback and mixed sessions), week-over-week deltas, the worst
flows with their ids for drill-down, data quality. Plots are inline SVG (jobs/analytics/report_svg.py): the
HTML loads nothing from anywhere. The Markdown carries the same tables without the plots.
Also written: hexagons-<week>.geojson, the week's cells with their p99 (a Grafana GeoJSON layer
can draw it; dashboards/README.md).
"""
from __future__ import annotations

import datetime as dt
import html
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.jobs.analytics import report_svg as svg
from tailscope.jobs.analytics.stats import (WEEK_RE, Slice, compute_stats, fmt_change, fmt_delta, fmt_duration, fmt_part_change,
                                             fmt_reduction, fmt_share)

SECTIONS = [
    ("summary", "Summary"),
    ("what-changed", "What changed"),
    ("field-study", "Field-study tables"),
    ("carriers", "p99 by carrier"),
    ("hexagons", "p99 by hexagon"),
    ("map", "Hexagon map"),
    ("quic-vs-tcp", "QUIC vs TCP"),
    ("week-over-week", "Week-over-week"),
    ("worst-flows", "Worst flows"),
    ("data-quality", "Data quality"),
]
class ReportError(ValueError):
    """A report that cannot be made (the message says why)."""


class NoFlows(ReportError):
    """Nothing to report: the dataset, or the week asked for, has no flows. A report of nothing
    written as if it were a week's answer would read as a quiet week; the message names the weeks
    that have flows instead."""


@dataclass
class ReportOptions:
    week: str | None = None          # ISO week 'YYYY-Www'; None = the latest week with flows
    top: int = 15                    # rows of the hexagon and worst-flow tables
    signatures: int = 3              # top signatures shown per carrier / hexagon
    min_queries: int = 1             # hexagons with fewer complete queries are not ranked
    grafana_url: str | None = None   # e.g. http://grafana:3000: flow ids link to the flow dashboard
    db: Path | None = None           # query this database instead of building a temporary one
    show_clients: bool = False       # full client addresses in the worst flows (default: their /24 or /48)


@dataclass
class ReportPaths:
    html: Path
    markdown: Path
    geojson: Path
    week: str
    empty: bool = False
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------
# collecting the numbers


def _rows(con, sql: str, params=()) -> list[dict]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _top_parts(rows: list[dict], key: tuple, n: int) -> dict[tuple, list[dict]]:
    """Per key: the parts of the time budget that took the most of the tail's time, largest first
    (parts that took none left out)."""
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        if not r["part_ms"]:
            continue
        out.setdefault(tuple(r[k] for k in key), []).append(r)
    for k, v in out.items():
        v.sort(key=lambda r: (-(r["share"] or 0), r["ord"]))
        out[k] = v[:n]
    return out


# What the summary names (headline_changes): a slice whose p95 or p99 moved beyond noise
# (what_changed: the 95 % interval excludes 0 and both tails hold enough queries) with a part of
# the time budget that moved in the same direction. Slices overlap (a carrier holds its regions, a
# region its hexagons, a hexagon several carriers), so one cause moves several of them: the
# largest move (the most time its part added over the slice's queries) is named first, by the
# smallest overlapping slice moved by the same part that holds at least HEADLINE_HOLD of that
# time (a carrier's policer in one region: the region holds all of it, each of its hexagons a
# twelfth; a deep queue in one hexagon: the hexagon holds it all, its carrier's region too but
# is bigger); every other move of that part that such a named slice holds HEADLINE_HOLD of is the
# same change, not named again.
HEADLINE_LEVELS = ("p95", "p99")
HEADLINE_HOLD = 0.5


def _overlap(a: dict, b: dict) -> bool:
    return all(a[k] == "*" or b[k] == "*" or a[k] == b[k] for k in ("carrier", "region", "h3_cell"))


def _same_cause(a: dict, b: dict) -> bool:
    return a["top_part"] == b["top_part"] and (a["delta_ms"] > 0) == (b["delta_ms"] > 0) and _overlap(a, b)


def _holds(a: dict, b: dict) -> bool:
    """a holds at least HEADLINE_HOLD of the time b's part added."""
    return abs(a["top_part_added_ms"] or 0) >= HEADLINE_HOLD * abs(b["top_part_added_ms"] or 0)


def headline_changes(rows: list[dict]) -> list[dict]:
    """The changes the summary names, largest first: what_changed_slices rows (see above), each with
    `also`, the other moves counted as the same change."""
    cands: dict[tuple, dict] = {}
    for r in rows:
        if r["level"] not in HEADLINE_LEVELS or not r["beyond_noise"] or not r["top_part"]:
            continue
        if (r["top_part_delta_ms"] or 0) * (r["delta_ms"] or 0) <= 0:
            continue  # no part moved the way the percentile did
        key = (r["slice"], r["carrier"], r["region"], r["h3_cell"])
        if key not in cands or HEADLINE_LEVELS.index(r["level"]) < HEADLINE_LEVELS.index(cands[key]["level"]):
            cands[key] = r  # p95 first: the steadier of the two
    items = sorted(cands.values(), key=lambda r: -abs(r["top_part_added_ms"] or 0))
    named: list[dict] = []
    for c in items:
        if any(_same_cause(n, c) and _holds(n, c) for n in named):
            continue
        holding = [s for s in items if (s is c or _same_cause(s, c)) and _holds(s, c)]
        named.append(min(holding, key=lambda s: (s["queries"], -abs(s["top_part_added_ms"] or 0))))
    out = []
    for n in named:
        also = [c for c in items if c is not n and _same_cause(n, c) and _holds(n, c)
                and next(m for m in named if _same_cause(m, c) and _holds(m, c)) is n]
        out.append({**n, "also": also})
    return out


def slice_label(r: dict) -> str:
    """A what_changed_slices row's slice as people say it: 'Kestrel Mobile, north', 'hexagon
    871969c9bffffff (south)', 'Heron Telecom, hexagon 871969c9bffffff (south)'."""
    return {"carrier": lambda: r["carrier"], "carrier_region": lambda: f"{r['carrier']}, {r['region']}",
            "hexagon": lambda: f"hexagon {r['h3_cell']} ({r['region']})",
            "carrier_hexagon": lambda: f"{r['carrier']}, hexagon {r['h3_cell']} ({r['region']})"}[r["slice"]]()


def change_sentence(r: dict) -> str:
    """'Kestrel Mobile, north: p95 +380 ms [325 ms, 414 ms] (190 ms → 570 ms), policing throttle +564 ms
    per tail query, new this week.'"""
    top = next((x for x in r["parts"] if x["part"] == r["top_part"]), None)
    return (f"{slice_label(r)}: {r['level']} {fmt_change(r)} ({_ms(r['value_prev_ms'])} → {_ms(r['value_ms'])}), "
            f"{fmt_part_change(top)}.")


def collect(dataset: Path, options: ReportOptions) -> dict:
    """Every number of the report, as plain data (rendered by render_html / render_markdown)."""
    import duckdb
    from tailscope.jobs.analytics.db import DatasetError, build

    dataset = Path(dataset)
    if options.week is not None and not WEEK_RE.match(options.week):
        raise ReportError(f"week {options.week!r}: expected YYYY-Www, e.g. 2026-W47")
    with tempfile.TemporaryDirectory(prefix="tailscope-report-") as tmp:
        if options.db:
            db_path = Path(options.db)
            if not db_path.is_file():
                raise ReportError(f"{db_path}: no such database")
        else:
            try:
                db_path = build(dataset, Path(tmp) / "report.duckdb")
            except DatasetError as exc:
                raise ReportError(str(exc)) from exc
        try:
            con = duckdb.connect(str(db_path), read_only=True)
        except duckdb.Error as exc:
            raise ReportError(f"{db_path}: {exc}") from exc
        try:
            con.execute("SET TimeZone = 'UTC'")
            return _collect(con, dataset, options)
        except duckdb.Error as exc:
            raise ReportError(f"{db_path}: {exc} (a database built by an older tailscope? rebuild it with `tailscope db`)") from exc
        finally:
            con.close()


def _collect(con, dataset: Path, options: ReportOptions) -> dict:
    weeks = [r["week"] for r in _rows(con, "SELECT DISTINCT week FROM flow_facts WHERE week IS NOT NULL ORDER BY week")]
    week = options.week or (weeks[-1] if weeks else None)
    if week is None:
        raise NoFlows(f"{dataset}: the dataset has no flows")
    if week not in weeks:
        raise NoFlows(f"{dataset}: no flows in {week}; weeks with flows: {', '.join(weeks[-8:])}"
                      + (f" (and {len(weeks) - 8} earlier)" if len(weeks) > 8 else ""))
    # the ISO week's arithmetic is sql/'s (marts/005_weeks.sql)
    prev, first_day, last_day = con.execute(
        "SELECT previous_week(?), CAST(iso_week_start(?) AS VARCHAR), CAST(iso_week_start(?) + 6 AS VARCHAR)", [week] * 3
    ).fetchone()
    d: dict = {
        "dataset": str(dataset), "week": week, "previous_week": prev, "first_day": first_day, "last_day": last_day,
        "weeks": weeks, "has_previous": prev in weeks,
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "options": options,
    }
    totals = {r["week"]: r for r in _rows(con, "SELECT * EXCLUDE (period_start) FROM mart_week WHERE week IN (?, ?)", [week, prev])}
    d["totals"], d["totals_prev"] = totals.get(week), totals.get(prev)

    # field-study tables (tailscope stats), this week overall, by carrier, and last week overall
    d["stats"] = compute_stats(dataset, Slice(week=[week]))
    d["stats_by_carrier"] = compute_stats(dataset, Slice(week=[week]), by="carrier")
    d["stats_prev"] = compute_stats(dataset, Slice(week=[prev])) if d["has_previous"] else None

    # what changed (sql/marts/080_what_changed.sql through the question what_changed_slices): every
    # slice's p50/p95/p99 against last week with its bootstrap interval and the parts that moved
    d["changes"] = _rows(con, "SELECT * FROM what_changed_slices(?) ORDER BY slice, carrier, region, h3_cell, level_ord",
                         [week]) if d["has_previous"] else []
    d["headline_changes"] = headline_changes(d["changes"])
    # one colour per part of the time budget in every chart, in budget_parts' order (sql/marts/016_budget.sql)
    d["part_colors"] = {r["part"]: svg.color_for(r["ord"] - 1) for r in _rows(con, "SELECT ord, part FROM budget_parts")}
    d["what_changed_settings"] = _rows(con, "SELECT what_changed_min_tail() AS min_tail, bootstrap_resamples() AS resamples")[0]

    # carriers: p50/p95/p99, last week's, and where each carrier's p99 tail's time went (the time
    # budget, sql/marts/055_budget_marts.sql)
    d["carriers"] = _rows(con, "SELECT * FROM week_over_week('carrier', ?) WHERE queries IS NOT NULL ORDER BY p99_ms DESC NULLS LAST, carrier", [week])
    bud_cols = "level, ord, part, label, threshold_ms, tail_queries, tail_latency_ms, part_ms, share, mean_ms, without_ms, saved_ms"
    carrier_budget = _rows(con, f"SELECT carrier, {bud_cols} FROM mart_carrier_budget WHERE week = ? AND level = 'p99' ORDER BY carrier, ord", [week])
    d["carrier_budget"] = carrier_budget
    d["carrier_top"] = _top_parts(carrier_budget, ("carrier",), options.signatures)
    d["week_budget"] = _rows(con, f"SELECT {bud_cols} FROM mart_week_budget WHERE week = ? ORDER BY level, ord", [week])

    # hexagons per carrier, with last week's p99 and the signatures of their tails
    # the path's RTT beside the latency, so a slow path is told from a transport behaviour: the
    # median and p95 over the week's connections of each one's median RTT sample
    rtt_sql = ("SELECT {keys}, quantile_cont(rtt_p50_ms, 0.5) AS rtt_p50_ms, quantile_cont(rtt_p50_ms, 0.95) AS rtt_p95_ms "
               "FROM flow_facts WHERE week = ? AND rtt_p50_ms IS NOT NULL GROUP BY ALL")
    d["rtt"] = {tuple(r[k] for k in keys): (r["rtt_p50_ms"], r["rtt_p95_ms"])
                for keys in (("carrier",), ("carrier", "h3_cell"))
                for r in _rows(con, rtt_sql.format(keys=", ".join(keys)), [week])}
    d["hexagons"] = _rows(con, """
        SELECT w.*, m.region, m.h3_lat, m.h3_lng
        FROM week_over_week('carrier_hexagon', ?) w
        LEFT JOIN (SELECT carrier, h3_cell, region, h3_lat, h3_lng FROM mart_carrier_hexagon WHERE week = ?) m
          USING (carrier, h3_cell)
        WHERE w.queries >= ? AND w.h3_cell <> 'unknown'
        ORDER BY w.p99_ms DESC NULLS LAST, w.queries DESC, w.carrier, w.h3_cell""", [week, week, options.min_queries])
    d["hexagons_unknown"] = _rows(con, "SELECT carrier, queries, p99_ms FROM mart_carrier_hexagon WHERE week = ? AND h3_cell = 'unknown' "
                                       "ORDER BY queries DESC", [week])
    hex_budget = _rows(con, f"SELECT carrier, h3_cell, {bud_cols} FROM mart_carrier_hexagon_budget WHERE week = ? AND level = 'p99'", [week])
    d["hexagon_top"] = _top_parts(hex_budget, ("carrier", "h3_cell"), options.signatures)

    # the map: every cell of the week over all carriers
    d["cells"] = _rows(con, "SELECT h3_cell, region, queries, flows, p50_ms, p99_ms, lossy_flow_share, h3_lat, h3_lng, "
                            "h3_boundary_geojson FROM mart_hexagon WHERE week = ? AND h3_cell <> 'unknown' ORDER BY p99_ms DESC NULLS LAST", [week])
    cell_budget = _rows(con, f"SELECT h3_cell, {bud_cols} FROM mart_hexagon_budget WHERE week = ? AND level = 'p99'", [week])
    d["cell_top"] = _top_parts(cell_budget, ("h3_cell",), 1)

    # QUIC vs TCP (sql/marts/070_quic_vs_tcp.sql): all traffic, then per carrier, network type and hexagon
    qvt = _rows(con, "SELECT * EXCLUDE (period_start) FROM mart_quic_vs_tcp WHERE week = ? "
                     "ORDER BY list_position(['week', 'carrier', 'network_type', 'hexagon'], grain), "
                     "quic_queries + tcp_queries DESC, carrier, network_type, h3_cell", [week])
    d["quic_vs_tcp"] = qvt
    # the comparison's settings, worded in the note as the marts define them
    d["quic_vs_tcp_settings"] = _rows(con, "SELECT quic_vs_tcp_resamples() AS resamples, quic_vs_tcp_min_queries() "
                                           "AS min_queries, session_gap_ns() // 1000000000 AS session_gap_s")[0]
    d["quic_vs_tcp_prev"] = _rows(con, "SELECT * EXCLUDE (period_start) FROM mart_quic_vs_tcp WHERE week = ? AND grain = 'week'", [prev])

    # week over week
    d["wow_hexagons"] = _rows(con, "SELECT * FROM week_over_week('carrier_hexagon', ?) WHERE h3_cell <> 'unknown' "
                                   "AND p99_ms_delta IS NOT NULL ORDER BY abs(p99_ms_delta) DESC LIMIT ?", [week, options.top])
    # the parts that moved most in each carrier's p99 tail (what_changed's decomposition)
    moved = [{"carrier": r["carrier"], **x} for r in d["changes"] if r["slice"] == "carrier" and r["level"] == "p99"
             for x in r["parts"] if x["mean_ms"] or x["mean_prev_ms"]]
    d["wow_parts"] = sorted(moved, key=lambda x: -abs(x["delta_ms"]))[: options.top]

    # time: p99 per hour over the week, per carrier; latency distribution per carrier
    d["hours"] = _rows(con, "SELECT epoch(hour) AS t, carrier, p50_ms, p99_ms, queries FROM mart_carrier_hour "
                            "WHERE week = ? AND queries > 0 ORDER BY t", [week])
    qs = [round(i / 100, 2) for i in range(1, 100)] + [0.995, 0.999]
    d["cdf_points"] = qs
    d["cdf"] = _rows(con, f"SELECT carrier, count(*) AS n, quantile_disc(latency_ms, {qs}) AS q FROM query_facts "
                          "WHERE week = ? GROUP BY carrier ORDER BY carrier", [week])

    # the worst flows, with their ids; a client is named by its network unless asked (docs/privacy.md)
    d["show_clients"] = options.show_clients
    d["worst_flows"] = _rows(con, """
        SELECT rank, CAST(flow_id AS VARCHAR) AS flow_id, community_id, strftime(timezone('UTC', start), '%Y-%m-%d %H:%M:%S') AS start_utc,
               protocol, CASE WHEN ? THEN client ELSE client_prefix END AS client, server, carrier, network_type, h3_cell, site, queries, worst_latency_ms, worst_query_index,
               array_to_string(worst_query_signatures, ', ') AS worst_query_signatures, top_signature,
               worst_query_top_part, worst_query_top_part_ms,
               attributed_delay_ms, retransmissions, array_to_string(flow_signatures, ', ') AS flow_signatures
        FROM worst_flows(?, ?)""", [options.show_clients, week, options.top])
    return d


# ----------------------------------------------------------------------------------------------
# shared formatting


def _ms(v) -> str:
    return fmt_duration(v)


def _pct(v) -> str:
    return fmt_share(v)


def _delta_ms(v, prev=True) -> str:
    """A change in ms; 'new' when there was nothing to compare with (prev is None)."""
    if prev is None:
        return "new"
    if v is None:
        return "-"
    return fmt_delta(v) if v else "0 ms"


def _change(cur, prev) -> str:
    if cur is None:
        return "-"
    if prev is None:
        return "new"
    if prev == 0:
        return "-"
    c = cur / prev - 1
    return f"{'+' if c >= 0 else ''}{c * 100:.0f} %"


def _part_list(parts: list[dict]) -> str:
    """'policing throttle 612 ms (78 % of the tail's time), transfer at base RTT 98 ms (12 %)'"""
    if not parts:
        return "no time recorded"
    return ", ".join(f"{p['label']} {_ms(p['mean_ms'])} per query ({_pct(p['share'])} of the tail's time)" for p in parts)


def _part_short(parts: list[dict]) -> str:
    if not parts:
        return "-"
    return "; ".join(f"{p['label']} {_pct(p['share'])}" for p in parts)


def _headlines(d: dict) -> list[str]:
    """The summary: first what changed beyond noise and the part that moved it
    (headline_changes), then the week's totals and where the tail's time went."""
    out = []
    t, tp = d["totals"], d["totals_prev"]
    if not t:
        return [f"No flows in {d['week']}. Weeks in the dataset: {', '.join(d['weeks'][-8:]) or '-'}."]
    if not d["has_previous"]:
        out.append(f"No flows in {d['previous_week']}: nothing to compare this week with.")
    elif d["headline_changes"]:
        out += [change_sentence(r) for r in d["headline_changes"]]
    else:
        out.append(f"No slice's p95 or p99 moved beyond noise against {d['previous_week']} (carriers, carriers by region, "
                   "hexagons; 95 % bootstrap intervals).")
    line = (f"{t['queries']} complete queries on {t['flows']} connections; query latency p50 {_ms(t['p50_ms'])}, "
            f"p95 {_ms(t['p95_ms'])}, p99 {_ms(t['p99_ms'])}")
    if tp and tp.get("p99_ms"):
        line += f" ({_change(t['p99_ms'], tp['p99_ms'])} p99 against {d['previous_week']})"
    out.append(line + ".")
    tail = sorted([b for b in d["week_budget"] if b["level"] == "p99" and b["part_ms"]], key=lambda b: -(b["share"] or 0))
    if tail:
        out.append(f"Where all traffic's p99 tail ({tail[0]['tail_queries']} queries at or above {_ms(tail[0]['threshold_ms'])}) "
                   f"spent its time: {_part_list(tail[:3])}.")
    if t["queries"] < 100:
        out.append(f"Caution: {t['queries']} queries is a small sample; percentiles and the p99 tail (a handful of "
                   "queries) are anecdotal.")
    return out


def _network_table(d: dict) -> tuple[list[str], list[list[str]]]:
    """The field study's network table: this week, last week, and one column per carrier."""
    from tailscope.jobs.analytics.stats import _network_cell

    cols: list[tuple[str, list[dict]]] = []
    if d["stats"]:
        cols.append((d["week"], d["stats"]["network"]))
    if d["stats_prev"]:
        cols.append((d["previous_week"], d["stats_prev"]["network"]))
    if d["stats_by_carrier"]:
        by: dict[str, list[dict]] = {}
        for r in d["stats_by_carrier"]["network"]:
            by.setdefault(r["group"], []).append(r)
        cols.extend(by.items())
    labels: list[str] = []
    for _, rows in cols:
        for r in rows:
            if r["label"] not in labels:
                labels.append(r["label"])
    table = []
    for label in labels:
        row = [label]
        for _, rows in cols:
            r = next((x for x in rows if x["label"] == label), None)
            row.append(_network_cell(r, with_counts=True) if r else "-")
        table.append(row)
    return ["network metric", *[c for c, _ in cols]], table


def _overview_rows(d: dict) -> tuple[list[str], list[list[str]]]:
    st = d["stats_by_carrier"]
    if not st:
        return [], []
    keys = [k for k in st["overview"][0] if k not in ("group", "first_flow_start", "last_flow_start")]
    return ["", *[r["group"] for r in st["overview"]]], [[k.replace("_", " "), *[str(r.get(k, "")) for r in st["overview"]]] for k in keys]


def _flow_link(d: dict, flow_id: str) -> str | None:
    url = d["options"].grafana_url
    if not url:
        return None
    first, last = d["first_day"], d["last_day"]
    return (f"{url.rstrip('/')}/d/tailscope-flow/tailscope-flow-drill-down?var-flow={flow_id}"
            f"&from={first}T00:00:00Z&to={last}T23:59:59Z")


# ----------------------------------------------------------------------------------------------
# HTML

CSS = """
:root { color-scheme: light; }
body { font-family: system-ui, -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif; margin: 0; color: #1d2330; background: #fff; }
header { background: #1d2d50; color: #fff; padding: 24px 40px 18px; }
header h1 { margin: 0 0 6px; font-size: 26px; }
header p { margin: 2px 0; opacity: .9; }
nav { background: #eef2f7; padding: 8px 40px; font-size: 14px; position: sticky; top: 0; border-bottom: 1px solid #d5dbe5; }
nav a { margin-right: 16px; color: #1d2d50; text-decoration: none; }
main { padding: 4px 32px 32px; max-width: 1216px; }
section { margin-top: 18px; }
h2 { border-bottom: 3px solid #1d2d50; padding-bottom: 4px; font-size: 21px; margin: 10px 0 8px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 14px; }
th, td { border: 1px solid #d5dbe5; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:nth-child(even) td { background: #fafbfd; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.kpi { border: 1px solid #d5dbe5; border-radius: 6px; padding: 10px 14px; min-width: 130px; }
.kpi .v { font-size: 22px; font-weight: 650; }
.kpi .l { font-size: 12px; color: #556; }
.kpi .d { font-size: 12px; color: #556; }
.worse { color: #b3261e; } .better { color: #1b7f3b; }
.note { font-size: 13px; color: #445; max-width: 900px; }
ul.headlines li { margin: 4px 0; }
code { background: #eef2f7; padding: 1px 4px; border-radius: 3px; font-size: 12px; }
figure { margin: 10px 0 14px; }
.row { display: flex; flex-wrap: wrap; gap: 20px; align-items: flex-start; }
.col { flex: 1 1 540px; min-width: 0; }
.col > table { max-width: 100%; }
.compact { overflow-x: auto; }
.compact table { font-size: 11.5px; }
.compact td:nth-child(2), .compact td:nth-child(3), .compact td:nth-child(4) { white-space: nowrap; }
figcaption { font-size: 12px; color: #556; max-width: 900px; }
"""


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


def _table_html(headers: list[str], rows: list[list], numeric: set[int] = frozenset()) -> str:
    if not rows:
        return '<p class="note">(no rows)</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for r in rows:
        cells = []
        for i, c in enumerate(r):
            raw = isinstance(c, tuple)  # (html,) = already HTML
            content = c[0] if raw else _e(c)
            cells.append(f'<td class="num">{content}</td>' if i in numeric else f"<td>{content}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _kpi(label: str, value: str, delta: str = "", worse: bool | None = None) -> str:
    cls = "d" if worse is None else ("d worse" if worse else "d better")
    d = f'<div class="{cls}">{_e(delta)}</div>' if delta else ""
    return f'<div class="kpi"><div class="v">{_e(value)}</div><div class="l">{_e(label)}</div>{d}</div>'


def _figure(svg_text: str, caption: str) -> str:
    return f"<figure>{svg_text}<figcaption>{_e(caption)}</figcaption></figure>"


def _cols(*blocks: str) -> str:
    """Blocks side by side on a wide page, one under the other on a narrow one."""
    blocks = [b for b in blocks if b]
    if len(blocks) == 1:
        return blocks[0]
    return '<div class="row">' + "".join(f'<div class="col">{b}</div>' for b in blocks) + "</div>"


def render_html(d: dict) -> str:
    week, prev = d["week"], d["previous_week"]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>tailscope weekly report {week}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{CSS}</style></head><body>",
        (
            f"<header><h1>tailscope weekly root-cause report — {_e(week)}</h1>"
            f"<p>{_e(d['first_day'])} to {_e(d['last_day'])} (UTC), compared with {_e(prev)}. Dataset {_e(d['dataset'])}.</p>"
            f"<p>Generated {_e(d['generated'])}. Definitions: docs/stats.md and sql/README.md of tailscope.</p></header>"
        ),
        "<nav>" + "".join(f'<a href="#{sid}">{_e(title)}</a>' for sid, title in SECTIONS) + "</nav>",
        "<main>",
    ]
    t, tp = d["totals"], d["totals_prev"]
    top_n = d["options"].top

    # summary
    parts.append('<section id="summary"><h2>Summary</h2>')
    if t:
        def kpi_ms(label, key):
            cur, old = t.get(key), (tp or {}).get(key)
            delta = f"{_change(cur, old)} vs {prev}" if old else f"no data in {prev}"
            return _kpi(label, _ms(cur), delta, None if not old or cur is None else cur > old)
        parts.append('<div class="kpis">'
                     + _kpi("complete queries", str(t["queries"]), f"{tp['queries']} in {prev}" if tp else "")
                     + _kpi("connections", str(t["flows"]), f"{tp['flows']} in {prev}" if tp else "")
                     + kpi_ms("p50 query latency", "p50_ms") + kpi_ms("p95 query latency", "p95_ms") + kpi_ms("p99 query latency", "p99_ms")
                     + _kpi("lossy TCP connections", _pct(t["lossy_flow_share"]),
                            f"{_pct(tp['lossy_flow_share'])} in {prev}" if tp else "")
                     + "</div>")
    headlines = '<ul class="headlines">' + "".join(f"<li>{_e(h)}</li>" for h in _headlines(d)) + "</ul>"
    chart = ""
    levels = [(lv, sorted([b for b in d["week_budget"] if b["level"] == lv], key=lambda b: b["ord"])) for lv in ("all", "p50", "p95", "p99")]
    levels = [(lv, rows) for lv, rows in levels if rows]
    if levels:
        chart = _figure(
            svg.stacked_share_bars([{"label": ("all queries" if lv == "all" else f"{lv} tail ({rows[0]['tail_queries']})"),
                                     "parts": [(b["label"], b["share"] or 0) for b in rows if b["part_ms"]]} for lv, rows in levels],
                                   title="Where all traffic's time went, by part of the time budget",
                                   colors={b["label"]: d["part_colors"].get(b["part"]) for _, rows in levels for b in rows}),
            "Each query's latency is split into disjoint parts that add up to it (docs/queries.md#time-budget); a bar is a "
            "level's queries (all, or those at or above the p50 / p95 / p99), its segments each part's share of their summed "
            "latency: they sum to 100 %.")
    parts.append(_cols(headlines, chart) + "</section>")

    # what changed
    parts.append('<section id="what-changed"><h2>What changed</h2>')
    if not d["has_previous"]:
        parts.append(f'<p class="note">No flows in {_e(prev)}: nothing to compare with.</p>')
    else:
        parts.append(f'<p class="note">{_e(what_changed_note(d))}</p>')
        hdr, rows = _changes_table(d)
        parts.append("<h3>Slices whose p95 or p99 moved beyond noise</h3>"
                     + (_table_html(hdr, rows, {2, 3, 4, 5}) if rows else f'<p class="note">None: every change is within its interval or rests on too few queries.</p>'))
        shown = [r for r in d["changes"] if r["slice"] in ("carrier", "carrier_region") and r["level"] == "p95" and r["delta_ms"] is not None]
        chart = "" if not shown else _figure(
            svg.interval_chart([{"label": slice_label(r), "value": r["delta_ms"], "low": r["delta_low_ms"], "high": r["delta_high_ms"],
                                 "dim": not r["enough"], "color": "#b3261e" if r["beyond_noise"] else svg.GREY,
                                 "note": f"{r['top_part']} {fmt_delta(next((x['delta_ms'] for x in r['parts'] if x['part'] == r['top_part']), None))}"
                                 if r["beyond_noise"] else ""} for r in shown],
                               title=f"Change of p95 against {prev}, with 95 % intervals", value_fmt=svg.fmt_ms),
            "Carriers and carriers by region: the change of each one's p95 query latency, whiskers its 95 % bootstrap interval "
            "(red: beyond noise, with the part that moved most per tail query; hollow grey: too few queries to tell).")
        hdr, rows = _what_if_table(d)
        what_if = ("<h3>What if: each carrier's p99 without one part</h3>"
                   '<p class="note">The p99 recomputed with one part of the time budget removed from every query\'s latency '
                   "(the impact of removing that cause; the parts that would save the most, sql budget_what_if).</p>"
                   + _table_html(hdr, rows, {1, 2, 3, 4}))
        parts.append(_cols(chart, what_if))
        hdr, rows = _carrier_changes_table(d)
        parts.append("<h3>Every carrier, p50 / p95 / p99</h3>" + _table_html(hdr, rows, {2, 3, 4, 5}))
    parts.append("</section>")

    # field-study tables
    parts.append('<section id="field-study"><h2>Field-study tables</h2>')
    parts.append('<p class="note">The ride-hailing field study\'s network table (docs/stats.md) over the week\'s TCP connections, '
                 "as <code>tailscope stats --week</code> computes it: RTT from the client's ACKs and timestamp echoes at the "
                 "server, loss as retransmissions seen at the server.</p>")
    headers, rows = _network_table(d)
    network = _table_html(headers, rows) if rows else '<p class="note">No TCP connections this week.</p>'
    parts.append(network + "</section>")

    # carriers
    parts.append('<section id="carriers"><h2>p99 by carrier</h2>')
    carriers = d["carriers"]
    # one colour per carrier in every chart, whatever order a chart lists them in
    colour = {name: svg.color_for(i) for i, name in enumerate(sorted({c["carrier"] for c in carriers}))}
    if carriers:
        bars = _figure(
            svg.bar_chart([{"label": c["carrier"], "value": c["p99_ms"], "previous": c["p99_ms_prev"],
                            "color": colour[c["carrier"]]} for c in carriers],
                          title=f"p99 query latency by carrier (black tick: {prev})"),
            "Nearest-rank p99 of complete queries; a connection's first query includes its setup.")
        stacked = []
        for c in carriers:
            b = sorted([x for x in d["carrier_budget"] if x["carrier"] == c["carrier"] and x["part_ms"]], key=lambda x: x["ord"])
            stacked.append({"label": c["carrier"], "parts": [(x["label"], x["share"] or 0) for x in b]})
        made_of = _figure(svg.stacked_share_bars(stacked, title="Where each carrier's p99 tail's time went",
                                                 colors={x["label"]: d["part_colors"].get(x["part"]) for x in d["carrier_budget"]}),
                          "Per carrier: the share of its p99 tail's summed latency in each part of the time budget (the parts "
                          "are disjoint and sum to each query's latency: 100 % per bar).")
        parts.append(_cols(bars, made_of))
        rows = []
        for c in carriers:
            top = d["carrier_top"].get((c["carrier"],), [])
            rows.append([c["carrier"], c["queries"], _rtt(d, (c["carrier"],)), _ms(c["p50_ms"]), _ms(c["p95_ms"]), _ms(c["p99_ms"]),
                         _ms(c["p99_ms_prev"]), _delta_ms(c["p99_ms_delta"], c["p99_ms_prev"]), _pct(c["lossy_flow_share"]), _part_short(top)])
        parts.append(_table_html(["carrier", "queries", "RTT p50 / p95", "p50", "p95", "p99", f"p99 {prev}", "Δ p99", "lossy conns",
                                  "where the p99 tail's time went: top parts (share of its time)"], rows,
                                 {1, 2, 3, 4, 5, 6, 7, 8}))
        series = {f"{r['carrier']} (n={r['n']})": list(zip(r["q"], d["cdf_points"])) for r in d["cdf"]}
        cdf = _figure(svg.cdf_chart(series, title="Query latency distribution by carrier",
                                    colors=[colour.get(r["carrier"], svg.color_for(0)) for r in d["cdf"]]),
                      "Cumulative distribution of complete-query latency (log scale): the further right its top, the heavier the tail.")
        hours: dict[str, list[tuple[float, float]]] = {}
        for r in d["hours"]:
            hours.setdefault(r["carrier"], []).append((float(r["t"]), r["p99_ms"]))
        day0 = dt.datetime.fromisoformat(d["first_day"]).replace(tzinfo=dt.timezone.utc).timestamp()
        # the axis spans the hours with data (a capture of two days is not drawn over seven)
        ts = [t for pts in hours.values() for t, _ in pts] or [day0]
        lo, hi = min(ts), max(ts) + 3600
        x_labels = [(t, dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%a %d"))
                    for t in (day0 + i * 86400 for i in range(8)) if lo <= t <= hi]
        if len(x_labels) < 2:  # under two days: hours of the day
            step = 3600 * max(1, round((hi - lo) / 3600 / 6))
            x_labels = [(t, dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%H:00"))
                        for t in range(int(lo // 3600 * 3600), int(hi) + 1, step) if lo <= t <= hi]
        hourly = _figure(svg.line_chart(hours, title="p99 query latency per hour, by carrier", log_y=True, x_labels=x_labels,
                                        x_range=(lo, hi), colors=[colour.get(name, svg.color_for(0)) for name in hours]),
                         "Each point is the p99 over the queries that started in that hour (UTC).")
        parts.append(_cols(cdf, hourly))
    else:
        parts.append('<p class="note">No complete queries this week.</p>')
    parts.append("</section>")

    # hexagons
    parts.append('<section id="hexagons"><h2>p99 by hexagon</h2>')
    hexes = d["hexagons"][:top_n]
    if hexes:
        rows = []
        for h in hexes:
            top = d["hexagon_top"].get((h["carrier"], h["h3_cell"]), [])
            rows.append([h["carrier"], h["h3_cell"], h["region"] or "-", h["queries"], _rtt(d, (h["carrier"], h["h3_cell"])), _ms(h["p50_ms"]), _ms(h["p99_ms"]),
                         _ms(h["p99_ms_prev"]), _delta_ms(h["p99_ms_delta"], h["p99_ms_prev"]), _pct(h["lossy_flow_share"]), _part_short(top)])
        parts.append(f'<p class="note">Carrier × hexagon (H3) with at least {d["options"].min_queries} queries, worst p99 first '
                     f'(the question <code>worst_hexagons(carrier, \'{_e(week)}\', n, min_queries)</code>; '
                     f'<code>p99_explained(cell, carrier, week)</code> breaks one down).</p>')
        parts.append(_table_html(["carrier", "hexagon", "region", "queries", "RTT p50 / p95", "p50", "p99", f"p99 {prev}", "Δ p99",
                                  "lossy conns", "where the p99 tail's time went: top parts (share)"], rows, {3, 4, 5, 6, 7, 8, 9}))
    else:
        parts.append('<p class="note">No located queries this week.</p>')
    if d["hexagons_unknown"]:
        parts.append('<p class="note">Without a hexagon (no session record or location): '
                     + "; ".join(f"{_e(r['carrier'])} {r['queries']} queries, p99 {_e(_ms(r['p99_ms']))}" for r in d["hexagons_unknown"])
                     + ".</p>")
    parts.append("</section>")

    # map
    parts.append('<section id="map"><h2>Hexagon map</h2>')
    cells = []
    for c in d["cells"]:
        rings = json.loads(c["h3_boundary_geojson"])["coordinates"] if c["h3_boundary_geojson"] else None
        top = d["cell_top"].get((c["h3_cell"],), [])
        tip = (f"{c['h3_cell']} ({c['region']}): p99 {_ms(c['p99_ms'])}, p50 {_ms(c['p50_ms'])}, {c['queries']} queries"
               + (f"; its p99 tail's time: {top[0]['label']} {_pct(top[0]['share'])}" if top else ""))
        cells.append({"cell": c["h3_cell"], "rings": rings, "value": c["p99_ms"], "label": tip, "name": _ms(c["p99_ms"])})
    the_map = _figure(svg.hex_map(cells, title=f"p99 query latency by hexagon, all carriers, {week}"),
                      "Each H3 cell drawn from its boundary, colored by its p99 (log scale, green = lowest, red = highest) "
                      "and labeled with it; hover for the cell, region, query count and its tail's top signature.")
    cell_table = _table_html(["hexagon", "region", "queries", "p50", "p99", "top tail signature"],
                             [[c["h3_cell"], c["region"], c["queries"], _ms(c["p50_ms"]), _ms(c["p99_ms"]),
                               _part_short(d["cell_top"].get((c["h3_cell"],), []))] for c in d["cells"][:top_n]], {2, 3, 4}) if d["cells"] else ""
    parts.append(_cols(the_map, cell_table) + "</section>")

    # QUIC vs TCP
    parts.append('<section id="quic-vs-tcp"><h2>QUIC vs TCP</h2>')
    headline = _qvt_headline(d)
    if headline is None:
        parts.append('<p class="note">No QUIC or TCP connections this week.</p>')
    else:
        parts.append(f"<p>{_e(headline)}</p>")
        shown = [r for r in _qvt_rows(d) if r["tail_reduction"] is not None]
        chart = "" if not shown else _figure(
            svg.interval_chart([{"label": ("all traffic" if r["grain"] == "week" else _qvt_slice(r)), "value": r["tail_reduction"],
                                 "low": r["tail_reduction_low"], "high": r["tail_reduction_high"], "dim": r["small_sample"],
                                 "note": f"n = {r['quic_queries']} / {r['tcp_queries']}" + (" small" if r["small_sample"] else "")}
                                for r in shown],
                               title="QUIC tail reduction, 1 − p99(QUIC) / p99(TCP), with 95 % intervals"),
            "Right of 0: QUIC's p99 is lower. Whiskers: 95 % bootstrap interval; hollow grey: small sample "
            "(n = QUIC / TCP complete queries). All traffic, then carriers, network types and hexagons.")
        parts.append(chart)
        parts.append(f'<p class="note">{_qvt_note(d)}</p>')
        parts.append(_table_html(_QVT_HEADERS, _qvt_table(d), {1, 2, 3, 4, 5, 6, 7, 8}))
    parts.append("</section>")

    # week over week
    parts.append('<section id="week-over-week"><h2>Week-over-week</h2>')
    if not d["has_previous"]:
        parts.append(f'<p class="note">No flows in {_e(prev)}: nothing to compare with. The tables show this week alone.</p>')
    parts.append("<h3>Carriers</h3>")
    parts.append(_table_html(["carrier", "queries", f"queries {prev}", "p50 Δ", "p95 Δ", "p99", f"p99 {prev}", "p99 Δ", "p99 change",
                              "lossy conns Δ", "signature rate Δ"],
                             [[c["carrier"], c["queries"], c["queries_prev"] if c["queries_prev"] is not None else "-",
                               _delta_ms(c["p50_ms_delta"]), _delta_ms(c["p95_ms_delta"]), _ms(c["p99_ms"]), _ms(c["p99_ms_prev"]),
                               _delta_ms(c["p99_ms_delta"]), _change(c["p99_ms"], c["p99_ms_prev"]),
                               _pp(c["lossy_flow_share_delta"]), _pp(c["signature_rate_delta"])] for c in carriers],
                             set(range(1, 11))))
    moved_hex = "<h3>Hexagons that moved most</h3>" + _table_html(
        ["carrier", "hexagon", "p99", f"p99 {prev}", "Δ p99", "change"],
        [[h["carrier"], h["h3_cell"], _ms(h["p99_ms"]), _ms(h["p99_ms_prev"]), _delta_ms(h["p99_ms_delta"]),
          _change(h["p99_ms"], h["p99_ms_prev"])] for h in d["wow_hexagons"]], {2, 3, 4, 5})
    moved_sig = "<h3>Parts that moved most in each carrier's p99 tail</h3>" + _table_html(
        ["carrier", "part", "per tail query", f"{prev}", "Δ"],
        [[x["carrier"], x["label"], _ms(x["mean_ms"]), _ms(x["mean_prev_ms"]) if x["mean_prev_ms"] else "-",
          "new" if x["is_new"] else _delta_ms(x["delta_ms"])] for x in d["wow_parts"]], {2, 3, 4})
    parts.append(_cols(moved_hex, moved_sig) + "</section>")

    # worst flows
    parts.append('<section id="worst-flows"><h2>Worst flows</h2>')
    parts.append('<p class="note">The week\'s connections ranked by their slowest complete query. Drill down with the flow id: '
                 "the Grafana dashboard <i>tailscope: flow drill-down</i> (variable <code>flow</code>), or "
                 "<code>SELECT * FROM packets WHERE flow_id = &lt;id&gt; ORDER BY ts</code> in <code>tailscope db</code>; "
                 "the Community ID finds the same connection in Zeek, Suricata and Wireshark. "
                 "<i>Where its time went</i>: the part of the slowest query's time budget that took the most of it.</p>")
    rows = []
    for f in d["worst_flows"]:
        link = _flow_link(d, f["flow_id"])
        fid = (f'<a href="{_e(link)}">{_e(f["flow_id"])}</a>',) if link else f["flow_id"]
        rows.append([f["rank"], fid, f["community_id"], f["start_utc"], f["carrier"], f["h3_cell"], f["network_type"],
                     _ms(f["worst_latency_ms"]), f["worst_query_signatures"] or "-",
                     f"{f['worst_query_top_part']} {_ms(f['worst_query_top_part_ms'])}" if f["worst_query_top_part"] else "-",
                     f["flow_signatures"] or "-", f"{f['client']} → {f['server']}"])
    parts.append('<div class="compact">' + _table_html(
        ["#", "flow_id", "community_id", "start (UTC)", "carrier", "hexagon", "network", "slowest query",
         "its signatures", "where its time went (top part)", "flow signatures",
         "client → server" if d.get("show_clients") else "client network → server"], rows, {0, 7}) + "</div>")
    parts.append("</section>")

    # data quality
    parts.append('<section id="data-quality"><h2>Data quality</h2>')
    if d["stats"]:
        ov = d["stats"]["overview"][0]
        items = [("flows", ov["flows"]), ("TCP / UDP flows", f"{ov['tcp_flows']} / {ov['udp_flows']}"), ("packets", ov["packets"]),
                 ("queries (complete)", f"{ov['queries']} ({ov['complete_queries']})")]
        items += [(k.replace("_", " "), v) for k, v in ov.items() if k.endswith("_unknown")]
        note = ('<p class="note">Flows without enrichment are kept and counted as <i>unknown</i>, never dropped '
                "(docs/enrichment.md). Incomplete queries (no response seen, or never acknowledged) have no latency and "
                "are left out of every percentile.</p>")
        oh, orows = _overview_rows(d)
        traffic = ("<h3>By carrier</h3>" + _table_html(oh, orows, set(range(1, len(oh))))) if orows else ""
        parts.append(_cols("<h3>All traffic</h3>" + _table_html(["", d["week"]], [[k, v] for k, v in items], {1}) + note, traffic))
    else:
        parts.append(f'<p class="note">No flows in {_e(week)}.</p>')
    parts.append('<p class="note">How tailscope computes these numbers, from captures to this report: '
                 "docs/architecture.md of tailscope.</p>")
    parts.append("</section></main></body></html>")
    return "\n".join(parts) + "\n"


def _qvt_slice(r: dict) -> str:
    """The slice a mart_quic_vs_tcp row is about, as a label."""
    return {"week": "all traffic", "carrier": r["carrier"], "network_type": r["network_type"],
            "hexagon": r["h3_cell"]}[r["grain"]]


def _qvt_rows(d: dict) -> list[dict]:
    """The QUIC vs TCP rows the report shows: all traffic, every carrier and network type, and the
    hexagons with both transports, most queries first (top N)."""
    rows = [r for r in d["quic_vs_tcp"] if r["grain"] != "hexagon"]
    hexes = [r for r in d["quic_vs_tcp"] if r["grain"] == "hexagon" and r["h3_cell"] != "unknown"
             and r["quic_queries"] and r["tcp_queries"]]
    return rows + hexes[: d["options"].top]


def _qvt_headline(d: dict) -> str | None:
    """All traffic's QUIC tail reduction, worded by what the sample supports, and its fallbacks."""
    week = next((r for r in d["quic_vs_tcp"] if r["grain"] == "week"), None)
    if week is None:
        return None
    fallback = ""
    if week["quic_attempts"]:
        fallback = (f" {_pct(week['fallback_share'])} of QUIC attempts ended on TCP ({week['quic_ended_on_tcp']} of "
                    f"{week['quic_attempts']}); {_pct(week['mixed_session_share'])} of client sessions used both "
                    f"transports ({week['mixed_sessions']} of {week['sessions']}).")
    return _qvt_latency_sentence(d, week) + fallback


def _qvt_latency_sentence(d: dict, week: dict) -> str:
    if not week["quic_queries"]:
        return (f"No complete QUIC queries this week ({week['quic_flows']} QUIC connections): nothing to compare "
                "with TCP's tail. QUIC queries come from a key log (tailscope analyze --keylog) or from the "
                "core's inference on encrypted traffic where it supports it.")
    if not week["tcp_queries"]:
        return f"No complete TCP queries this week: QUIC's p99 {_ms(week['quic_p99_ms'])} has nothing to compare with."
    red = week["tail_reduction"]
    text = (f"QUIC's p99 query latency was {_ms(week['quic_p99_ms'])} over {week['quic_queries']} queries, TCP's "
            f"{_ms(week['tcp_p99_ms'])} over {week['tcp_queries']}: a QUIC tail reduction of {fmt_reduction(week)}")
    low, high = week["tail_reduction_low"], week["tail_reduction_high"]
    if week["small_sample"]:
        text += (f". Fewer than {week['small_sample_below']} queries on one side: the p99 rests on a handful of "
                 "queries, read it as a hint")
    elif low is not None and low <= 0 <= high:
        text += ": the interval includes 0, so the week does not show QUIC and TCP's tails apart"
    elif low is not None and low > 0:
        text += ": QUIC's tail was shorter" if red > 0 else ""
    elif high is not None and high < 0:
        text += ": QUIC's tail was longer"
    prev = d.get("quic_vs_tcp_prev")
    if prev and prev[0]["tail_reduction"] is not None:
        text += f" ({fmt_reduction(prev[0])} in {d['previous_week']})"
    return text + "."


_QVT_HEADERS = ["slice", "queries QUIC / TCP", "p50 QUIC / TCP", "p99 QUIC / TCP", "QUIC tail reduction [95% CI]",
                "p99 tail hit by loss QUIC / TCP", "handshake RTT QUIC / TCP", "QUIC ended on TCP", "sessions mixing both"]


def _qvt_table(d: dict) -> list[list]:
    return [[("all traffic" if r["grain"] == "week" else f"{r['grain'].replace('_', ' ')}: {_qvt_slice(r)}"),
             f"{r['quic_queries']} / {r['tcp_queries']}",
             f"{_ms(r['quic_p50_ms'])} / {_ms(r['tcp_p50_ms'])}", f"{_ms(r['quic_p99_ms'])} / {_ms(r['tcp_p99_ms'])}",
             fmt_reduction(r),
             f"{_pct(r['quic_tail_loss_rate'])} / {_pct(r['tcp_tail_loss_rate'])}",
             f"{_ms(r['quic_handshake_rtt_p50_ms'])} / {_ms(r['tcp_handshake_rtt_p50_ms'])}",
             f"{_pct(r['fallback_share'])} ({r['quic_ended_on_tcp']} of {r['quic_attempts']})",
             f"{_pct(r['mixed_session_share'])} ({r['mixed_sessions']} of {r['sessions']})"] for r in _qvt_rows(d)]


QVT_NOTE = ("QUIC tail reduction = 1 − p99(QUIC) ÷ p99(TCP) over complete queries (0.2: QUIC's p99 is 20 % lower), with "
            "its 95 % bootstrap interval: each transport's queries resampled with replacement {resamples:,} times, seeded, so "
            "the same data give the same interval (sql/marts/070_quic_vs_tcp.sql). <i>small sample</i>: fewer than "
            "{below} queries on either side, where the p99 rests on at most 5 queries. A TCP connection's first query "
            "includes its setup (SYN to the first request byte); a QUIC first query includes it only where the core "
            "measured one (setup p50 QUIC / TCP this week: {setup}). p99 tail hit by loss: the share of the queries "
            "at or above the p99 carrying a loss signature (retransmissions by cause, SYN/Initial loss, policing). QUIC ended on TCP: QUIC attempts whose session got its answer over "
            "TCP (quic_fallback); sessions: a client's connections to one server address, {session_gap_s} s apart at most.")


def _qvt_note(d: dict) -> str:
    week = next((r for r in d["quic_vs_tcp"] if r["grain"] == "week"), None)
    settings = d["quic_vs_tcp_settings"]
    setup = f"{_ms(week['quic_setup_p50_ms'])} / {_ms(week['tcp_setup_p50_ms'])}" if week else "-"
    return QVT_NOTE.format(below=settings["min_queries"], resamples=settings["resamples"],
                           session_gap_s=settings["session_gap_s"], setup=setup)


def what_changed_note(d: dict) -> str:
    st = d["what_changed_settings"]
    return (f"{d['week']} against {d['previous_week']}: each slice's percentile this week minus last week's, with its 95 % "
            f"bootstrap interval ({st['resamples']:,} seeded resamples of each week's queries; sql/marts/080_what_changed.sql). "
            f"Beyond noise: the interval excludes 0 and both weeks' tails hold at least {st['min_tail']} queries (a p99 needs "
            f"{st['min_tail'] * 100:,} queries a week, a p95 {st['min_tail'] * 20:,}). The part that moved it: the part of the time "
            "budget whose mean time per tail query changed most in the same direction; 'new': it took no time in last "
            "week's tail. Overlapping slices moved by the same part are one change, named by the smallest slice that holds "
            "most of the time the part added.")


def _key(r: dict) -> tuple:
    return (r["slice"], r["carrier"], r["region"], r["h3_cell"], r["level"])


def _changes_table(d: dict) -> tuple[list[str], list[list]]:
    """Every slice whose p95 or p99 moved beyond noise, the summary's first, with what it was named as."""
    named = {_key(h): h for h in d["headline_changes"]}
    part_of = {_key(m): h for h in d["headline_changes"] for m in h["also"]}
    level_of = {_key(m)[:4]: m["level"] for h in d["headline_changes"] for m in [h, *h["also"]]}
    rows = []
    for r in sorted(d["changes"], key=lambda r: (_key(r) not in named, -abs(r["top_part_added_ms"] or 0))):
        if r["level"] not in ("p95", "p99") or not r["beyond_noise"]:
            continue
        top = next((x for x in r["parts"] if x["part"] == r["top_part"]), None)
        k = _key(r)
        where = ("named in the summary" if k in named else
                 f"the change named as {slice_label(part_of[k])}" if k in part_of else
                 f"the slice counts at its {level_of[k[:4]]}" if k[:4] in level_of else "no part moved with it")
        rows.append([slice_label(r), r["level"], _ms(r["value_prev_ms"]), _ms(r["value_ms"]), fmt_change(r),
                     f"{r['tail_queries']} / {r['tail_queries_prev']}", fmt_part_change(top) if top else "-", where])
    return (["slice", "level", d["previous_week"], d["week"], "change [95% CI]", "tail queries now / before",
             "part that moved most", "summary"], rows)


def _carrier_changes_table(d: dict) -> tuple[list[str], list[list]]:
    rows = []
    for r in d["changes"]:
        if r["slice"] != "carrier":
            continue
        top = next((x for x in r["parts"] if x["part"] == r["top_part"]), None)
        rows.append([r["carrier"], r["level"], _ms(r["value_prev_ms"]), _ms(r["value_ms"]), fmt_change(r),
                     f"{r['tail_queries']} / {r['tail_queries_prev']}",
                     "yes" if r["beyond_noise"] else ("no" if r["enough"] else "too few queries"),
                     fmt_part_change(top) if top and r["delta_ms"] is not None else "-"])
    return (["carrier", "level", d["previous_week"], d["week"], "change [95% CI]", "tail queries now / before", "beyond noise",
             "part that moved most"], rows)


def _what_if_table(d: dict, n: int = 3) -> tuple[list[str], list[list]]:
    rows = []
    for c in d["carriers"]:
        b = [x for x in d["carrier_budget"] if x["carrier"] == c["carrier"] and x["saved_ms"]]
        b.sort(key=lambda x: -(x["saved_ms"] or 0))
        for x in b[:n]:
            rows.append([c["carrier"], _ms(x["threshold_ms"]), x["label"], _ms(x["without_ms"]), _ms(x["saved_ms"])])
    return ["carrier", "p99", "without", "p99 without it", "saved"], rows


def _pp(v) -> str:
    """A change of a share in percentage points."""
    if v is None:
        return "-"
    return f"{'+' if v > 0 else ''}{v * 100:.1f} pp"


# ----------------------------------------------------------------------------------------------
# Markdown


def _rtt(d: dict, key: tuple) -> str:
    p50, p95 = d.get("rtt", {}).get(key, (None, None))
    return f"{_ms(p50)} / {_ms(p95)}" if p50 is not None else "-"


def _md_table(headers: list[str], rows: list[list]) -> str:
    if not rows:
        return "(no rows)\n"
    def cell(c):
        return str(c[0] if isinstance(c, tuple) else c).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def render_markdown(d: dict, html_name: str = "") -> str:
    week, prev = d["week"], d["previous_week"]
    out = [f"# tailscope weekly root-cause report — {week}", "",
           f"{d['first_day']} to {d['last_day']} (UTC), compared with {prev}. Dataset `{d['dataset']}`. Generated {d['generated']}. "
           "Definitions: docs/stats.md and sql/README.md of tailscope; how it is built: docs/architecture.md.",
           "" if not html_name else f"Plots and the hexagon map: [{html_name}]({html_name}).", ""]
    titles = dict(SECTIONS)
    out += [f"## {titles['summary']}", ""] + [f"- {h}" for h in _headlines(d)] + [""]
    t, tp = d["totals"], d["totals_prev"]
    if t:
        out.append(_md_table(["", week, prev], [
            ["complete queries", t["queries"], tp["queries"] if tp else "-"],
            ["connections", t["flows"], tp["flows"] if tp else "-"],
            ["p50 / p95 / p99", f"{_ms(t['p50_ms'])} / {_ms(t['p95_ms'])} / {_ms(t['p99_ms'])}",
             f"{_ms(tp['p50_ms'])} / {_ms(tp['p95_ms'])} / {_ms(tp['p99_ms'])}" if tp else "-"],
            ["lossy TCP connections", _pct(t["lossy_flow_share"]), _pct(tp["lossy_flow_share"]) if tp else "-"]]))
    out += [f"## {titles['what-changed']}", ""]
    if not d["has_previous"]:
        out += [f"No flows in {prev}: nothing to compare with.", ""]
    else:
        out += [what_changed_note(d), "", "### Slices whose p95 or p99 moved beyond noise", ""]
        out.append(_md_table(*_changes_table(d)))
        out += ["### What if: each carrier's p99 without one part", ""]
        out.append(_md_table(*_what_if_table(d)))
        out += ["### Every carrier, p50 / p95 / p99", ""]
        out.append(_md_table(*_carrier_changes_table(d)))
    out += [f"## {titles['field-study']}", ""]
    headers, rows = _network_table(d)
    out.append(_md_table(headers, rows))
    out += [f"## {titles['carriers']}", ""]
    out.append(_md_table(["carrier", "queries", "RTT p50 / p95", "p50", "p95", "p99", f"p99 {prev}", "Δ p99", "lossy conns", "where the p99 tail's time went"],
                         [[c["carrier"], c["queries"], _rtt(d, (c["carrier"],)), _ms(c["p50_ms"]), _ms(c["p95_ms"]), _ms(c["p99_ms"]), _ms(c["p99_ms_prev"]),
                           _delta_ms(c["p99_ms_delta"], c["p99_ms_prev"]), _pct(c["lossy_flow_share"]), _part_short(d["carrier_top"].get((c["carrier"],), []))]
                          for c in d["carriers"]]))
    out += [f"## {titles['hexagons']}", ""]
    out.append(_md_table(["carrier", "hexagon", "region", "queries", "RTT p50 / p95", "p50", "p99", f"p99 {prev}", "Δ p99", "where the p99 tail's time went"],
                         [[h["carrier"], h["h3_cell"], h["region"] or "-", h["queries"], _rtt(d, (h["carrier"], h["h3_cell"])), _ms(h["p50_ms"]), _ms(h["p99_ms"]),
                           _ms(h["p99_ms_prev"]), _delta_ms(h["p99_ms_delta"]),
                           _part_short(d["hexagon_top"].get((h["carrier"], h["h3_cell"]), []))] for h in d["hexagons"][: d["options"].top]]))
    out += [f"## {titles['map']}", "", "The map is drawn in the HTML report; the cells, all carriers:", ""]
    out.append(_md_table(["hexagon", "region", "lat, lng", "queries", "p99"],
                         [[c["h3_cell"], c["region"], f"{c['h3_lat']:.4f}, {c['h3_lng']:.4f}" if c["h3_lat"] is not None else "-",
                           c["queries"], _ms(c["p99_ms"])] for c in d["cells"]]))
    out += [f"## {titles['quic-vs-tcp']}", ""]
    headline = _qvt_headline(d)
    if headline is None:
        out += ["No QUIC or TCP connections this week.", ""]
    else:
        out += [headline, "", html.unescape(_qvt_note(d)).replace("<i>", "*").replace("</i>", "*"), ""]
        out.append(_md_table(_QVT_HEADERS, _qvt_table(d)))
    out += [f"## {titles['week-over-week']}", ""]
    if not d["has_previous"]:
        out += [f"No flows in {prev}: nothing to compare with.", ""]
    out += ["### p99 by carrier", ""]
    out.append(_md_table(["carrier", "p99", f"p99 {prev}", "Δ p99", "change", "lossy conns Δ"],
                         [[c["carrier"], _ms(c["p99_ms"]), _ms(c["p99_ms_prev"]), _delta_ms(c["p99_ms_delta"]),
                           _change(c["p99_ms"], c["p99_ms_prev"]), _pp(c["lossy_flow_share_delta"])] for c in d["carriers"]]))
    out += ["### p99 by hexagon (largest changes)", ""]
    out.append(_md_table(["carrier", "hexagon", "p99", f"p99 {prev}", "Δ p99"],
                         [[h["carrier"], h["h3_cell"], _ms(h["p99_ms"]), _ms(h["p99_ms_prev"]), _delta_ms(h["p99_ms_delta"])]
                          for h in d["wow_hexagons"]]))
    out += ["### Parts that moved most in each carrier's p99 tail (mean time per tail query)", ""]
    out.append(_md_table(["carrier", "part", "per tail query", f"{prev}", "Δ"],
                         [[x["carrier"], x["label"], _ms(x["mean_ms"]), _ms(x["mean_prev_ms"]) if x["mean_prev_ms"] else "-",
                           "new" if x["is_new"] else _delta_ms(x["delta_ms"])] for x in d["wow_parts"]]))
    out += [f"## {titles['worst-flows']}", "",
            "Drill down: Grafana *tailscope: flow drill-down* (variable `flow`), or `SELECT * FROM packets WHERE flow_id = <id> ORDER BY ts`.", ""]
    out.append(_md_table(["#", "flow_id", "community_id", "start (UTC)", "carrier", "hexagon", "slowest query", "its signatures",
                          "where its time went (top part)", "flow signatures"],
                         [[f["rank"], f"`{f['flow_id']}`", f"`{f['community_id']}`", f["start_utc"], f["carrier"], f["h3_cell"],
                           _ms(f["worst_latency_ms"]), f["worst_query_signatures"] or "-",
                           f"{f['worst_query_top_part']} {_ms(f['worst_query_top_part_ms'])}" if f["worst_query_top_part"] else "-",
                           f["flow_signatures"] or "-"] for f in d["worst_flows"]]))
    out += [f"## {titles['data-quality']}", ""]
    if d["stats"]:
        ov = d["stats"]["overview"][0]
        out.append(_md_table(["", week], [[k.replace("_", " "), v] for k, v in ov.items() if k != "group"]))
    return "\n".join(out).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------
# GeoJSON of the week's cells (for a Grafana GeoJSON layer or any map tool)


def hexagons_geojson(d: dict) -> dict:
    features = []
    for c in d["cells"]:
        if not c["h3_boundary_geojson"]:
            continue
        top = d["cell_top"].get((c["h3_cell"],), [])
        features.append({
            "type": "Feature",
            "id": c["h3_cell"],
            "geometry": json.loads(c["h3_boundary_geojson"]),
            "properties": {"h3_cell": c["h3_cell"], "region": c["region"], "week": d["week"], "queries": c["queries"],
                           "p50_ms": c["p50_ms"], "p99_ms": c["p99_ms"], "lossy_flow_share": c["lossy_flow_share"],
                           "top_tail_part": top[0]["part"] if top else None,
                           "top_tail_part_share": top[0]["share"] if top else None},
        })
    return {"type": "FeatureCollection", "features": features}


# ----------------------------------------------------------------------------------------------


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_report(dataset: Path | str, out_dir: Path | str, options: ReportOptions | None = None) -> ReportPaths:
    """Compute and write report-<week>.html, report-<week>.md and hexagons-<week>.geojson."""
    options = options or ReportOptions()
    d = collect(Path(dataset), options)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    week = d["week"]
    paths = ReportPaths(html=out_dir / f"report-{week}.html", markdown=out_dir / f"report-{week}.md",
                        geojson=out_dir / f"hexagons-{week}.geojson", week=week, empty=not d["totals"])
    _write(paths.html, render_html(d))
    _write(paths.markdown, render_markdown(d, paths.html.name))
    _write(paths.geojson, json.dumps(hexagons_geojson(d), indent=1) + "\n")
    if not d["has_previous"]:
        paths.notes.append(f"no flows in {d['previous_week']}: no week-over-week comparison")
    return paths

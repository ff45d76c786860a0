"""`tailscope stats`: the field-study tables and tail-latency attribution for a dataset slice.

Pure functions over the views of sql/ (installed on an in-memory DuckDB over the Parquet dataset):
a lossy connection, the ISO week and the tail attribution are the SQL layer's (`flow_facts`,
`query_facts`, the `tail_attribution` macro); this module selects the slice and shapes the tables.
What each number means, exactly, is in docs/stats.md.

    tables = compute_stats(Path("demo-out"), Slice(carrier=["Northwind Mobile"]), by="hexagon")
    print(render(tables, "text"))

``compute_stats`` returns ``{"overview": [...], "network": [...], "budget": [...], "what_changed": [...],
"attribution": [...], "quic_vs_tcp": [...]}``, each a list of dicts (times in milliseconds, shares as fractions
0..1); ``render`` prints them as text, CSV, JSON or Markdown. ``budget`` (where the time of each level's
queries went, by part of the time budget: shares <= 100 %, summing to 100 %) and ``what_changed`` (the
week's p50/p95/p99 against the week before, with a bootstrap interval, and the parts that moved) are the
primary figures; ``attribution`` (signatures, with the overlapping "charged delay") is secondary.
"""
from __future__ import annotations

import csv
import glob
import io
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

TABLE_NAMES = ("overview", "network", "budget", "what_changed", "attribution", "quic_vs_tcp")
FORMATS = ("text", "csv", "json", "markdown")
PERCENTILES = (0.5, 0.75, 0.95, 0.99)
ATTRIBUTION_LEVELS = (("all", None), ("p50", 0.5), ("p95", 0.95), ("p99", 0.99))
UNKNOWN = "unknown"

# slice / group-by dimension → flow_facts column (where a missing enrichment value, e.g. of runs
# written before enrichment, reads 'unknown')
DIMENSIONS = {
    "carrier": "carrier",
    "hexagon": "h3_cell",
    "site": "site",
    "week": "week",
    "network_type": "network_type",
    "region": "region",
}
ENRICHMENT_DIMENSIONS = {"carrier", "hexagon", "site", "network_type", "region"}
WEEK_RE = re.compile(r"^\d{4}-W(0[1-9]|[1-4]\d|5[0-3])$")


class StatsError(ValueError):
    """A dataset or slice that cannot be computed (the message says why)."""


@dataclass
class Slice:
    """Which flows to count (every given dimension must match; several values: any of them).
    Packets and queries follow their flow."""

    carrier: list[str] = field(default_factory=list)
    hexagon: list[str] = field(default_factory=list)  # H3 cells; a coarser cell takes its descendants
    site: list[str] = field(default_factory=list)
    week: list[str] = field(default_factory=list)  # ISO weeks YYYY-Www of the flow's start (UTC)
    network_type: list[str] = field(default_factory=list)
    region: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, [value])
        for w in self.week:
            if not WEEK_RE.match(w):
                raise StatsError(f"week {w!r}: expected YYYY-Www, e.g. 2026-W47")

    def active(self) -> dict[str, list[str]]:
        return {k: v for k, v in asdict(self).items() if v}

    def describe(self) -> str:
        parts = [f"{k}={','.join(v)}" for k, v in self.active().items()]
        return " ".join(parts) if parts else "all flows"


# ----------------------------------------------------------------------------------------------
# Reading


def _sql_str(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _connect(dataset: Path):
    import duckdb

    from tailscope.jobs.analytics.db import install

    con = duckdb.connect()
    con.execute("SET TimeZone='UTC'")
    present = {table: bool(glob.glob(str(dataset / table / "*" / "*.parquet"))) for table in ("flows", "packets", "queries")}
    if present["flows"]:
        install(con, dataset)
    return con, present


def _columns(con, view: str) -> set[str]:
    return {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {view}").fetchall()}


def _expand_hexagons(con, cells: list[str]) -> list[str]:
    """The dataset's cells equal to or inside the given cells (any resolution), plus 'unknown'."""
    import h3

    wanted, out = [], []
    for c in cells:
        c = c.strip().lower()
        if c == UNKNOWN:
            out.append(UNKNOWN)
        elif h3.is_valid_cell(c):
            wanted.append(c)
        else:
            raise StatsError(f"hexagon {c!r} is not an H3 cell index (e.g. 871969c9bffffff) or 'unknown'")
    if wanted:
        present = [r[0] for r in con.execute("SELECT DISTINCT h3_cell FROM flow_facts").fetchall()]
        for cell in present:
            if cell == UNKNOWN or not h3.is_valid_cell(cell):
                continue
            res = h3.get_resolution(cell)
            for w in wanted:
                wres = h3.get_resolution(w)
                if wres <= res and h3.cell_to_parent(cell, wres) == w:
                    out.append(cell)
                    break
    return out


def _select_flows(con, columns: set[str], slice_: Slice, by: str | None) -> None:
    """TEMP TABLE sel(flow_id, grp) and flow-level TEMP TABLE f for the slice."""
    needed = [d for d in slice_.active() if d in ENRICHMENT_DIMENSIONS]
    if by in ENRICHMENT_DIMENSIONS:
        needed.append(by)
    missing = sorted({d for d in needed if DIMENSIONS[d] not in columns})
    if missing:
        raise StatsError(
            f"the dataset has no enrichment columns for {', '.join(missing)}: analyze it with enrichment "
            "(--prefixes, --asn-db, --sessions, --site) to slice by them"
        )
    where, params, dims = [], [], []
    for dim, values in slice_.active().items():
        dims.append(dim)
        expr = DIMENSIONS[dim]
        if dim == "hexagon":
            values = _expand_hexagons(con, values)
        elif dim == "network_type":
            from tailscope.jobs.enrichment.enrich import normalize_network_type

            values = [normalize_network_type(v) for v in values]
        if dim == "week":
            where.append(f"list_contains(?::VARCHAR[], {expr})")
            params.append(list(values))
        else:
            where.append(f"list_contains(?::VARCHAR[], lower({expr}))")
            params.append([v.lower() for v in values])
    grp = DIMENSIONS[by] if by else "'all'"
    cond = " AND ".join(where) if where else "true"
    con.execute(f"CREATE TEMP TABLE f AS SELECT *, {grp} AS grp FROM flow_facts WHERE {cond}", params)
    con.execute("CREATE TEMP TABLE sel AS SELECT flow_id, any_value(grp) AS grp FROM f GROUP BY flow_id")
    # what_changed compares a week with the one before: the slice's flows of every week (grouped
    # as asked, except by week, which is what it compares)
    keep = [(w, v) for w, v, dim in zip(where, params, dims) if dim != "week"]
    wcond = " AND ".join(w for w, _ in keep) if keep else "true"
    wgrp = grp if by != "week" else "'all'"
    con.execute(f"CREATE TEMP TABLE selw AS SELECT flow_id, any_value({wgrp}) AS grp FROM flow_facts WHERE {wcond} "
                "GROUP BY flow_id", [v for _, v in keep])


# ----------------------------------------------------------------------------------------------
# The tables


def _ms(ns) -> float | None:
    return None if ns is None else round(ns / 1e6, 3)


def _share(num, den) -> float | None:
    return None if not den else round(num / den, 6)


def _overview(con, present: dict, columns: set[str]) -> list[dict]:
    unknown_cols = [c for c in ("carrier", "h3_cell", "network_type", "region", "site") if c in columns]
    unknown_sql = "".join(f", count(*) FILTER (WHERE {c} = '{UNKNOWN}' OR {c} IS NULL) AS {c}_unknown" for c in unknown_cols)
    rows = con.execute(
        f"""SELECT grp, count(*) AS flows, count(*) FILTER (WHERE protocol = 'tcp') AS tcp_flows,
               count(*) FILTER (WHERE protocol <> 'tcp') AS udp_flows, count(*) FILTER (WHERE protocol = 'quic') AS quic_flows,
               strftime(min(start), '%Y-%m-%dT%H:%M:%SZ') AS first_flow, strftime(max(start), '%Y-%m-%dT%H:%M:%SZ') AS last_flow
               {unknown_sql}
        FROM f GROUP BY grp ORDER BY grp"""
    ).fetchall()
    names = ["group", "flows", "tcp_flows", "udp_flows", "quic_flows", "first_flow_start", "last_flow_start"] + [
        f"flows_{'hexagon' if c == 'h3_cell' else c}_unknown" for c in unknown_cols
    ]
    out = {r[0]: dict(zip(names, r)) for r in rows}
    if present["packets"]:
        for grp, packets in con.execute(
            "SELECT s.grp, count(*) FROM packets p JOIN sel s USING (flow_id) GROUP BY s.grp"
        ).fetchall():
            if grp in out:
                out[grp]["packets"] = packets
    if present["queries"]:
        for grp, n, complete in con.execute(
            "SELECT s.grp, count(*), count(*) FILTER (WHERE q.complete) FROM queries q JOIN sel s USING (flow_id) GROUP BY s.grp"
        ).fetchall():
            if grp in out:
                out[grp]["queries"] = n
                out[grp]["complete_queries"] = complete
    for row in out.values():
        row.setdefault("packets", 0)
        row.setdefault("queries", 0)
        row.setdefault("complete_queries", 0)
    order = ["group", "flows", "tcp_flows", "udp_flows", "quic_flows", "packets", "queries", "complete_queries", "first_flow_start", "last_flow_start"]
    return [{k: row[k] for k in order + [k for k in row if k not in order]} for row in out.values()]


def _percentile_row(metric, label, unit, grp, values, n, scale=None) -> dict:
    vals = list(values) if values else [None] * len(PERCENTILES)
    conv = (lambda v: None if v is None else round(v / scale, 3)) if scale else (lambda v: v)
    row = {"group": grp, "metric": metric, "label": label, "unit": unit}
    for p, v in zip(PERCENTILES, vals):
        row[f"p{int(p * 100)}"] = conv(v)
    row.update({"value": None, "numerator": None, "denominator": None, "n": n or 0})
    return row


def _value_row(metric, label, unit, grp, value, numerator=None, denominator=None, n=None) -> dict:
    row = {"group": grp, "metric": metric, "label": label, "unit": unit}
    row.update({f"p{int(p * 100)}": None for p in PERCENTILES})
    row.update({"value": value, "numerator": numerator, "denominator": denominator, "n": n if n is not None else denominator or 0})
    return row


# segments that occupy sequence space (payload, SYN, FIN): what can be retransmitted
SEGMENT = "(payload_len > 0 OR (flags & 3) <> 0 OR retx_cause IS NOT NULL)"
# a retransmission by the sender: a network duplicate (a copy a SPAN port or a link made) is no
# loss, as flow_facts.lossy (sql/marts/010_flow_facts.sql) does not count it
SENDER_RETX = "(retx_cause IS NOT NULL AND retx_cause <> 'network_duplicate')"
QUANTS = "[" + ", ".join(str(p) for p in PERCENTILES) + "]"


def _network(con, present: dict, groups: list[str]) -> list[dict]:
    rows: dict[str, list[dict]] = {g: [] for g in groups}
    flows = {
        r[0]: r[1:]
        for r in con.execute(
            f"""SELECT grp, count(*) AS tcp,
                   count(*) FILTER (WHERE lossy) AS lossy,
                   count(*) FILTER (WHERE lossy AND loss_in_establishment) AS est,
                   count(*) FILTER (WHERE lossy AND loss_in_data) AS data
            FROM f WHERE protocol = 'tcp' GROUP BY grp"""
        ).fetchall()
    }
    rtt, retx, lossrate, delay, perseg, sd_conn = {}, {}, {}, {}, {}, {}
    if present["packets"]:
        con.execute(
            f"""CREATE TEMP TABLE p AS
            SELECT s.grp, pk.flow_id, pk.direction, pk.seq, pk.rtt_ns, pk.retx_cause, pk.retx_delay_ns, {SEGMENT} AS is_segment,
                   fl.lossy
            FROM packets pk JOIN sel s USING (flow_id)
            JOIN (SELECT flow_id, bool_or(lossy) AS lossy FROM f GROUP BY flow_id) fl USING (flow_id)
            WHERE pk.ip_proto = 6"""
        )
        rtt = {
            r[0]: r[1:]
            for r in con.execute(
                f"SELECT grp, quantile_disc(rtt_ns, {QUANTS}), count(rtt_ns), stddev_samp(rtt_ns) FROM p "
                "WHERE direction = 'c2s' AND rtt_ns IS NOT NULL GROUP BY grp"
            ).fetchall()
        }
        sd_conn = {
            r[0]: r[1:]
            for r in con.execute(
                """SELECT grp, avg(sd), count(*) FROM (
                       SELECT grp, flow_id, stddev_samp(rtt_ns) AS sd FROM p
                       WHERE direction = 'c2s' AND rtt_ns IS NOT NULL GROUP BY grp, flow_id HAVING count(*) >= 2)
                   GROUP BY grp"""
            ).fetchall()
        }
        retx = {
            r[0]: r[1:]
            for r in con.execute(
                f"SELECT grp, count(*) FILTER (WHERE {SENDER_RETX}), count(*) FILTER (WHERE is_segment) FROM p GROUP BY grp"
            ).fetchall()
        }
        lossrate = {
            r[0]: r[1:]
            for r in con.execute(
                f"SELECT grp, count(*) FILTER (WHERE {SENDER_RETX}), count(*) FILTER (WHERE is_segment) FROM p "
                "WHERE lossy GROUP BY grp"
            ).fetchall()
        }
        delay = {
            r[0]: r[1:]
            for r in con.execute(
                f"SELECT grp, quantile_disc(retx_delay_ns, {QUANTS}), count(*) FROM p "
                f"WHERE {SENDER_RETX} AND retx_delay_ns IS NOT NULL GROUP BY grp"
            ).fetchall()
        }
        perseg = {
            r[0]: r[1:]
            for r in con.execute(
                f"""SELECT grp, quantile_disc(n, {QUANTS}), count(*) FROM (
                        SELECT grp, flow_id, direction, seq, count(*) AS n FROM p
                        WHERE {SENDER_RETX} GROUP BY ALL)
                    GROUP BY grp"""
            ).fetchall()
        }
    for g in groups:
        tcp, lossy, est, data = flows.get(g, (0, 0, 0, 0))
        q, n, sd = rtt.get(g, (None, 0, None))
        out = rows[g]
        out.append(_percentile_row("rtt", "RTT p50 / p75 / p95 / p99", "ms", g, q, n, scale=1e6))
        sdc, nc = sd_conn.get(g, (None, 0))
        out.append(_value_row("rtt_stddev_connection", "RTT variance: std dev within a connection (mean)", "ms", g, _ms(sdc), n=nc))
        out.append(_value_row("rtt_stddev_all", "RTT std dev over all samples", "ms", g, _ms(sd), n=n))
        r_num, r_den = retx.get(g, (0, 0))
        out.append(_value_row("retransmitted_packets", "packets retransmitted", "share", g, _share(r_num, r_den), r_num, r_den))
        l_num, l_den = lossrate.get(g, (0, 0))
        out.append(_value_row("loss_rate_lossy", "loss rate in lossy connections", "share", g, _share(l_num, l_den), l_num, l_den))
        out.append(_value_row("lossy_connections", "connections with at least one loss", "share", g, _share(lossy, tcp), lossy, tcp))
        out.append(_value_row("lossy_establishment", "of lossy connections: loss during establishment", "share", g, _share(est, lossy), est, lossy))
        out.append(_value_row("lossy_data", "of lossy connections: loss during data exchange", "share", g, _share(data, lossy), data, lossy))
        dq, dn = delay.get(g, (None, 0))
        out.append(_percentile_row("retx_delay", "retransmission delay p50 / p75 / p95 / p99", "ms", g, dq, dn, scale=1e6))
        sq, sn = perseg.get(g, (None, 0))
        out.append(_percentile_row("retx_per_segment", "retransmissions of one segment p50 / p75 / p95 / p99", "count", g, sq, sn))
    return [row for g in groups for row in rows[g]]


NONE = "(none)"


def _attribution(con, present: dict) -> list[dict]:
    """sql/'s tail_attribution at each level, over the slice's complete queries (query_facts)."""
    if not present["queries"]:
        return []
    con.execute(
        "CREATE TEMP TABLE aq AS SELECT s.grp, q.latency_ns, q.setup_ns, q.signatures, q.delays "
        "FROM query_facts q JOIN sel s USING (flow_id)"
    )
    out = []
    for ord_, (level, p) in enumerate(ATTRIBUTION_LEVELS):
        rows = con.execute(
            "SELECT grp, signature, threshold_ns, tail_queries, tail_latency_ns, queries_with, delay_ns, median_with_ns, "
            f"median_without_ns FROM tail_attribution('aq', {p or 0})"
        ).fetchall()
        for grp, sig, t, n, sum_lat, n_with, d, med_with, med_without in rows:
            out.append(
                {
                    "group": grp,
                    "level": level,
                    "threshold_ms": _ms(t),
                    "queries": n,
                    "signature": sig,
                    "queries_with": n_with,
                    "share": _share(n_with, n),
                    "median_with_ms": _ms(med_with),
                    "median_without_ms": _ms(med_without),
                    # the overlapping "charged delay" (docs/stats.md): secondary, can exceed the latency
                    "charged_delay_ms": _ms(d),
                    "_ord": ord_,
                }
            )
    out.sort(key=lambda r: (r["group"], r["_ord"], r["signature"] == NONE, -(r["share"] or 0), -(r["charged_delay_ms"] or 0), r["signature"]))
    for r in out:
        del r["_ord"]
    return out


def _budget(con, present: dict) -> list[dict]:
    """sql/'s tail_budget (marts/016_budget.sql) at each level over the slice's complete queries:
    per group, level and part of the time budget, the part's share of the level's summed latency
    (<= 1; the parts' shares sum to 1), its mean time per query of the level, and what if: the
    level's percentile with the part removed from every query (budget_what_if)."""
    if not present["queries"]:
        return []
    con.execute("CREATE TEMP TABLE bq AS SELECT s.grp, q.latency_ns, COLUMNS('^budget_.*_ns$') "
                "FROM query_facts q JOIN sel s USING (flow_id)")
    out = []
    for ord_, (level, p) in enumerate(ATTRIBUTION_LEVELS):
        what_if = {}
        if p:
            what_if = {(g, part): (w, sv) for g, part, w, sv in con.execute(
                f"SELECT grp, part, without_ns, saved_ns FROM budget_what_if('bq', {p})").fetchall()}
        rows = con.execute(
            "SELECT grp, ord, part, label, threshold_ns, tail_queries, tail_latency_ns, part_ns, share, mean_ns, queries_with "
            f"FROM tail_budget('bq', {p or 0})").fetchall()
        for grp, pord, part, label, t, n, sum_lat, part_ns, share, mean_ns, n_with in rows:
            w, saved = what_if.get((grp, part), (None, None))
            out.append({
                "group": grp, "level": level, "threshold_ms": _ms(t) if p else None, "queries": n,
                "part": part, "label": label, "share": None if share is None else round(share, 6),
                "time_ms": _ms(part_ns), "mean_ms": _ms(mean_ns), "queries_with": n_with,
                "without_ms": _ms(w), "saved_ms": _ms(saved), "_ord": (ord_, pord),
            })
    out.sort(key=lambda r: (str(r["group"]), r["_ord"]))
    for r in out:
        del r["_ord"]
    return out


def _what_changed(con, present: dict, slice_: Slice) -> list[dict]:
    """sql/'s what_changed (marts/080_what_changed.sql) per group: the slice's latest week (or the
    latest --week given) against the week before: p50/p95/p99, their change with its 95 % bootstrap
    interval, whether it is beyond noise, and the part of the time budget that moved most."""
    if not present["queries"]:
        return []
    wk = max(slice_.week) if slice_.week else con.execute("SELECT max(week) FROM flow_facts WHERE flow_id IN "
                                                          "(SELECT flow_id FROM sel)").fetchone()[0]
    if wk is None:
        return []
    con.execute("CREATE TEMP TABLE wq AS SELECT s.grp, q.week, q.flow_id AS cluster, q.latency_ns, COLUMNS('^budget_.*_ns$') "
                "FROM query_facts q JOIN selw s USING (flow_id)")
    cur = con.execute("SELECT ? AS week, previous_week(?) AS previous_week, * FROM what_changed('wq', ?) "
                      "ORDER BY grp, level_ord", [wk, wk, wk])
    names = ["group" if d[0] == "grp" else d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        row = dict(zip(names, r))
        row.pop("level_ord", None)
        for k in ("value_ms", "value_prev_ms", "delta_ms", "delta_low_ms", "delta_high_ms", "top_part_delta_ms"):
            row[k] = None if row[k] is None else round(row[k], 3)
        row["parts"] = [{**x, "mean_ms": round(x["mean_ms"], 3), "mean_prev_ms": round(x["mean_prev_ms"], 3),
                         "delta_ms": round(x["delta_ms"], 3)} for x in (row["parts"] or [])]
        out.append(row)
    return out


def fmt_part_change(part: dict | None, label: str | None = None) -> str:
    """A part's change per tail query, as people read it: 'policing throttle +412 ms per tail query,
    new this week'."""
    if not part:
        return "-"
    text = f"{label or part['label']} {fmt_delta(part['delta_ms'])} per tail query"
    return text + (", new this week" if part.get("is_new") else "")


def fmt_change(row: dict) -> str:
    """A what_changed row's change with its interval: '+380 ms [325 ms, 414 ms]'."""
    if row.get("delta_ms") is None:
        return "new" if row.get("value_ms") is not None else "-"
    vals = [row["delta_ms"]] + ([row["delta_low_ms"], row["delta_high_ms"]] if row.get("delta_low_ms") is not None else [])
    # the change and its interval in one unit, that of the largest: '+30 ms [+1.0 ms, +63 ms]', not '[+987 µs, ...'
    name, factor = _unit(max(abs(v) for v in vals) or 0)

    def one(v):
        return ("+" if v > 0 else "") + _num(v * factor) + f" {name}" if v else f"0 {name}"

    text = one(vals[0])
    if len(vals) == 3:
        text += f" [{one(vals[1])}, {one(vals[2])}]"
    return text


# quic_vs_tcp columns: times rounded to µs as the other tables, shares and the reduction kept whole
_QVT_MS = ("quic_p50_ms", "quic_p95_ms", "quic_p99_ms", "tcp_p50_ms", "tcp_p95_ms", "tcp_p99_ms", "quic_setup_p50_ms",
           "tcp_setup_p50_ms", "quic_handshake_rtt_p50_ms", "tcp_handshake_rtt_p50_ms")


def _quic_vs_tcp(con, present: dict) -> list[dict]:
    """sql/'s quic_vs_tcp macro (marts/070_quic_vs_tcp.sql) over the slice's flows and complete
    queries, per group."""
    if present["queries"]:
        con.execute("CREATE TEMP TABLE tq AS SELECT s.grp, q.protocol, q.latency_ns, q.setup_ns, q.signatures, q.delays, "
                    "COLUMNS('^budget_.*_ns$') FROM query_facts q JOIN sel s USING (flow_id)")
    else:
        con.execute("CREATE TEMP TABLE tq AS SELECT s.grp, q.protocol, q.latency_ns, q.setup_ns, q.signatures, q.delays, "
                    "COLUMNS('^budget_.*_ns$') FROM query_facts q JOIN sel s USING (flow_id) WHERE false")
    cur = con.execute("SELECT * FROM quic_vs_tcp('tq', 'f') ORDER BY grp")
    names = ["group" if d[0] == "grp" else d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        row = dict(zip(names, r))
        for k in _QVT_MS:
            row[k] = None if row[k] is None else round(row[k], 3)
        out.append(row)
    return out


def fmt_reduction(row: dict) -> str:
    """The QUIC tail reduction of a quic_vs_tcp row as people read it: '21% [9%, 30%]', with
    'small sample' when either transport has fewer queries than the marts' threshold."""
    if row.get("tail_reduction") is None:
        return "-"
    text = f"{row['tail_reduction'] * 100:.0f}%"
    if row.get("tail_reduction_low") is not None:
        text += f" [{row['tail_reduction_low'] * 100:.0f}%, {row['tail_reduction_high'] * 100:.0f}%]"
    return text + (" small sample" if row.get("small_sample") else "")


def compute_stats(dataset: Path | str, slice_: Slice | None = None, by: str | None = None) -> dict[str, list[dict]]:
    """The tables for the flows of ``dataset`` in ``slice_``, per value of ``by`` (a dimension of
    DIMENSIONS) or over all of them (group ``"all"``)."""
    dataset = Path(dataset)
    slice_ = slice_ or Slice()
    if by is not None and by not in DIMENSIONS:
        raise StatsError(f"--by {by!r}: choose one of {', '.join(DIMENSIONS)}")
    if not dataset.is_dir():
        raise StatsError(f"{dataset}: no such dataset directory")
    con, present = _connect(dataset)
    try:
        if not present["flows"]:
            raise StatsError(f"{dataset}: no flows (expected {dataset}/flows/date=*/*.parquet; run tailscope analyze first)")
        columns = _columns(con, "flows")
        _select_flows(con, columns, slice_, by)
        overview = _overview(con, present, columns)
        groups = [r["group"] for r in overview]
        return {
            "overview": overview,
            "network": _network(con, present, groups),
            "budget": _budget(con, present),
            "what_changed": _what_changed(con, present, slice_),
            "attribution": _attribution(con, present),
            "quic_vs_tcp": _quic_vs_tcp(con, present),
        }
    finally:
        con.close()


def slice_values(dataset: Path | str, dims: list[str], limit: int = 20) -> dict[str, list[str]]:
    """The most common values of each dimension in the dataset (to say what a slice could be)."""
    con, present = _connect(Path(dataset))
    try:
        if not present["flows"]:
            return {}
        columns = _columns(con, "flows")
        out = {}
        for dim in dims:
            if dim in ENRICHMENT_DIMENSIONS and DIMENSIONS[dim] not in columns:
                continue
            rows = con.execute(
                f"SELECT {DIMENSIONS[dim]} AS v, count(*) AS n FROM flow_facts GROUP BY v ORDER BY n DESC, v LIMIT {int(limit)}"
            ).fetchall()
            out[dim] = [str(v) for v, _ in rows]
        return out
    finally:
        con.close()


# ----------------------------------------------------------------------------------------------
# Rendering


def _unit(ms: float) -> tuple[str, float]:
    """The unit a duration of ``ms`` milliseconds reads best in: µs under 1 ms (a LAN or loopback
    capture), ms under 1 s, s above; and the factor from ms to it."""
    a = abs(ms)
    if 0 < a < 1:
        return "µs", 1000.0
    if a >= 1000:
        return "s", 0.001
    return "ms", 1.0


def _num(v: float) -> str:
    """A number in a duration's unit, to about three significant digits, never in exponent form."""
    a = abs(v)
    if a == 0:
        return "0"
    if a < 10:
        return f"{v:.2f}" if a < 1 else f"{v:.1f}"
    return f"{v:,.0f}"


def _fmt_ms_series(values: list, unit: str) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    if unit == "count":
        return " / ".join("-" if v is None else f"{v:g}" for v in values) + ""
    name, factor = _unit(max(abs(v) for v in vals) or 0)
    return " / ".join("-" if v is None else _num(v * factor) for v in values) + f" {name}"


def fmt_duration(ms) -> str:
    """A duration given in ms, in the unit it reads best in (µs, ms, s): '850 µs', '12.5 ms', '1.57 s'."""
    if ms is None:
        return "-"
    if ms == 0:
        return "0 ms"
    name, factor = _unit(ms)
    return f"{_num(ms * factor)} {name}"


def fmt_delta(ms) -> str:
    """A signed change of a duration: '+380 ms', '-12.5 ms', '0 ms'."""
    if ms is None:
        return "-"
    return ("+" if ms > 0 else "") + fmt_duration(ms)


def fmt_share(x) -> str:
    if x is None:
        return "-"
    pct = x * 100
    return f"{pct:.1f}%" if pct < 10 and pct != 0 else f"{pct:.0f}%"


def _network_cell(row: dict, with_counts: bool = True) -> str:
    unit = row["unit"]
    if row["p50"] is not None or (row["value"] is None and row["metric"] in ("rtt", "retx_delay", "retx_per_segment")):
        text = _fmt_ms_series([row[f"p{int(p * 100)}"] for p in PERCENTILES], unit)
        return f"{text}  (n={row['n']})" if with_counts and row["n"] else text
    if unit == "share":
        text = fmt_share(row["value"])
        if with_counts and row["denominator"]:
            text += f"  ({row['numerator']} of {row['denominator']})"
        return text
    text = fmt_duration(row["value"])
    return f"{text}  (n={row['n']})" if with_counts and row["n"] and row["value"] is not None else text


def _table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> str:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(headers)]
    def line(cells):
        return "  ".join((str(c).rjust(w) if i in right else str(c).ljust(w)) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return str(c).replace("|", "\\|")
    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def _human(tables: dict, dataset: str, slice_desc: str, by: str | None) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of readable tables, shared by text and Markdown."""
    out = []
    overview = tables["overview"]
    groups = [r["group"] for r in overview]
    keys = [k for k in (overview[0] if overview else {}) if k != "group"]
    title = f"Dataset {dataset} — {slice_desc}" + (f", by {by}" if by else "")
    out.append((title, ["", *groups] if by else ["", "value"], [[k.replace("_", " "), *[str(r[k]) for r in overview]] for k in keys]))

    net = tables["network"]
    labels = []
    for r in net:
        if r["label"] not in labels:
            labels.append(r["label"])
    cells = {(r["group"], r["label"]): r for r in net}
    rows = [[label, *[_network_cell(cells[(g, label)], with_counts=not by) if (g, label) in cells else "-" for g in groups]] for label in labels]
    out.append(("Network metrics (TCP connections; the ride-hailing field study's table)", ["network metric", *(groups if by else ["value"])], rows))

    bud = tables.get("budget", [])
    headers = (["group"] if by else []) + ["level", "latency ≥", "queries", "part", "share of the time", "mean per query",
                                           "percentile without it"]
    rows = []
    for r in bud:
        if not r["time_ms"]:
            continue
        rows.append(([str(r["group"])] if by else []) + [
            r["level"], fmt_duration(r["threshold_ms"]) if r["threshold_ms"] is not None else "-", str(r["queries"]),
            r["part"], fmt_share(r["share"]), fmt_duration(r["mean_ms"]),
            fmt_duration(r["without_ms"]) if r["level"] != "all" else "-"])
    out.append((
        "Where the time went: the time budget of the level's queries (each query's latency split into disjoint parts "
        "that sum to it; share = the part's time ÷ the level's summed latency, the listed parts sum to 100%, parts not "
        "listed took no time; percentile without it = the level's percentile with that part removed from every query)",
        headers, rows))

    wc = tables.get("what_changed", [])
    headers = (["group"] if by else []) + ["level", "week", "value", "before", "change [95% CI]", "tail queries",
                                           "beyond noise", "part that moved most"]
    rows = []
    for r in wc:
        top = next((x for x in r["parts"] if x["part"] == r["top_part"]), None)
        rows.append(([str(r["group"])] if by else []) + [
            r["level"], f"{r['week']} vs {r['previous_week']}", fmt_duration(r["value_ms"]), fmt_duration(r["value_prev_ms"]),
            fmt_change(r), f"{r['tail_queries']} / {r['tail_queries_prev']}",
            "yes" if r["beyond_noise"] else ("no" if r["enough"] else f"small (< {r['min_tail']})"),
            fmt_part_change(top) if r["delta_ms"] is not None else "-"])
    out.append((
        "What changed: the week's percentiles against the week before (95% bootstrap interval of the change; beyond noise = "
        "the interval excludes 0 and both tails hold enough queries; the part of the time budget whose mean time per "
        "tail query moved most in the change's direction)",
        headers, rows))

    att = tables["attribution"]
    headers = (["group"] if by else []) + ["level", "latency ≥", "queries", "signature", "share", "median with", "median without",
                                           "charged delay (overlapping)"]
    rows = []
    for r in att:
        rows.append(
            ([r["group"]] if by else [])
            + [
                r["level"],
                fmt_duration(r["threshold_ms"]),
                str(r["queries"]),
                r["signature"],
                f"{fmt_share(r['share'])} ({r['queries_with']})",
                fmt_duration(r["median_with_ms"]),
                fmt_duration(r["median_without_ms"]),
                fmt_duration(r["charged_delay_ms"]) if r["charged_delay_ms"] is not None else "",
            ]
        )
    out.append(
        (
            (
                "Signatures in the tail (complete queries; a first query's latency includes its connection setup; "
                "level pNN = the queries at or above that percentile; share = of the level's queries carrying it; "
                "charged delay: each retransmission's whole wait, overlapping ones each counted - it can exceed the "
                "latency, the time budget above is what adds up)"
            ),
            headers,
            rows,
        )
    )
    qvt = tables.get("quic_vs_tcp", [])
    headers = (["group"] if by else []) + ["queries QUIC / TCP", "QUIC p50 / p95 / p99", "TCP p50 / p95 / p99",
                                           "QUIC tail reduction [95% CI]", "p99 tail hit by loss QUIC / TCP",
                                           "handshake RTT QUIC / TCP", "QUIC ended on TCP", "sessions mixing both"]
    rows = []
    for r in qvt:
        rows.append(
            ([r["group"]] if by else [])
            + [
                f"{r['quic_queries']} / {r['tcp_queries']}",
                _fmt_ms_series([r["quic_p50_ms"], r["quic_p95_ms"], r["quic_p99_ms"]], "ms"),
                _fmt_ms_series([r["tcp_p50_ms"], r["tcp_p95_ms"], r["tcp_p99_ms"]], "ms"),
                fmt_reduction(r),
                f"{fmt_share(r['quic_tail_loss_rate'])} / {fmt_share(r['tcp_tail_loss_rate'])}",
                f"{fmt_duration(r['quic_handshake_rtt_p50_ms'])} / {fmt_duration(r['tcp_handshake_rtt_p50_ms'])}",
                f"{fmt_share(r['fallback_share'])} ({r['quic_ended_on_tcp']} of {r['quic_attempts']})",
                f"{fmt_share(r['mixed_session_share'])} ({r['mixed_sessions']} of {r['sessions']})",
            ]
        )
    out.append(
        (
            (
                "QUIC vs TCP (complete queries; tail reduction = 1 - p99 QUIC / p99 TCP, 95% bootstrap interval; "
                "p99 tail hit by loss = share of the queries at or above the p99 carrying a loss signature"
                + (f"; small sample: under {qvt[0]['small_sample_below']} queries on either transport)" if qvt else ")")
            ),
            headers,
            rows,
        )
    )
    return out


def render(tables: dict, fmt: str = "text", *, dataset: str = "", slice_desc: str = "all flows", by: str | None = None, only: str | None = None) -> str:
    """The tables as text (aligned, human units), csv (sections '# <table>' then header and rows,
    raw numbers; one table without the section line when ``only`` is given), json or markdown."""
    if fmt not in FORMATS:
        raise StatsError(f"format {fmt!r}: choose one of {', '.join(FORMATS)}")
    names = [only] if only else list(TABLE_NAMES)
    if fmt == "json":
        doc = {"dataset": dataset, "slice": slice_desc, "by": by, "tables": {n: tables[n] for n in names}}
        return json.dumps(doc, indent=2, default=str) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        for i, name in enumerate(names):
            rows = tables[name]
            if not only:
                if i:
                    buf.write("\n")
                buf.write(f"# {name}\n")
            headers = list(rows[0]) if rows else []
            w = csv.writer(buf, lineterminator="\n")
            if headers:
                w.writerow(headers)
                for r in rows:
                    # a list (what_changed's parts) as JSON in its cell
                    w.writerow(["" if r[h] is None else json.dumps(r[h], default=str) if isinstance(r[h], (list, dict)) else r[h]
                                for h in headers])
        return buf.getvalue()
    human = _human(tables, dataset, slice_desc, by)
    index = {name: i for i, name in enumerate(TABLE_NAMES)}
    chosen = [human[index[n]] for n in names]
    if fmt == "markdown":
        return "\n\n".join(f"### {title}\n\n{_md_table(headers, rows)}" for title, headers, rows in chosen) + "\n"
    parts = []
    for title, headers, rows in chosen:
        body = _table(headers, rows) if rows else "(no rows)"
        parts.append(f"{title}\n{body}")
    return "\n\n".join(parts) + "\n"


def parse_csv_sections(text: str) -> dict[str, list[dict]]:
    """Read back ``render(..., 'csv')`` (for tests and scripts)."""
    out: dict[str, list[dict]] = {}
    for block in text.strip("\n").split("\n\n"):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("# "):
            raise ValueError("a CSV section starts with '# <table>'")
        out[lines[0][2:].strip()] = list(csv.DictReader(io.StringIO("\n".join(lines[1:]) + "\n")))
    return out

#!/usr/bin/env python3
"""Write the Grafana dashboards of dashboards/json/ (the source of truth is this script).

    python3 scripts/make-dashboards.py            # rewrite dashboards/json/*.json
    python3 scripts/make-dashboards.py --check    # exit 1 when a file is not what this writes

Every panel queries the DuckDB database built by `tailscope db` through the DuckDB data source
(motherduck-duckdb-datasource, uid DS_UID below) with DuckDB SQL over the views of sql/ (facts and
marts). Conventions the tests (tests/test_dashboards.py) check:
  * template variables: carrier, hexagon, site, network_type (multi-value, "All" = every value)
    and, where used, bucket, signature, flow; the plugin interpolates them as SQL strings
    ('a','b'), so SQL writes `carrier IN ($carrier)`;
  * the time range enters as the backend macro $__timeFilter(column);
  * ids that do not fit a JavaScript number (flow_id) are shown and passed as text;
  * no HUGEINT/unsigned/list columns reach Grafana (the plugin's converters do not take them).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "dashboards" / "json"

DS_UID = "tailscope-duckdb"
DS_TYPE = "motherduck-duckdb-datasource"
DS = {"type": DS_TYPE, "uid": DS_UID}
SCHEMA_VERSION = 39  # Grafana 10.4 / 11.0, the oldest the DuckDB plugin supports; newer Grafana migrates it
TAG = "tailscope"

# The selection every panel honours (query_facts and flow_facts share these column names).
FILTER = (
    "$__timeFilter(start) AND carrier IN ($carrier) AND h3_cell IN ($hexagon) "
    "AND site IN ($site) AND network_type IN ($network_type)"
)
BUCKET = "time_bucket(CAST($bucket AS INTERVAL), start)"


# ----------------------------------------------------------------------------------------------
# building blocks


def var_query(name: str, label: str, sql: str, *, multi: bool = True, include_all: bool = True, refresh: int = 1, description: str = "") -> dict:
    current = {"selected": True, "text": ["All"], "value": ["$__all"]} if include_all else {}
    return {
        "type": "query",
        "name": name,
        "label": label,
        "description": description,
        "datasource": DS,
        "definition": sql,
        "query": sql,
        "refresh": refresh,  # 1: on dashboard load, 2: on time range change
        "multi": multi,
        "includeAll": include_all,
        "current": current,
        "options": [],
        "sort": 1,
        "hide": 0,
        "regex": "",
    }


def var_custom(name: str, label: str, values: list[str], default: str, description: str = "") -> dict:
    return {
        "type": "custom",
        "name": name,
        "label": label,
        "description": description,
        "query": ",".join(values),
        "multi": False,
        "includeAll": False,
        "current": {"selected": True, "text": default, "value": default},
        "options": [{"selected": v == default, "text": v, "value": v} for v in values],
        "hide": 0,
    }


DIMENSION_VARS = [
    var_query("carrier", "Carrier", "SELECT DISTINCT carrier FROM flow_facts ORDER BY 1",
              description="Client's carrier (enrichment); 'unknown' = no prefix or ASN matched"),
    var_query("hexagon", "Hexagon", "SELECT DISTINCT h3_cell FROM flow_facts WHERE carrier IN ($carrier) ORDER BY 1",
              description="H3 cell of the client's session; the list follows the carriers chosen"),
    var_query("site", "Site", "SELECT DISTINCT site FROM flow_facts ORDER BY 1", description="Edge site of the capture"),
    var_query("network_type", "Network type", "SELECT DISTINCT network_type FROM flow_facts ORDER BY 1",
              description="LTE, 5G, 3G, Wi-Fi, ... from the client's session"),
]
BUCKET_VAR = var_custom("bucket", "Time bucket", ["1 hour", "5 minutes", "15 minutes", "1 day", "1 week"], "1 hour",
                        description="Width of the time-series buckets (each point is a percentile over one bucket)")


def target(sql: str, fmt: str = "table", ref: str = "A") -> dict:
    return {"refId": ref, "datasource": DS, "editorMode": "code", "format": fmt, "rawQuery": True, "rawSql": sql.strip()}


class Layout:
    """Assigns panel ids and grid positions row by row (24 columns)."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.next_id = 1
        self.x = 0
        self.y = 0
        self.row_h = 0

    def _place(self, w: int, h: int) -> dict:
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def row(self, title: str) -> None:
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        self.panels.append({"type": "row", "id": self.next_id, "title": title, "collapsed": False,
                            "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []})
        self.next_id += 1
        self.y += 1

    def add(self, panel: dict, w: int, h: int) -> dict:
        panel = {"id": self.next_id, **panel, "gridPos": self._place(w, h)}
        self.next_id += 1
        self.panels.append(panel)
        return panel


def stat(title: str, sql: str, unit: str = "short", description: str = "", decimals: int | None = None) -> dict:
    defaults = {"unit": unit, "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "blue", "value": None}]}}
    if decimals is not None:
        defaults["decimals"] = decimals
    return {
        "type": "stat", "title": title, "description": description, "datasource": DS, "targets": [target(sql)],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "none", "justifyMode": "auto", "textMode": "value_and_name",
                    "orientation": "auto"},
    }


def timeseries(title: str, sql: str, unit: str = "short", description: str = "", fmt: str = "time_series",
               points: bool = False, log: bool = False) -> dict:
    custom = {"drawStyle": "points" if points else "line", "lineWidth": 1, "pointSize": 4 if points else 5,
              "showPoints": "always" if points else "auto", "spanNulls": False, "fillOpacity": 0}
    if log:
        custom["scaleDistribution"] = {"type": "log", "log": 10}
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS, "targets": [target(sql, fmt)],
        "fieldConfig": {"defaults": {"unit": unit, "custom": custom}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def table(title: str, sql: str, description: str = "", units: dict[str, str] | None = None,
          links: dict[str, tuple[str, str]] | None = None, gauges: list[str] = (), sort: tuple[str, bool] | None = None) -> dict:
    """units: column → unit; links: column → (title, url) data link; gauges: share columns drawn as bars."""
    overrides = []
    for col, unit in (units or {}).items():
        overrides.append({"matcher": {"id": "byName", "options": col}, "properties": [{"id": "unit", "value": unit}]})
    for col in gauges:
        overrides.append({"matcher": {"id": "byName", "options": col}, "properties": [
            {"id": "custom.cellOptions", "value": {"type": "gauge", "mode": "basic"}},
            {"id": "min", "value": 0}, {"id": "max", "value": 1}]})
    for col, (text, url) in (links or {}).items():
        overrides.append({"matcher": {"id": "byName", "options": col}, "properties": [
            {"id": "links", "value": [{"title": text, "url": url}]}]})
    options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False, "reducer": ["sum"], "fields": ""}}
    if sort:
        options["sortBy"] = [{"displayName": sort[0], "desc": sort[1]}]
    return {
        "type": "table", "title": title, "description": description, "datasource": DS, "targets": [target(sql)],
        "fieldConfig": {"defaults": {"custom": {"align": "auto", "filterable": True}}, "overrides": overrides},
        "options": options,
    }


def barchart(title: str, sql: str, x: str, unit: str = "ms", description: str = "") -> dict:
    return {
        "type": "barchart", "title": title, "description": description, "datasource": DS, "targets": [target(sql)],
        "fieldConfig": {"defaults": {"unit": unit, "color": {"mode": "palette-classic"}}, "overrides": []},
        "options": {"xField": x, "orientation": "horizontal", "showValue": "auto", "barWidth": 0.8,
                    "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                    "tooltip": {"mode": "single"}},
    }


def geomap(title: str, sql: str, lat: str, lng: str, color: str, size: str, description: str = "") -> dict:
    return {
        "type": "geomap", "title": title, "description": description, "datasource": DS, "targets": [target(sql)],
        "fieldConfig": {"defaults": {"unit": "ms", "color": {"mode": "continuous-GrYlRd"},
                                     "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]}},
                        "overrides": []},
        "options": {
            "view": {"id": "fit", "lat": 0, "lon": 0, "zoom": 11, "allLayers": True},
            "controls": {"showZoom": True, "mouseWheelZoom": True, "showAttribution": True},
            "basemap": {"type": "default", "name": "Basemap", "config": {}},
            "layers": [{
                "type": "markers", "name": "p99 by hexagon (cell centers)", "tooltip": True,
                "location": {"mode": "coords", "latitude": lat, "longitude": lng},
                "config": {
                    "showLegend": True,
                    "style": {
                        "color": {"field": color, "fixed": "dark-green"},
                        "size": {"field": size, "fixed": 10, "min": 8, "max": 40},
                        "opacity": 0.6,
                        "symbol": {"mode": "fixed", "fixed": "img/icons/marker/circle.svg"},
                        "rotation": {"fixed": 0, "mode": "mod", "min": -360, "max": 360},
                        "symbolAlign": {"horizontal": "center", "vertical": "center"},
                    },
                },
            }],
            "tooltip": {"mode": "details"},
        },
    }


def dashboard(uid: str, title: str, description: str, variables: list[dict], layout: Layout) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": [TAG],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "",
        "time": {"from": "now-7d", "to": "now"},
        "timepicker": {},
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True, "hide": True,
            "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard"}]},
        "links": [{"type": "dashboards", "tags": [TAG], "asDropdown": True, "title": "tailscope",
                   "includeVars": True, "keepTime": True, "icon": "external link", "targetBlank": False, "tooltip": "", "url": ""}],
        "templating": {"list": variables},
        "panels": layout.panels,
    }


# ----------------------------------------------------------------------------------------------
# shared SQL


def attribution_input(group: str | None) -> str:
    """The selection's complete queries as sql/'s tail_attribution macro takes them (grp = the group)."""
    grp = group or "'all'"
    return f"SELECT {grp} AS grp, latency_ns, setup_ns, signatures, delays FROM query_facts WHERE {FILTER}"


def tail_attribution_sql(group: str | None) -> str:
    """Per (group,) signature: the share of the selection's p99 tail carrying it and the overlapping
    delay it is charged there (secondary: it can exceed the latency) — sql/'s tail_attribution macro
    at level 0.99, as `tailscope stats` (table attribution) level p99."""
    key = f"grp AS {group}, " if group else ""
    order = f"{group}, " if group else ""
    return f"""
WITH q AS ({attribution_input(group)})
SELECT {key}signature,
       tail_queries,
       queries_with                                       AS tail_with,
       queries_with / tail_queries                        AS tail_rate,
       CAST(delay_ns AS DOUBLE) / 1e6                     AS charged_delay_ms
FROM tail_attribution('q', 0.99)
ORDER BY {order}tail_rate DESC, charged_delay_ms DESC NULLS LAST
"""


def budget_input(group: str | None) -> str:
    """The selection's complete queries as sql/'s time-budget macros (tail_budget, budget_what_if)
    take them: grp (the group), latency_ns and the budget_*_ns columns."""
    grp = group or "'all'"
    # (no '$' in the pattern: Grafana would take it for a variable)
    return f"SELECT {grp} AS grp, latency_ns, COLUMNS('^budget_[a-z_]+_ns') FROM query_facts WHERE {FILTER}"


def tail_budget_sql(group: str | None) -> str:
    """Per (group,) part of the time budget: its share of the selection's p99 tail's time (<= 100 %,
    the parts summing to 100 %), its mean time per tail query, and what if: the p99 without it -
    sql/'s tail_budget and budget_what_if at level 0.99, as `tailscope stats` (table budget, p99)."""
    key = f"b.grp AS {group}, " if group else ""
    order = f"b.grp, " if group else ""
    return f"""
WITH q AS ({budget_input(group)}),
b AS (SELECT * FROM tail_budget('q', 0.99)),
w AS (SELECT * FROM budget_what_if('q', 0.99))
SELECT {key}b.label AS part,
       b.tail_queries,
       b.share                                            AS tail_share,
       b.mean_ns / 1e6                                    AS mean_per_tail_query_ms,
       b.threshold_ns / 1e6                               AS p99_ms,
       w.without_ns / 1e6                                 AS p99_without_it_ms
FROM b JOIN w USING (grp, part)
WHERE b.part_ns > 0
ORDER BY {order}b.share DESC
"""


def summary_sql(group: str, extra: str = "", extra_group: str = "") -> str:
    """Per group: flows, queries, latency percentiles, lossy share, signature rate and the part of
    the time budget that took the most of the group's p99 tail's time."""
    return f"""
WITH q AS (SELECT * FROM query_facts WHERE {FILTER}),
c AS (
    SELECT {group}{extra_group},
           count(*)                                             AS queries,
           quantile_disc(latency_ns, 0.5) / 1e6                 AS p50_ms,
           quantile_disc(latency_ns, 0.95) / 1e6                AS p95_ms,
           quantile_disc(latency_ns, 0.99)                      AS p99_ns,
           count(*) FILTER (WHERE len(signatures) > 0) / count(*) AS signature_rate
    FROM q GROUP BY ALL
),
f AS (
    SELECT {group},
           count(*)                                             AS flows,
           count(*) FILTER (WHERE protocol = 'tcp' AND lossy)
             / nullif(count(*) FILTER (WHERE protocol = 'tcp'), 0) AS lossy_share
    FROM flow_facts WHERE {FILTER} GROUP BY ALL
),
tq AS ({budget_input(group)}),
top AS (
    SELECT grp AS {group}, arg_max(label, share) AS top_tail_part, max(share) AS top_tail_part_share
    FROM tail_budget('tq', 0.99) GROUP BY ALL
)
SELECT c.{group}{extra}, f.flows, c.queries, c.p50_ms, c.p95_ms, c.p99_ns / 1e6 AS p99_ms,
       f.lossy_share, c.signature_rate, top.top_tail_part, top.top_tail_part_share
FROM c LEFT JOIN f USING ({group}) LEFT JOIN top USING ({group})
ORDER BY p99_ms DESC
"""


def quic_vs_tcp_sql(group: str | None, columns: str) -> str:
    """QUIC vs TCP per group of the selection: sql/'s quic_vs_tcp macro (marts/070_quic_vs_tcp.sql),
    the same figures as `tailscope stats --table quic_vs_tcp` and the report."""
    grp = group or "'all'"
    key = f"grp AS {group}, " if group else ""
    order = "quic_queries + tcp_queries DESC" if group else "1"
    return f"""
WITH qq AS (SELECT {grp} AS grp, protocol, latency_ns, setup_ns, signatures, delays, COLUMNS('^budget_[a-z_]+_ns')
           FROM query_facts WHERE {FILTER}),
qf AS (SELECT {grp} AS grp, flow_id, protocol, handshake_rtt_ms, quic_handshake_rtt_ms FROM flow_facts WHERE {FILTER})
SELECT {key}{columns}
FROM quic_vs_tcp('qq', 'qf')
ORDER BY {order}
"""


QVT_COLUMNS = """quic_queries, tcp_queries, quic_p50_ms, tcp_p50_ms, quic_p99_ms, tcp_p99_ms,
       tail_reduction, tail_reduction_low, tail_reduction_high,
       CASE WHEN small_sample THEN 'small sample' ELSE '' END AS sample,
       quic_tail_loss_rate, tcp_tail_loss_rate, quic_handshake_rtt_p50_ms, tcp_handshake_rtt_p50_ms,
       fallback_share, quic_attempts, mixed_session_share, sessions"""
QVT_UNITS = {"quic_p50_ms": "ms", "tcp_p50_ms": "ms", "quic_p99_ms": "ms", "tcp_p99_ms": "ms",
             "tail_reduction": "percentunit", "tail_reduction_low": "percentunit", "tail_reduction_high": "percentunit",
             "quic_tail_loss_rate": "percentunit", "tcp_tail_loss_rate": "percentunit",
             "quic_handshake_rtt_p50_ms": "ms", "tcp_handshake_rtt_p50_ms": "ms",
             "fallback_share": "percentunit", "mixed_session_share": "percentunit"}


def qvt_setting(name: str) -> int:
    """A setting of the QUIC vs TCP comparison, as sql/marts/070_quic_vs_tcp.sql defines it (its one place)."""
    sql = (ROOT / "sql" / "marts" / "070_quic_vs_tcp.sql").read_text()
    m = re.search(rf"CREATE OR REPLACE MACRO {name}\(\) AS (\d+);", sql)
    if m is None:
        raise SystemExit(f"sql/marts/070_quic_vs_tcp.sql: no macro {name}() AS <number>")
    return int(m.group(1))


QVT_DESCRIPTION = ("QUIC tail reduction = 1 - p99(QUIC) / p99(TCP) over complete queries, with its 95 % bootstrap "
                   f"interval ({qvt_setting('bootstrap_resamples'):,} seeded resamples; sql/marts/070_quic_vs_tcp.sql). "
                   f"'small sample': fewer than {qvt_setting('quic_vs_tcp_min_queries')} "
                   "queries on either transport, the p99 rests on a handful of queries. tail_loss_rate: the share of the "
                   "queries at or above the p99 carrying a loss signature. fallback_share: QUIC attempts whose session ended on TCP; "
                   "mixed_session_share: client sessions that used both.")


SUMMARY_UNITS = {"p50_ms": "ms", "p95_ms": "ms", "p99_ms": "ms", "top_tail_part_share": "percentunit",
                 "lossy_share": "percentunit", "signature_rate": "percentunit"}
TAIL_UNITS = {"tail_rate": "percentunit", "charged_delay_ms": "ms"}
BUDGET_UNITS = {"tail_share": "percentunit", "mean_per_tail_query_ms": "ms", "p99_ms": "ms", "p99_without_it_ms": "ms"}
BUDGET_DESCRIPTION = ("Queries at or above the selection's p99: each query's latency is split into disjoint parts that add up "
                      "to it (the time budget, docs/queries.md), so tail_share is the part's share of the tail's summed "
                      "latency (<= 100 %, the parts sum to 100 %); mean per tail query; p99 without it = the p99 recomputed "
                      "with that part removed from every query (what removing the cause would give).")
PCT_UNITS = {"p50_ms": "ms", "p99_ms": "ms"}
FLOW_LINK = ("Flow drill-down: packet timeline",
             "/d/tailscope-flow/tailscope-flow-drill-down?var-flow=${__value.raw}&${__url_time_range}")
HEXAGON_LINK = ("This hexagon",
                "/d/tailscope-hexagon/tailscope-hexagons?var-hexagon=${__value.raw}&${carrier:queryparam}&${__url_time_range}")
CARRIER_LINK = ("This carrier", "/d/tailscope-carrier/tailscope-carriers?var-carrier=${__value.raw}&${__url_time_range}")


# ----------------------------------------------------------------------------------------------
# the dashboards


def overview() -> dict:
    L = Layout()
    L.row("Selection")
    L.add(stat("Complete queries", f"SELECT count(*) AS queries FROM query_facts WHERE {FILTER}",
               description="Request/response exchanges with a fully acknowledged response (docs/queries.md)"), 4, 4)
    L.add(stat("Connections", f"""
SELECT count(*) AS flows, count(*) FILTER (WHERE protocol = 'tcp') AS tcp, count(*) FILTER (WHERE protocol = 'quic') AS quic
FROM flow_facts WHERE {FILTER}"""), 5, 4)
    L.add(stat("Query latency p50 / p95 / p99", f"""
SELECT quantile_disc(latency_ms, 0.5) AS p50, quantile_disc(latency_ms, 0.95) AS p95, quantile_disc(latency_ms, 0.99) AS p99
FROM query_facts WHERE {FILTER}""", unit="ms",
               description="Nearest-rank percentiles; a first query's latency includes its connection setup (docs/stats.md)"), 7, 4)
    L.add(stat("Lossy TCP connections", f"""
SELECT count(*) FILTER (WHERE lossy) / nullif(count(*), 0) AS lossy_share
FROM flow_facts WHERE {FILTER} AND protocol = 'tcp'""", unit="percentunit", decimals=1,
               description="TCP connections with at least one retransmission of any kind"), 4, 4)
    L.add(stat("Queries hit by a signature", f"""
SELECT count(*) FILTER (WHERE len(signatures) > 0) / nullif(count(*), 0) AS signature_rate
FROM query_facts WHERE {FILTER}""", unit="percentunit", decimals=1), 4, 4)
    L.row("Latency over time")
    L.add(timeseries("Query latency percentiles", f"""
SELECT {BUCKET} AS time,
       quantile_disc(latency_ms, 0.5) AS p50, quantile_disc(latency_ms, 0.95) AS p95, quantile_disc(latency_ms, 0.99) AS p99
FROM query_facts WHERE {FILTER}
GROUP BY 1 ORDER BY 1""", unit="ms", log=True, description="Per $bucket bucket"), 16, 8)
    L.add(timeseries("Queries and lossy connections", f"""
SELECT {BUCKET} AS time, count(*) AS queries,
       count(*) FILTER (WHERE len(signatures) > 0) AS queries_with_signature
FROM query_facts WHERE {FILTER}
GROUP BY 1 ORDER BY 1""", description="Complete queries per bucket, and those a signature struck"), 8, 8)
    L.row("Where and why")
    L.add(barchart("p99 latency by carrier", f"""
SELECT carrier, quantile_disc(latency_ms, 0.99) AS p99_ms, quantile_disc(latency_ms, 0.5) AS p50_ms
FROM query_facts WHERE {FILTER}
GROUP BY carrier ORDER BY p99_ms DESC""", x="carrier"), 10, 9)
    L.add(table("Where the p99 tail's time went", tail_budget_sql(None), description=BUDGET_DESCRIPTION,
                units=BUDGET_UNITS, gauges=["tail_share"]), 14, 9)
    L.add(table("Signatures in the p99 tail", tail_attribution_sql(None),
                description="Queries at or above the selection's p99: the share carrying each signature, and the delay "
                            "charged to it (secondary: each retransmission's whole wait, overlapping ones each counted, so "
                            "it can exceed the latency; the time budget beside is what adds up). '(connection setup)' = "
                            "the handshake first queries waited for; '(none)' = no transport signature.",
                units=TAIL_UNITS, gauges=["tail_rate"]), 24, 8)
    L.add(table("Sites", summary_sql("site"), units=SUMMARY_UNITS, gauges=["lossy_share"]), 12, 7)
    L.add(table("Network types", summary_sql("network_type"), units=SUMMARY_UNITS, gauges=["lossy_share"]), 12, 7)
    L.add(table("Enrichment coverage", f"""
SELECT count(*) AS flows,
       count(*) FILTER (WHERE carrier = 'unknown') AS carrier_unknown,
       count(*) FILTER (WHERE h3_cell = 'unknown') AS hexagon_unknown,
       count(*) FILTER (WHERE network_type = 'unknown') AS network_type_unknown,
       count(*) FILTER (WHERE region = 'unknown') AS region_unknown,
       count(*) FILTER (WHERE site = 'unknown') AS site_unknown
FROM flow_facts WHERE {FILTER}""", description="Flows whose enrichment is unknown are kept and counted, never dropped (docs/enrichment.md)"), 24, 4)
    return dashboard("tailscope-overview", "tailscope: overview",
                     "Query latency, loss and the signatures behind the tail, for the selected carriers, hexagons, sites and network types",
                     [*DIMENSION_VARS, BUCKET_VAR], L)


def carriers() -> dict:
    L = Layout()
    L.row("Carriers over time")
    L.add(timeseries("p99 query latency by carrier", f"""
SELECT {BUCKET} AS time, carrier, quantile_disc(latency_ms, 0.99) AS p99
FROM query_facts WHERE {FILTER}
GROUP BY 1, 2 ORDER BY 1""", unit="ms", log=True), 12, 8)
    L.add(timeseries("Lossy TCP connections by carrier", f"""
SELECT {BUCKET} AS time, carrier, count(*) FILTER (WHERE lossy) / count(*) AS lossy_share
FROM flow_facts WHERE {FILTER} AND protocol = 'tcp'
GROUP BY 1, 2 ORDER BY 1""", unit="percentunit"), 12, 8)
    L.row("Carriers")
    L.add(table("Carriers", summary_sql("carrier"), units=SUMMARY_UNITS, gauges=["lossy_share", "signature_rate"],
                links={"carrier": CARRIER_LINK},
                description="top_tail_part: the part of the time budget that took the most of the carrier's p99 tail's time"), 24, 7)
    L.add(table("Where each carrier's p99 tail's time went", tail_budget_sql("carrier"), units=BUDGET_UNITS,
                gauges=["tail_share"], description=BUDGET_DESCRIPTION), 12, 9)
    L.add(table("Network types per carrier", f"""
SELECT carrier, network_type, count(*) AS queries,
       quantile_disc(latency_ms, 0.5) AS p50_ms, quantile_disc(latency_ms, 0.99) AS p99_ms
FROM query_facts WHERE {FILTER}
GROUP BY ALL ORDER BY carrier, p99_ms DESC""", units=PCT_UNITS), 12, 9)
    L.add(table("Signatures in each carrier's p99 tail", tail_attribution_sql("carrier"), units=TAIL_UNITS, gauges=["tail_rate"],
                description="The share of each carrier's p99 tail carrying each signature, and the delay charged to it "
                            "(secondary: overlapping retransmissions each charged their whole wait, so it can exceed the "
                            "latency; the time budget above is what adds up)"), 24, 8)
    L.add(table("Worst hexagons on these carriers", f"""
SELECT carrier, h3_cell, region, count(*) AS queries,
       quantile_disc(latency_ms, 0.5) AS p50_ms, quantile_disc(latency_ms, 0.99) AS p99_ms
FROM query_facts WHERE {FILTER} AND h3_cell <> 'unknown'
GROUP BY ALL ORDER BY p99_ms DESC LIMIT 50""", units=PCT_UNITS, links={"h3_cell": HEXAGON_LINK}), 24, 8)
    return dashboard("tailscope-carrier", "tailscope: carriers",
                     "Per carrier: latency percentiles, loss, the signatures of its p99 tail, its network types and worst hexagons",
                     [*DIMENSION_VARS, BUCKET_VAR], L)


def hexagons() -> dict:
    L = Layout()
    L.row("Map")
    L.add(geomap("p99 query latency by hexagon", f"""
SELECT h3_cell, region, any_value(h3_lat) AS latitude, any_value(h3_lng) AS longitude,
       count(*) AS queries, quantile_disc(latency_ms, 0.99) AS p99_ms
FROM query_facts WHERE {FILTER} AND h3_cell <> 'unknown' AND h3_lat IS NOT NULL
GROUP BY h3_cell, region""", lat="latitude", lng="longitude", color="p99_ms", size="queries",
                 description="One marker per H3 cell at its center: color = p99 latency, size = queries. "
                             "Cell outlines: see dashboards/README.md (GeoJSON layer)."), 14, 12)
    L.add(table("Hexagons", summary_sql("h3_cell", extra=", c.region", extra_group=", any_value(region) AS region"),
                units=SUMMARY_UNITS, gauges=["lossy_share"], links={"h3_cell": HEXAGON_LINK}), 10, 12)
    L.row("Where the p99's time went")
    L.add(table("Where each hexagon's p99 tail's time went", tail_budget_sql("h3_cell"), units=BUDGET_UNITS,
                gauges=["tail_share"], description=BUDGET_DESCRIPTION), 14, 10)
    L.add(timeseries("p99 query latency by hexagon", f"""
SELECT {BUCKET} AS time, h3_cell, quantile_disc(latency_ms, 0.99) AS p99
FROM query_facts WHERE {FILTER}
GROUP BY 1, 2 ORDER BY 1""", unit="ms", log=True), 10, 10)
    L.add(table("Hexagon outlines (GeoJSON)", f"""
SELECT DISTINCT h3_cell, h3_res, region, h3_lat, h3_lng, h3_boundary_geojson
FROM flow_facts WHERE {FILTER} AND h3_boundary_geojson IS NOT NULL
ORDER BY h3_cell""", description="The cells' outlines as GeoJSON Polygons ([lng, lat]), for other map tools"), 24, 6)
    return dashboard("tailscope-hexagon", "tailscope: hexagons",
                     "Per H3 hexagon: a map of p99 latency, and which signature explains each hexagon's p99",
                     [*DIMENSION_VARS, BUCKET_VAR], L)


def signatures() -> dict:
    sig_var = var_query("signature", "Signature",
                        "SELECT DISTINCT signature FROM query_signatures ORDER BY 1",
                        multi=False, include_all=False,
                        description="A signature charged to queries (docs/signatures.md), or '(connection setup)'")
    L = Layout()
    has = "(SELECT flow_id, query_index, delay_ns FROM query_signatures WHERE signature = $signature)"
    L.row("$signature over time")
    L.add(timeseries("Share of queries carrying $signature", f"""
SELECT {BUCKET} AS time, count(s.flow_id) / count(*) AS rate
FROM query_facts q LEFT JOIN {has} s USING (flow_id, query_index)
WHERE {FILTER}
GROUP BY 1 ORDER BY 1""", unit="percentunit"), 12, 8)
    L.add(timeseries("Delay charged to $signature (overlapping)", f"""
SELECT {BUCKET} AS time, CAST(sum(s.delay_ns) AS DOUBLE) / 1e6 AS charged_delay_ms
FROM query_facts q JOIN {has} s USING (flow_id, query_index)
WHERE {FILTER}
GROUP BY 1 ORDER BY 1""", unit="ms"), 12, 8)
    for dim, title, w in (("carrier", "by carrier", 12), ("h3_cell", "by hexagon", 12)):
        L.add(table(f"$signature {title}", f"""
WITH q AS ({attribution_input(dim)}),
every AS (SELECT * FROM tail_attribution('q', 0)),
p99 AS (SELECT * FROM tail_attribution('q', 0.99)),
groups AS (SELECT DISTINCT grp, tail_queries AS queries FROM every),
tails AS (SELECT DISTINCT grp, tail_queries FROM p99)
SELECT g.grp AS {dim}, g.queries,
       coalesce(a.queries_with, 0) / g.queries AS rate,
       coalesce(t.queries_with, 0) / tails.tail_queries AS tail_rate,
       CAST(a.delay_ns AS DOUBLE) / 1e6 AS delay_ms,
       a.median_with_ns / 1e6 AS median_with_ms,
       a.median_without_ns / 1e6 AS median_without_ms
FROM groups g JOIN tails USING (grp)
LEFT JOIN every a ON a.grp = g.grp AND a.signature = $signature
LEFT JOIN p99 t ON t.grp = g.grp AND t.signature = $signature
ORDER BY delay_ms DESC NULLS LAST, rate DESC""",
                    units={"rate": "percentunit", "tail_rate": "percentunit", "delay_ms": "ms", "median_with_ms": "ms", "median_without_ms": "ms"},
                    gauges=["rate", "tail_rate"]), w, 8)
    L.row("Events and connections")
    L.add(table("Signature events in the selection (events table)", """
SELECT e.signature, coalesce(e.cause, '') AS cause, e.direction, count(*) AS events,
       CAST(sum(e.delay_ns) AS DOUBLE) / 1e6 AS delay_ms
FROM events e JOIN flow_facts f USING (flow_id)
WHERE $__timeFilter(e.ts) AND f.carrier IN ($carrier) AND f.h3_cell IN ($hexagon)
  AND f.site IN ($site) AND f.network_type IN ($network_type)
GROUP BY ALL ORDER BY events DESC""", units={"delay_ms": "ms"},
                description="Every occurrence the events table records (retransmissions by cause, out-of-order, lost segments, ...)"), 10, 9)
    L.add(table("Connections where $signature cost the most", f"""
SELECT CAST(q.flow_id AS VARCHAR) AS flow_id, any_value(q.community_id) AS community_id, any_value(q.carrier) AS carrier,
       any_value(q.h3_cell) AS h3_cell, any_value(q.site) AS site, count(*) AS queries_with,
       CAST(sum(s.delay_ns) AS DOUBLE) / 1e6 AS delay_ms, max(q.latency_ms) AS worst_latency_ms
FROM query_facts q JOIN {has} s USING (flow_id, query_index)
WHERE {FILTER}
GROUP BY q.flow_id ORDER BY delay_ms DESC, worst_latency_ms DESC LIMIT 100""",
                units={"delay_ms": "ms", "worst_latency_ms": "ms"}, links={"flow_id": FLOW_LINK}), 14, 9)
    return dashboard("tailscope-signature", "tailscope: signature drill-down",
                     "One signature: how often it strikes, the delay it costs, where, and the connections it hurt most",
                     [*DIMENSION_VARS, BUCKET_VAR, sig_var], L)


def flow() -> dict:
    flow_var = var_query(
        "flow", "Connection",
        """WITH w AS (SELECT flow_id, max(latency_ms) AS worst_ms FROM query_facts GROUP BY flow_id)
SELECT CAST(f.flow_id AS VARCHAR) AS __value,
       CAST(f.flow_id AS VARCHAR) || '  ' || f.client_prefix || ' > ' || f.server_ip || ':' || f.server_port
         || '  ' || f.carrier || '  worst ' || CAST(CAST(round(coalesce(w.worst_ms, 0)) AS BIGINT) AS VARCHAR) || ' ms' AS __text
FROM flow_facts f LEFT JOIN w USING (flow_id)
WHERE $__timeFilter(f.start) AND f.carrier IN ($carrier) AND f.h3_cell IN ($hexagon)
  AND f.site IN ($site) AND f.network_type IN ($network_type)
ORDER BY w.worst_ms DESC NULLS LAST, f.start LIMIT 500""",
        multi=False, include_all=False, refresh=2,
        description="Connections in the time range, slowest query first (flow_id; the list follows the filters)")
    fid = "flow_id = CAST($flow AS BIGINT)"
    L = Layout()
    L.row("Connection")
    L.add(table("Connection", f"""
SELECT CAST(flow_id AS VARCHAR) AS flow_id, community_id, protocol,
       client_prefix AS client_network, server_ip || ':' || server_port AS server,
       start, "end", duration_ms, end_reason, carrier, network_type, h3_cell, region, site,
       handshake_rtt_ms, rtt_p50_ms, rtt_p95_ms, retransmissions, array_to_string(signatures, ', ') AS signatures, first_file
FROM flow_facts WHERE {fid}""",
                units={"duration_ms": "ms", "handshake_rtt_ms": "ms", "rtt_p50_ms": "ms", "rtt_p95_ms": "ms"}), 24, 4)
    L.row("Packet timeline")
    L.add(timeseries("Time-sequence graph (relative sequence numbers)", f"""
SELECT ts AS time,
       CASE WHEN direction = 's2c' AND payload_len > 0 AND retx_cause IS NULL THEN CAST(rel_seq AS BIGINT) + payload_len END AS server_data,
       CASE WHEN direction = 's2c' AND retx_cause IS NOT NULL THEN CAST(rel_seq AS BIGINT) + payload_len END AS server_retransmission,
       CASE WHEN direction = 'c2s' AND (flags & 16) <> 0 THEN CAST(rel_ack AS BIGINT) END AS client_ack,
       CASE WHEN direction = 'c2s' AND payload_len > 0 AND retx_cause IS NULL THEN CAST(rel_seq AS BIGINT) + payload_len END AS client_data,
       CASE WHEN direction = 'c2s' AND retx_cause IS NOT NULL THEN CAST(rel_seq AS BIGINT) + payload_len END AS client_retransmission
FROM packets WHERE {fid}
ORDER BY ts""", unit="decbytes", fmt="table", points=True,
                     description="tcptrace-style: each data segment at its end sequence number, the client's ACKs, and "
                                 "retransmissions apart. The connection's own time, whatever the dashboard's range."), 16, 10)
    L.add(timeseries("RTT samples and receive windows", f"""
SELECT ts AS time,
       CASE WHEN rtt_ns IS NOT NULL THEN rtt_ns / 1e6 END AS rtt_ms,
       CASE WHEN direction = 'c2s' THEN CAST("window" AS BIGINT) END AS client_window_bytes
FROM packets WHERE {fid}
ORDER BY ts""", unit="ms", fmt="table", points=True,
                     description="RTT samples towards the client (Karn's rule, TS echo); the client's advertised window"), 8, 10)
    L.row("Queries and events")
    L.add(table("Queries of this connection", f"""
SELECT query_index, start, latency_ms, ttfb_ns / 1e6 AS ttfb_ms, setup_ns / 1e6 AS setup_ms,
       request_bytes, response_bytes, retransmissions, array_to_string(signatures, ', ') AS signatures,
       array_to_string([d.signature || ' ' || CAST(round(d.delay_ns / 1e6, 1) AS VARCHAR) || ' ms' FOR d IN delays], ', ') AS delays
FROM query_facts WHERE {fid}
ORDER BY query_index""", units={"latency_ms": "ms", "ttfb_ms": "ms", "setup_ms": "ms"}), 24, 7)
    L.add(table("Signature events", f"""
SELECT ts, CAST(frame AS BIGINT) AS frame, direction, signature, coalesce(cause, '') AS cause,
       delay_ns / 1e6 AS delay_ms, CAST(seq AS BIGINT) AS seq, CAST("len" AS BIGINT) AS len, file
FROM events WHERE {fid}
ORDER BY ts, frame""", units={"delay_ms": "ms"}), 24, 7)
    L.add(table("Packets", f"""
SELECT ts, CAST(frame AS BIGINT) AS frame, direction, CAST(rel_seq AS BIGINT) AS rel_seq, CAST(rel_ack AS BIGINT) AS rel_ack,
       CAST(payload_len AS BIGINT) AS payload_len,
       concat_ws('', CASE WHEN (flags & 2) <> 0 THEN 'S' END, CASE WHEN (flags & 16) <> 0 THEN 'A' END,
                 CASE WHEN (flags & 8) <> 0 THEN 'P' END, CASE WHEN (flags & 1) <> 0 THEN 'F' END,
                 CASE WHEN (flags & 4) <> 0 THEN 'R' END) AS flags,
       CAST("window" AS BIGINT) AS window, array_to_string(tag_names, ', ') AS tags, coalesce(retx_cause, '') AS retx_cause,
       retx_delay_ns / 1e6 AS retx_delay_ms, rtt_ns / 1e6 AS rtt_ms, file
FROM packets WHERE {fid}
ORDER BY ts, frame LIMIT 10000""", units={"retx_delay_ms": "ms", "rtt_ms": "ms"}), 24, 12)
    return dashboard("tailscope-flow", "tailscope: flow drill-down",
                     "One connection: its packets as a time-sequence graph, RTT samples, queries and signature events",
                     [*DIMENSION_VARS, flow_var], L)


def transports() -> dict:
    L = Layout()
    L.row("QUIC vs TCP in the selection")
    # the figure with its sample sizes beside it, so a small selection says it is small
    reduction = stat("QUIC tail reduction [95% interval] and sample sizes", quic_vs_tcp_sql(
        None, "tail_reduction, tail_reduction_low, tail_reduction_high, quic_queries, tcp_queries"),
        unit="percentunit", decimals=0, description=QVT_DESCRIPTION)
    reduction["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": c}, "properties": [{"id": "unit", "value": "short"}]}
        for c in ("quic_queries", "tcp_queries")]
    L.add(reduction, 13, 4)
    L.add(stat("p99 query latency: QUIC / TCP", quic_vs_tcp_sql(None, "quic_p99_ms, tcp_p99_ms"), unit="ms"), 5, 4)
    fallback = stat("QUIC attempts ended on TCP / sessions mixing both", quic_vs_tcp_sql(
        None, "fallback_share, quic_attempts, mixed_session_share, sessions"), unit="percentunit", decimals=1,
        description="QUIC attempts whose session got its answer over TCP (quic_fallback); client sessions (a "
                    "client's connections to one server address, 30 s apart at most) that used both transports")
    fallback["fieldConfig"]["overrides"] = [
        {"matcher": {"id": "byName", "options": c}, "properties": [{"id": "unit", "value": "short"}, {"id": "decimals", "value": 0}]}
        for c in ("quic_attempts", "sessions")]
    L.add(fallback, 6, 4)
    L.add(timeseries("p99 query latency by transport", f"""
SELECT {BUCKET} AS time, protocol, quantile_disc(latency_ms, 0.99) AS p99
FROM query_facts WHERE {FILTER} AND protocol IN ('quic', 'tcp')
GROUP BY 1, 2 ORDER BY 1""", unit="ms", log=True, description="Per $bucket bucket, QUIC and TCP queries apart"), 24, 8)
    for group, title in (("carrier", "carrier"), ("h3_cell", "hexagon"), ("network_type", "network type")):
        L.row(f"Per {title}")
        links = {"carrier": CARRIER_LINK} if group == "carrier" else {"h3_cell": HEXAGON_LINK} if group == "h3_cell" else {}
        L.add(table(f"QUIC vs TCP by {title}", quic_vs_tcp_sql(group, QVT_COLUMNS), description=QVT_DESCRIPTION,
                    units=QVT_UNITS, links=links), 24, 8)
    return dashboard("tailscope-transport", "tailscope: QUIC vs TCP",
                     "QUIC and TCP side by side per carrier, hexagon and network type: latency percentiles, the QUIC tail "
                     "reduction with its bootstrap interval and sample sizes, loss in the tail, fallback and mixed sessions",
                     [*DIMENSION_VARS, BUCKET_VAR], L)


WEEK_VAR = var_query("week", "Week", "SELECT DISTINCT week FROM flow_facts ORDER BY 1 DESC", multi=False, include_all=False,
                     description="ISO week compared with the one before (default: the latest)")
CHANGE_COLUMNS = """slice, carrier, region, h3_cell, level, queries, queries_prev, value_prev_ms, value_ms, delta_ms,
       delta_low_ms, delta_high_ms, tail_queries, tail_queries_prev,
       CASE WHEN beyond_noise THEN 'beyond noise' WHEN enough THEN 'within noise' ELSE 'too few queries' END AS verdict,
       top_part_label AS part_that_moved_most, top_part_delta_ms AS part_delta_per_tail_query_ms,
       CASE WHEN top_part_new THEN 'new this week' ELSE '' END AS part_is_new, top_part_added_ms AS part_added_ms"""
# the selection: a slice that does not use a dimension ('*') is kept whatever is chosen there
CHANGE_FILTER = "(carrier = '*' OR carrier IN ($carrier)) AND (h3_cell = '*' OR h3_cell IN ($hexagon))"
CHANGE_UNITS = {c: "ms" for c in ("value_prev_ms", "value_ms", "delta_ms", "delta_low_ms", "delta_high_ms",
                                  "part_delta_per_tail_query_ms", "part_added_ms")}
CHANGE_DESCRIPTION = ("The week's p50/p95/p99 against the week before, per slice (carrier, carrier in a region, hexagon, "
                      "carrier in a hexagon): delta with its 95 % bootstrap interval (delta_low/high_ms); beyond noise = the "
                      "interval excludes 0 and both weeks' tails hold enough queries; the part of the time budget whose "
                      "mean time per tail query moved most the same way (sql/marts/080_what_changed.sql, the question "
                      "what_changed_slices; the weekly report's summary names the same changes).")


def changes() -> dict:
    L = Layout()
    L.row("What changed since the week before")
    L.add(stat("Slices whose p95 or p99 moved beyond noise", f"""
SELECT count(DISTINCT (slice, carrier, region, h3_cell)) FILTER (WHERE beyond_noise AND level IN ('p95', 'p99')) AS slices,
       count(DISTINCT (slice, carrier, region, h3_cell)) AS compared
FROM what_changed_slices($week) WHERE {CHANGE_FILTER}""", description=CHANGE_DESCRIPTION), 8, 4)
    L.add(stat("The selection's p95 / p99, this week", """
SELECT quantile_disc(latency_ms, 0.95) AS p95, quantile_disc(latency_ms, 0.99) AS p99 FROM query_facts WHERE week = $week
  AND carrier IN ($carrier) AND h3_cell IN ($hexagon) AND site IN ($site) AND network_type IN ($network_type)""",
               unit="ms"), 8, 4)
    L.add(stat("Complete queries: this week / the week before", """
SELECT count(*) FILTER (WHERE week = $week) AS queries, count(*) FILTER (WHERE week = previous_week($week)) AS queries_before
FROM query_facts
WHERE carrier IN ($carrier) AND h3_cell IN ($hexagon) AND site IN ($site) AND network_type IN ($network_type)"""), 8, 4)
    L.add(table("p95 and p99 by slice, beyond noise first", f"""
SELECT {CHANGE_COLUMNS}
FROM what_changed_slices($week)
WHERE level IN ('p95', 'p99') AND {CHANGE_FILTER}
ORDER BY beyond_noise DESC, abs(coalesce(top_part_added_ms, 0)) DESC, slice, carrier, region, h3_cell, level""",
                description=CHANGE_DESCRIPTION, units=CHANGE_UNITS), 24, 12)
    L.add(table("Carriers, p50 / p95 / p99", f"""
SELECT {CHANGE_COLUMNS}
FROM what_changed_slices($week)
WHERE slice = 'carrier' AND {CHANGE_FILTER}
ORDER BY carrier, level_ord""", description=CHANGE_DESCRIPTION, units=CHANGE_UNITS, links={"carrier": CARRIER_LINK}), 24, 8)
    return dashboard("tailscope-changes", "tailscope: what changed",
                     "Week over week: each slice's p50/p95/p99 change with its bootstrap interval, beyond noise or not, and "
                     "the part of the time budget that moved it",
                     [*DIMENSION_VARS, WEEK_VAR], L)


DASHBOARDS = {
    "tailscope-overview.json": overview,
    "tailscope-carrier.json": carriers,
    "tailscope-hexagon.json": hexagons,
    "tailscope-signature.json": signatures,
    "tailscope-flow.json": flow,
    "tailscope-transport.json": transports,
    "tailscope-changes.json": changes,
}


def render() -> dict[str, str]:
    return {name: json.dumps(make(), indent=2, ensure_ascii=False) + "\n" for name, make in DASHBOARDS.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when dashboards/json differs from what this script writes")
    args = ap.parse_args()
    stale = []
    for name, text in render().items():
        path = OUT / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale dashboards (run scripts/make-dashboards.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

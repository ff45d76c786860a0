"""One truth across tables: checks that packets, events, flows and queries of one dataset tell the
same story. Run on the corpus, the samples, tests/repro and every lab run.

Each check is one SQL query over the dataset's Parquet files that returns the rows that break it
(empty = holds); `violations` runs them all and returns readable lines.
"""
from __future__ import annotations

from pathlib import Path

import duckdb

# Cause tag names (packets.tag_names) and the cause the events/queries tables name them by: the
# same pairs as signatures/src/tags.rs CAUSES.
CAUSE_TAGS = {
    "retx_rto": "rto",
    "retx_fast": "fast_retransmit",
    "retx_tlp": "tlp",
    "retx_spurious": "spurious",
    "retx_network_duplicate": "network_duplicate",
    "retx_packet_threshold": "packet_threshold",
    "retx_time_threshold": "time_threshold",
    "retx_pto": "pto",
    "retx_unknown": "unknown",
}
# The TCP causes are also flows columns of the tags' names (both directions, SYNs included).
FLOW_CAUSE_COLUMNS = ("retx_rto", "retx_fast", "retx_tlp", "retx_spurious", "retx_network_duplicate", "retx_unknown")


# What the checks read of a table a run did not write (a clean run has no events, ...).
_EMPTY = {
    "packets": "capture_id VARCHAR, file VARCHAR, frame UBIGINT, flow_id BIGINT, direction VARCHAR, "
               "ip_proto UTINYINT, payload_len UINTEGER, tag_names VARCHAR[]",
    "flows": "capture_id VARCHAR, flow_id BIGINT, ip_proto UTINYINT, c2s_retx_packets BIGINT, "
             "s2c_retx_packets BIGINT, c2s_network_duplicates BIGINT, s2c_network_duplicates BIGINT, tail_losses BIGINT, "
             + ", ".join(f"{c} BIGINT" for c in FLOW_CAUSE_COLUMNS),
    "events": "capture_id VARCHAR, file VARCHAR, frame UBIGINT, flow_id BIGINT, ts TIMESTAMPTZ, "
              "signature VARCHAR, cause VARCHAR",
    "queries": 'capture_id VARCHAR, flow_id BIGINT, query_index UINTEGER, retransmissions UBIGINT, '
               'start TIMESTAMPTZ, "end" TIMESTAMPTZ, last_byte TIMESTAMPTZ',
}


def _views(con: duckdb.DuckDBPyConnection, dataset: Path) -> None:
    if not any((dataset / "flows").rglob("*.parquet")):
        raise FileNotFoundError(f"{dataset}: no flows table: not a dataset, nothing to check")
    for table, columns in _EMPTY.items():
        files = sorted(str(f) for f in (dataset / table).rglob("*.parquet"))
        if files and table == "packets":
            from tailscope.jobs.analytics.db import packets_view

            packets_view(con, f"read_parquet({files!r}, hive_partitioning=true, union_by_name=true)")
        elif files:
            con.sql(f"CREATE VIEW {table} AS SELECT * FROM read_parquet({files!r}, hive_partitioning=true, union_by_name=true)")
        else:
            con.sql(f"CREATE TABLE {table}({columns})")
    pairs = ", ".join(f"('{t}', '{c}')" for t, c in CAUSE_TAGS.items())
    con.sql(f"CREATE TABLE cause_tags(tag VARCHAR, cause VARCHAR); INSERT INTO cause_tags VALUES {pairs}")
    # Each TCP packet's cause (at most one: tags.rs sets exactly one on a judged retransmission).
    con.sql("""
        CREATE VIEW packet_causes AS
        SELECT p.capture_id, p.file, p.frame, p.flow_id, p.direction, c.cause
        FROM packets p, cause_tags c
        WHERE p.ip_proto = 6 AND list_contains(p.tag_names, c.tag)""")


CHECKS = {
    # Every packet judged a retransmission has exactly one `retransmission` events row with its
    # cause, whatever Wireshark's flags say; and no such row lacks its packet.
    "packet_without_its_retransmission_event": """
        SELECT pc.file, pc.frame, pc.cause, count(e.frame) AS rows, list(e.cause) AS event_causes
        FROM packet_causes pc
        LEFT JOIN events e ON e.capture_id = pc.capture_id AND e.file = pc.file AND e.frame = pc.frame
             AND e.signature = 'retransmission'
        GROUP BY ALL
        HAVING count(e.frame) <> 1 OR any_value(e.cause) IS DISTINCT FROM pc.cause""",
    "retransmission_event_without_its_packet": """
        SELECT e.file, e.frame, e.cause
        FROM events e
        JOIN flows f ON f.capture_id = e.capture_id AND f.flow_id = e.flow_id AND f.ip_proto = 6
        WHERE e.signature = 'retransmission'
          AND NOT EXISTS (SELECT 1 FROM packet_causes pc
                          WHERE pc.capture_id = e.capture_id AND pc.file = e.file AND pc.frame = e.frame)""",
    # Per flow: flows.retx_<cause> = events by cause = packets by cause.
    "flow_cause_counts": """
        WITH ev AS (SELECT capture_id, flow_id, cause, count(*) AS n FROM events
                    WHERE signature = 'retransmission' GROUP BY ALL),
             pk AS (SELECT capture_id, flow_id, cause, count(*) AS n FROM packet_causes GROUP BY ALL),
             fl AS (UNPIVOT (SELECT capture_id, flow_id, {flow_columns} FROM flows WHERE ip_proto = 6)
                    ON {flow_columns} INTO NAME col VALUE n)
        SELECT fl.capture_id, fl.flow_id, fl.col, fl.n AS flows_n, coalesce(ev.n, 0) AS events_n,
               coalesce(pk.n, 0) AS packets_n
        FROM fl JOIN cause_tags m ON m.tag = fl.col
        LEFT JOIN ev ON ev.capture_id = fl.capture_id AND ev.flow_id = fl.flow_id AND ev.cause = m.cause
        LEFT JOIN pk ON pk.capture_id = fl.capture_id AND pk.flow_id = fl.flow_id AND pk.cause = m.cause
        WHERE fl.n <> coalesce(ev.n, 0) OR fl.n <> coalesce(pk.n, 0)""",
    # Per flow and direction: data retransmissions (flows.*_retx_packets) = packets with a cause
    # and a payload; of them, network duplicates (flows.*_network_duplicates) = those whose cause
    # is network_duplicate.
    "flow_retx_packets": """
        WITH pk AS (SELECT p.capture_id, p.flow_id, p.direction, count(*) AS n,
                           count(*) FILTER (WHERE pc.cause = 'network_duplicate') AS dups
                    FROM packet_causes pc JOIN packets p USING (capture_id, file, frame)
                    WHERE p.payload_len > 0 GROUP BY ALL)
        SELECT f.capture_id, f.flow_id, f.c2s_retx_packets, f.s2c_retx_packets,
               f.c2s_network_duplicates, f.s2c_network_duplicates,
               coalesce(c.n, 0) AS c2s_n, coalesce(s.n, 0) AS s2c_n, coalesce(c.dups, 0) AS c2s_dups,
               coalesce(s.dups, 0) AS s2c_dups
        FROM flows f
        LEFT JOIN pk c ON c.capture_id = f.capture_id AND c.flow_id = f.flow_id AND c.direction = 'c2s'
        LEFT JOIN pk s ON s.capture_id = f.capture_id AND s.flow_id = f.flow_id AND s.direction = 's2c'
        WHERE f.ip_proto = 6 AND (f.c2s_retx_packets <> coalesce(c.n, 0) OR f.s2c_retx_packets <> coalesce(s.n, 0)
                                  OR f.c2s_network_duplicates <> coalesce(c.dups, 0)
                                  OR f.s2c_network_duplicates <> coalesce(s.dups, 0))""",
    # Tail losses: flows.tail_losses = tail_loss events.
    "flow_tail_losses": """
        WITH ev AS (SELECT capture_id, flow_id, count(*) AS n FROM events WHERE signature = 'tail_loss' GROUP BY ALL)
        SELECT f.capture_id, f.flow_id, f.tail_losses, coalesce(ev.n, 0) AS events_n
        FROM flows f LEFT JOIN ev USING (capture_id, flow_id)
        WHERE f.ip_proto = 6 AND f.tail_losses <> coalesce(ev.n, 0)""",
    # A query's retransmissions happened while it was open, or (the first query) during the
    # connection setup it carries - a TLS handshake's among them (docs/queries.md#tls-over-tcp):
    # they are retransmission events of its flow inside [start - setup, end]; never more.
    "query_retransmissions_outside_events": """
        WITH q AS (SELECT q.*, q.start - to_microseconds(CASE WHEN q.query_index = 0
                                   THEN coalesce(q.setup_ns, 0) // 1000 ELSE 0 END) AS since
                   FROM queries q JOIN flows f USING (capture_id, flow_id) WHERE f.ip_proto = 6),
             n AS (SELECT q.capture_id, q.flow_id, q.query_index, q.retransmissions,
                          (SELECT count(*) FROM events e WHERE e.capture_id = q.capture_id AND e.flow_id = q.flow_id
                             AND e.signature = 'retransmission' AND e.ts BETWEEN q.since AND q."end") AS events_n
                   FROM q)
        SELECT * FROM n WHERE retransmissions > events_n""",
    # A query ends no earlier than the last transmission of its response's bytes, and its
    # indices count 0, 1, 2, ... per flow.
    "query_end_before_last_byte": """
        SELECT capture_id, flow_id, query_index, last_byte, "end" FROM queries
        WHERE last_byte IS NOT NULL AND "end" < last_byte""",
    # The time budget (docs/queries.md#time-budget): parts >= 0 adding up exactly to the latency
    # users see (the first query's connection setup included).
    "query_budget_adds_up": """
        SELECT capture_id, flow_id, query_index, latency_ns, setup_ns, {budget_sum} AS budget_ns
        FROM queries
        WHERE {budget_sum} IS DISTINCT FROM latency_ns + coalesce(setup_ns, 0) OR {budget_negative}""",
    "query_indices": """
        SELECT capture_id, flow_id, count(*) AS n, max(query_index) AS max_index FROM queries
        GROUP BY ALL HAVING max(query_index) + 1 <> count(*) OR count(DISTINCT query_index) <> count(*)""",
}


def violations(dataset: Path, limit: int = 5) -> list[str]:
    """Readable lines, one per broken check (with up to `limit` offending rows); empty = all hold."""
    con = duckdb.connect()
    _views(con, Path(dataset))
    out = []
    budget = [c for c in con.sql("SELECT * FROM queries LIMIT 0").columns if c.startswith("budget_")]
    if not budget and con.sql("SELECT count(*) FROM queries").fetchone()[0]:
        out.append("query_budget_adds_up: the queries table has no budget_*_ns columns")
    for name, sql in CHECKS.items():
        if "{budget_sum}" in sql and not budget:
            continue
        sql = sql.replace("{flow_columns}", ", ".join(FLOW_CAUSE_COLUMNS))
        sql = sql.replace("{budget_sum}", " + ".join(budget) or "0")
        sql = sql.replace("{budget_negative}", " OR ".join(f"{c} < 0" for c in budget) or "false")
        rel = con.sql(sql)
        rows = rel.fetchall()
        if rows:
            shown = "; ".join(str(dict(zip(rel.columns, r))) for r in rows[:limit])
            out.append(f"{name}: {len(rows)} rows, e.g. {shown}")
    return out

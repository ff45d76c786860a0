"""`tailscope conn`: one line per connection, as `tcptrace -l` or Zeek's conn.log through zeek-cut."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tailscope.jobs.analytics.tabular import FORMATS

# The default listing: who talked to whom, how much, how fast, and what went wrong (the columns a
# tcptrace -l or conn.log reader looks at first). -c picks any columns of the flows view.
DEFAULT_COLUMNS = (
    "flow_id", "start", "duration_ms", "protocol", "client", "server", "sni", "c2s_packets", "s2c_packets",
    "c2s_bytes", "s2c_bytes", "rtt_min_ms", "rtt_p50_ms", "retx", "end_reason", "signatures",
)
# Derived columns a person reads more easily than their nanosecond sources.
DERIVED = {
    "duration_ms": "round(duration_ns / 1e6, 3)",
    # [v6]:port, as URLs write it, so the port stays readable
    "client": "CASE WHEN contains(client_ip, ':') THEN '[' || client_ip || ']' ELSE client_ip END || ':' || client_port",
    "server": "CASE WHEN contains(server_ip, ':') THEN '[' || server_ip || ']' ELSE server_ip END || ':' || server_port",
    "rtt_min_ms": "round(rtt_min_ns / 1e6, 3)",
    "rtt_p50_ms": "round(rtt_p50_ns / 1e6, 3)",
    "handshake_ms": "round(coalesce(handshake_rtt_ns, quic_handshake_rtt_ns) / 1e6, 3)",
    # what the senders resent: network duplicates (a SPAN port's or a link's copies) are no resend
    "retx": "coalesce(c2s_retx_packets, 0) - coalesce(c2s_network_duplicates, 0) + coalesce(s2c_retx_packets, 0)"
            " - coalesce(s2c_network_duplicates, 0) + coalesce(c2s_quic_retx, 0) + coalesce(s2c_quic_retx, 0)",
}

EPILOG = """\
examples:
  tailscope conn DS                                   every connection, oldest first
  tailscope conn DS --where "retx > 0" -c flow_id,client,server,retx,retx_rto,tail_losses
  tailscope conn DS --where "list_contains(signatures, 'tail_loss')" --format tsv | sort -t$'\\t' -k3

--where takes a DuckDB condition over the flows view (docs/schemas.md#flows) and the derived
columns """ + ", ".join(DERIVED) + """.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "conn",
        help="list connections, one line each (like tcptrace -l or Zeek's conn.log)",
        description="List the connections of a dataset, one line each, from the flows view.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--where", "-w", metavar="SQL", help="keep the connections for which this condition holds")
    p.add_argument("--columns", "-c", metavar="COL,COL", help=f"columns to show (default: {','.join(DEFAULT_COLUMNS)})")
    p.add_argument("--limit", "-n", type=int, metavar="N", help="at most N connections")
    p.add_argument("--format", "-f", choices=FORMATS, default="tsv", help="output format (default: tsv, for cut/sort/awk)")
    p.set_defaults(func=run)


def listing_sql(columns: list[str], where: str | None, limit: int | None) -> str:
    derived = ", ".join(f"{expr} AS {name}" for name, expr in DERIVED.items())
    select = ", ".join(f'"{c}"' for c in columns)
    sql = f"SELECT {select} FROM (SELECT *, {derived} FROM flows) AS f"
    if where:
        sql += f" WHERE ({where})"
    sql += " ORDER BY start, capture_id, flow_id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql


def run(args: argparse.Namespace) -> int:
    import duckdb

    from tailscope.jobs.analytics import tabular
    from tailscope.jobs.analytics.db import DatasetError, connect

    if args.limit is not None and args.limit < 0:
        print("tailscope conn: error: --limit must be at least 0", file=sys.stderr)
        return 2
    columns = [c.strip() for c in args.columns.split(",") if c.strip()] if args.columns else list(DEFAULT_COLUMNS)
    try:
        con = connect(args.dataset)
    except DatasetError as exc:
        print(f"tailscope conn: error: {exc}", file=sys.stderr)
        return 2
    try:
        rel = con.sql(listing_sql(columns, args.where, args.limit))
        tabular.write(rel.columns, rel.fetchall(), args.format, sys.stdout)
    except duckdb.Error as exc:
        print(f"tailscope conn: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    finally:
        con.close()
    return 0

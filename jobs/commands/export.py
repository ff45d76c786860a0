"""`tailscope export`: the dataset in another tool's format (today: Zeek's conn.log)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write the dataset in another tool's format (zeek: a conn.log)",
        description="Export a dataset for other tools. `zeek` writes a Zeek conn.log (TSV with its "
        "header, community_id included) from the flows: one line per connection; see docs/schemas.md "
        "for how each field is derived.",
    )
    p.add_argument("format", choices=["zeek"], help="zeek: conn.log")
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--out", "-o", type=Path, metavar="FILE", help="output file (default: standard output; `-` too)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.analytics.db import DatasetError, connect
    from tailscope.jobs.analytics.zeek import write_conn_log

    try:
        con = connect(args.dataset)
    except DatasetError as exc:
        print(f"tailscope export: error: {exc}", file=sys.stderr)
        return 2
    try:
        if args.out is None or str(args.out) == "-":
            n = write_conn_log(con, sys.stdout)
        else:
            tmp = args.out.with_name(f".{args.out.name}.tmp")
            with open(tmp, "w") as fh:
                n = write_conn_log(con, fh)
            tmp.replace(args.out)
            print(f"{args.out}: {n} connections", file=sys.stderr)
    finally:
        con.close()
    return 0

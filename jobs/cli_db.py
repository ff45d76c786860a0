"""`tailscope db`: build the DuckDB database over a dataset."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "db",
        help="build the DuckDB database (views from sql/) over a dataset",
        description="Create DATASET/tailscope.duckdb with views over the Parquet tables "
        "(packets, flows, files, accounting). The file is replaced atomically, so readers "
        "holding the old one are not disturbed.",
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory written by `tailscope analyze`")
    p.add_argument("--db", type=Path, metavar="FILE", help="database path (default: DATASET/tailscope.duckdb)")
    p.add_argument("--query", "-e", metavar="SQL", help="run this SQL against the new database and print the result")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.db import DatasetError, build

    try:
        path = build(args.dataset, args.db)
    except DatasetError as exc:
        print(f"tailscope db: error: {exc}", file=sys.stderr)
        return 2
    print(f"database: {path}")
    if args.query:
        import duckdb

        con = duckdb.connect(str(path), read_only=True)
        try:
            con.sql(args.query).show(max_width=200)
        except duckdb.Error as exc:
            print(f"tailscope db: query failed: {exc}", file=sys.stderr)
            return 1
        finally:
            con.close()
    return 0

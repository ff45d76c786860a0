"""`tailscope db`: build the DuckDB database over a dataset, query it, or open a shell on it."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tailscope.jobs.analytics.tabular import FORMATS

EPILOG = """\
examples:
  tailscope db DS                                   open the DuckDB shell on DS's views
  tailscope db DS -e "SELECT carrier, count(*) FROM flows GROUP BY 1" --format csv
  tailscope db DS -e "FROM worst_flows" -e "FROM p99_explained" --format markdown

  echo "SELECT count(*) FROM flows;" | tailscope db DS -f csv    SQL on standard input, as -e

Only results go to standard output (messages go to standard error), so the output can be piped.
Several results (-e repeated, or a script) are separated by one blank line (json: one document each).
Queries (-e, or SQL piped in) on a dataset where the database cannot be written (a read-only
dataset) run on the same views in memory; the shell needs a file: --db elsewhere.
Exit status: 0 ok, 1 a query failed, 2 not a dataset, 4 the database could not be written.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "db",
        help="build the DuckDB database (views from sql/) over a dataset; query it or open a shell",
        description="Create DATASET/tailscope.duckdb with views over the Parquet tables "
        "(packets, flows, queries, events, files, marts and questions; docs/schemas.md). The file is "
        "replaced atomically, so readers holding the old one are not disturbed. With -e, run SQL and "
        "print every row; without it, open the interactive DuckDB shell on the database.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory written by `tailscope analyze`")
    p.add_argument("--db", type=Path, metavar="FILE", help="database path (default: DATASET/tailscope.duckdb)")
    p.add_argument("--query", "-e", action="append", metavar="SQL", help="run this SQL and print the result (repeatable)")
    p.add_argument("--format", "-f", choices=FORMATS, default="box", help="result format with -e (default: box)")
    p.add_argument("--build-only", action="store_true", help="build the database and exit (no shell)")
    p.set_defaults(func=run)


def duckdb_shell() -> str | None:
    """The DuckDB command-line shell: the `duckdb-cli` package's binary, else one on PATH."""
    import importlib.util
    import shutil

    spec = importlib.util.find_spec("duckdb_cli")
    if spec and spec.submodule_search_locations:
        exe = Path(next(iter(spec.submodule_search_locations))) / "duckdb"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe)
    return shutil.which("duckdb")


# How long `tailscope db DS` waits for SQL on a standard input that is not a terminal before it
# says it found none (a pipe whose writer neither writes nor closes it).
STDIN_WAIT_S = 2.0


def piped_sql() -> str | None:
    """The SQL on standard input when it is not a terminal: its whole text, or None when nothing
    came (and nothing closed it) within STDIN_WAIT_S."""
    import select

    ready, _, _ = select.select([sys.stdin], [], [], STDIN_WAIT_S)
    return sys.stdin.read() if ready else None


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.analytics.db import DatasetError, build, connect

    queries = args.query
    if not queries and not args.build_only and not sys.stdin.isatty():
        sql = piped_sql()
        if sql is None:
            print(f"tailscope db: no SQL on standard input within {STDIN_WAIT_S:g} s: the database is built only "
                  "(pipe SQL in, or -e SQL)", file=sys.stderr)
        queries = _statements(sql) if sql and sql.strip() else None
    try:
        path = build(args.dataset, args.db)
    except DatasetError as exc:
        print(f"tailscope db: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if not queries or args.db is not None:
            hint = "" if args.db is not None else " (a read-only dataset? --db FILE writes the database elsewhere)"
            raise OSError(exc.errno, f"{exc.strerror}{hint}", exc.filename) from exc
        # a dataset we cannot write into: the same views in memory answer the queries
        print(f"database: in memory ({args.dataset} cannot hold {exc.filename and Path(exc.filename).name}: "
              f"{exc.strerror})", file=sys.stderr)
        try:
            con = connect(args.dataset)
        except DatasetError as exc2:
            print(f"tailscope db: error: {exc2}", file=sys.stderr)
            return 2
        return _queries(con, queries, args.format)
    print(f"database: {path}", file=sys.stderr)
    if queries:
        import duckdb

        return _queries(duckdb.connect(str(path), read_only=True), queries, args.format)
    if args.build_only or not sys.stdin.isatty():
        return 0
    shell = duckdb_shell()
    if shell is None:
        print("tailscope db: error: no DuckDB shell found (pip install duckdb-cli); use -e SQL to query", file=sys.stderr)
        return 2
    os.execv(shell, [shell, "-readonly", str(path)])
    return 0  # not reached


def _statements(sql: str) -> list[str]:
    """A script's statements, each run and printed as an -e query is."""
    import duckdb

    con = duckdb.connect()
    try:
        return [s.query for s in con.extract_statements(sql)]
    except duckdb.Error:
        return [sql]  # its syntax error is reported when it runs
    finally:
        con.close()


def _queries(con, queries: list[str], fmt: str) -> int:
    import duckdb

    from tailscope.jobs.analytics import tabular

    printed = 0
    try:
        for sql in queries:
            try:
                rel = con.sql(sql)
                if rel is None:  # a statement without a result (SET, PRAGMA ...)
                    continue
                columns, rows = rel.columns, rel.fetchall()
                if printed and fmt != "json":
                    # One blank line between results, so csv/tsv readers (and eyes) see where one
                    # table ends and the next header starts; json results are one document each.
                    sys.stdout.write("\n")
                tabular.write(columns, rows, fmt, sys.stdout)
                printed += 1
            except duckdb.Error as exc:
                print(f"tailscope db: query failed: {exc}", file=sys.stderr)
                return 1
    finally:
        con.close()
    return 0

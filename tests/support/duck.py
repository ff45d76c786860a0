"""DuckDB over a dataset as the SQL tests read it: the database `tailscope db` builds, opened read
only with UTC as its time zone, and query results as dicts."""
from __future__ import annotations

from pathlib import Path

import duckdb


def connect(dataset: Path) -> duckdb.DuckDBPyConnection:
    from tailscope.jobs.analytics.db import build

    con = duckdb.connect(str(build(dataset)), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    return con


def rows(con, sql: str, params=()) -> list[dict]:
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]

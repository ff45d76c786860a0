"""Shared fixtures: the corpus analysed once per test process, and helpers to read tables."""
from __future__ import annotations

import collections
from pathlib import Path

import duckdb
import pytest

from support import corpus


def read_table(dataset: Path, table: str, where: str = "") -> list[dict]:
    """Rows of a dataset table as dicts (timestamps as integer nanoseconds)."""
    con = duckdb.connect()
    partitioned = table in ("packets", "flows", "queries", "events")
    glob = str(dataset / table / ("*/*.parquet" if partitioned else "*.parquet"))
    if table == "packets":
        # through the staging view: the columns users see (some are derived, not stored)
        from tailscope.jobs.analytics.db import packets_view

        packets_view(con, f"read_parquet('{glob}', hive_partitioning=true)")
        rel = con.sql(f"SELECT * EXCLUDE (ts, ts_ns), ts_ns AS ts FROM packets {where}")
        return [dict(zip(rel.columns, row)) for row in rel.fetchall()]
    rel = con.sql(f"SELECT * FROM read_parquet('{glob}', hive_partitioning={str(partitioned).lower()})")
    ts_cols = [c for c, t in zip(rel.columns, rel.types) if str(t).startswith("TIMESTAMP")]
    cols = ", ".join(f'epoch_ns("{c}") AS "{c}"' if c in ts_cols else f'"{c}"' for c in rel.columns)
    rel = con.sql(f"SELECT {cols} FROM read_parquet('{glob}', hive_partitioning={str(partitioned).lower()}) {where}")
    names = rel.columns
    return [dict(zip(names, row)) for row in rel.fetchall()]


@pytest.fixture(scope="session")
def corpus_run(tmp_path_factory):
    """The whole corpus through the local engine, once per test process."""
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    out = tmp_path_factory.mktemp("corpus-dataset")
    return analyze([str(corpus.corpus_dir() / "pcaps")], out, AnalyzeOptions(progress=False))


@pytest.fixture(scope="session")
def corpus_flows(corpus_run) -> dict[str, list[dict]]:
    """Flows by the corpus file they started in."""
    by_file = collections.defaultdict(list)
    for f in read_table(corpus_run.out, "flows"):
        by_file[Path(f["first_file"]).name].append(f)
    return by_file


@pytest.fixture(scope="session")
def corpus_packets(corpus_run) -> dict[str, list[dict]]:
    by_file = collections.defaultdict(list)
    for p in read_table(corpus_run.out, "packets"):
        by_file[Path(p["file"]).name].append(p)
    return by_file

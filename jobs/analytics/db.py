"""Build the DuckDB database whose views come from sql/.

The database is written under a temporary name and renamed into place, because DuckDB allows one
writer and readers (Grafana, notebooks) may hold the old file open: they keep a consistent file.
"""
from __future__ import annotations

import errno
import os
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from tailscope import _native
from tailscope.jobs.enrichment.enrich import enriched_schema

TABLES = ("packets", "flows", "queries", "events", "files")
DB_NAME = "tailscope.duckdb"
# Readers bundle their own DuckDB: Grafana's DuckDB plugin (motherduck-duckdb-datasource 0.4.x)
# ships DuckDB 1.5, which cannot open a file in a newer storage format. The database holds only
# views and macros, so the oldest 1.x format costs nothing (dashboards/README.md).
STORAGE_COMPATIBILITY = "v1.0.0"


class DatasetError(Exception):
    pass


def _sql_files() -> list[tuple[str, str]]:
    root = resources.files("tailscope.sql")
    out = []
    for layer in ("staging", "marts", "questions"):
        d = root / layer
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".sql"):
                out.append((f"{layer}/{f.name}", f.read_text()))
    return out


def _empty_schema(table: str) -> pa.Schema:
    if table == "packets":
        return _native.packet_schema()
    if table == "flows":
        return enriched_schema(_native.flow_schema())
    if table == "events":
        return _native.event_schema()
    if table == "queries":
        return enriched_schema(_native.query_schema())
    from tailscope.jobs.run.run_model import files_table

    return files_table([], "").schema


def _stored_type(t: pa.DataType) -> pa.DataType:
    """The empty stand-in of a table without parts is stored in the database: DuckDB 2 stores a
    nanosecond TIMESTAMPTZ as a type DuckDB 1.5 (the Grafana plugin's, the duckdb-cli shell's)
    cannot read, and the file would not open there at all. The staging views cast every time to
    microsecond TIMESTAMPTZ anyway."""
    if pa.types.is_timestamp(t) and t.unit == "ns" and t.tz is not None:
        return pa.timestamp("us", tz=t.tz)
    return t


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _checked(dataset: Path) -> Path:
    dataset = Path(dataset).resolve()
    if not dataset.is_dir():
        raise DatasetError(f"{dataset}: no such dataset directory")
    if not (dataset / "_runs").is_dir():
        raise DatasetError(f"{dataset}: not a tailscope dataset (no _runs/ directory; run `tailscope analyze --out {dataset}` first)")
    return dataset


def packet_tag_sql() -> dict[str, str]:
    """The packets view's `tag_names` and `retx_cause` as SQL over its `tags` column, from the
    native tag tables (bit i of `tags` is `tag_names()[i]`; a cause is the first of `retx_causes()`
    whose bit is set): the one definition, so stored parts need not carry them."""
    names = "[" + ", ".join(_sql_str(n) for n in _native.tag_names()) + "]"
    causes = " ".join(f"WHEN (tags & {bit}) <> 0 THEN {_sql_str(name)}" for bit, name in _native.retx_causes())
    return {
        "tag_names": f"[name FOR name, i IN {names} IF (tags >> (i - 1)) & 1 = 1]",
        "retx_cause": f"CASE {causes} END",
    }


def packets_view(con, source: str) -> None:
    """Create the `packets` view (sql/staging/010_packets.sql) on ``con`` over any packets source,
    e.g. a `read_parquet(...)` of some parts: for readers that do not want the whole dataset's
    views (the lab's scoring, the tests), the same columns users see."""
    text = (resources.files("tailscope.sql") / "staging" / "010_packets.sql").read_text()
    con.execute(text.format(packets=source, **packet_tag_sql()))


def install(con, dataset: Path) -> None:
    """Create sql/'s views and macros on ``con`` over the Parquet files of ``dataset`` (an empty
    table of the right schema stands in for a table with no rows yet). `tailscope db` writes them
    to a file; `stats`, `conn`, `export` and the report query them in memory: one definition of
    every figure."""
    sources = packet_tag_sql()
    horizon = _horizon_sql(dataset)
    for table in TABLES:
        parts = sorted((dataset / table).rglob("part-*.parquet")) if (dataset / table).is_dir() else []
        if parts:
            partitioned = table != "files"
            glob = str(dataset / table / ("*/*.parquet" if partitioned else "*.parquet"))
            source = f"read_parquet({_sql_str(glob)}, hive_partitioning={str(partitioned).lower()}, union_by_name=true)"
            # the retention horizon (jobs/dataset/prune.py), read when a query runs: the commit point of a prune
            sources[table] = f"(SELECT * FROM {source} WHERE CAST(\"date\" AS DATE) >= {horizon})" if partitioned else source
        else:
            empty = {f.name: pa.array([], type=_stored_type(f.type)) for f in _empty_schema(table)}
            if table != "files":  # the hive partition column the part files' paths give
                empty["date"] = pa.array([], type=pa.date32())
            empty = pa.table(empty)
            con.register(f"_empty_{table}_arrow", empty)
            con.execute(f"CREATE TABLE _empty_{table} AS SELECT * FROM _empty_{table}_arrow")
            con.unregister(f"_empty_{table}_arrow")
            sources[table] = f"_empty_{table}"
    for name, text in _sql_files():
        try:
            con.execute(text.format(**sources))
        except duckdb.Error as exc:
            raise DatasetError(f"sql/{name}: {exc}") from exc


def _horizon_sql(dataset: Path) -> str:
    """The first day the views show: read from the dataset's `_retention.json` when each query
    runs (so a prune is seen by databases built before it), created when missing."""
    from tailscope.jobs.dataset.prune import NO_HORIZON, RETENTION_FILE, retention_text

    path = dataset / RETENTION_FILE
    if not path.exists():
        try:
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text(retention_text(NO_HORIZON))
            os.replace(tmp, path)
        except OSError:
            return f"DATE '{NO_HORIZON}'"  # a read-only dataset no prune has touched
    return (f"(SELECT horizon FROM read_json({_sql_str(str(path))}, format='unstructured', "
            "columns={'horizon': 'DATE'}))")


def connect(dataset: Path):
    """An in-memory DuckDB connection with the dataset's views (nothing written)."""
    dataset = _checked(dataset)
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone='UTC'")
        install(con, dataset)
    except BaseException:
        con.close()
        raise
    return con


def build(dataset: Path, db_path: Path | None = None) -> Path:
    dataset = _checked(dataset)
    db_path = Path(db_path) if db_path else dataset / DB_NAME
    tmp = db_path.with_name(f".{db_path.name}.{os.getpid()}.tmp")
    if tmp.exists():
        tmp.unlink()
    if not db_path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such directory for the database", str(db_path))
    try:
        con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_COMPATIBILITY})
    except duckdb.IOException as exc:
        raise OSError(errno.EIO, f"cannot create the database ({exc})", str(db_path)) from exc
    try:
        install(con, dataset)
        con.close()
        os.replace(tmp, db_path)
    except BaseException:
        con.close()
        if tmp.exists():
            tmp.unlink()
        raise
    return db_path

"""Write the Parquet dataset so that a reader never sees a half-written run.

Every run writes its part files under ``<out>/_staging/<run_id>/`` and, only when all inputs are
done, moves them into ``<out>/<table>/date=YYYY-MM-DD/`` and then writes the run manifest
``<out>/_runs/<run_id>.json``. A part file whose run has no manifest is an orphan of a crashed
run; :func:`recover` removes such files before the next run writes anything.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tailscope.jobs.storage import join, location

TABLES_BY_DATE = {"packets": "ts", "flows": "start", "events": "ts", "queries": "start"}
UNPARTITIONED = ("files",)
NS_PER_DAY = 86_400 * 10**9
# One data page per column chunk (a packets batch is one row group of 65,536 rows; Parquet's
# default cuts pages at 20,000 rows, and written 1,024 values at a time): each page is one zstd
# call, which starts a new compression context. With whole-batch pages the packets files are
# ~10% smaller and ~5% cheaper to write; pages still end at the 1 MiB data page size limit.
PARQUET_OPTIONS = dict(compression="zstd", max_rows_per_page=65_536, write_batch_size=65_536)

# A part file is closed, and the next rows of its table and day go to a new one, after this many
# rows: an open Parquet writer keeps every row group's metadata until it closes (~3 MiB per 100
# row groups of the packets table), so one file per day would grow with the capture. 128 packets
# row groups is ~100 MiB on disk, a usual size for Parquet readers.
MAX_ROWS_PER_FILE = 128 * 65_536

# Columns written without statistics. A packets row group holds every direction, encapsulation
# and retransmission cause of its 65,536 packets, so min/max over these strings can never skip
# one; and computing them (a string comparison per value) cost ~5% of writing the table.
# Every other column keeps its statistics.
NO_STATISTICS = {"packets": ("direction", "encap", "retx_cause", "tag_names")}


def _utc_days(ts: pa.Array) -> pa.Array:
    """Days since 1970-01-01 (floor division: pc.divide truncates toward zero, which would put
    the last nanoseconds before 1970 on the wrong day)."""
    ns = ts.cast(pa.int64())
    before_1970 = pc.subtract(pc.divide(pc.add(ns, 1), NS_PER_DAY), 1)
    return pc.if_else(pc.less(ns, 0), before_1970, pc.divide(ns, NS_PER_DAY))


def _date_of(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


def _dictionary_columns(schema: pa.Schema) -> list[str]:
    """Dictionary-encode the repetitive string columns only; numbers and timestamps gain
    nothing from it and cost time."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_list(f.type)]


# Frame numbers and packet times rise row by row: as deltas they take a few bits each, which
# leaves zstd a tenth less to compress on the packets table (files ~10% smaller, writing ~10%
# cheaper, read back identically).
DELTA_COLUMNS = ("frame", "ts")


def _column_encoding(schema: pa.Schema) -> dict[str, str]:
    return {
        f.name: "DELTA_BINARY_PACKED"
        for f in schema
        if f.name in DELTA_COLUMNS and (pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type))
    }


def _leaf_paths(name: str, type_: pa.DataType) -> list[str]:
    """The Parquet column paths under one Arrow field (compliant nested names, as written)."""
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _leaf_paths(f"{name}.list.element", type_.value_type)
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in _leaf_paths(f"{name}.{f.name}", f.type)]
    return [name]


def _statistics(table: str, schema: pa.Schema) -> bool | list[str]:
    skip = NO_STATISTICS.get(table)
    if not skip:
        return True
    return [p for f in schema if f.name not in skip for p in _leaf_paths(f.name, f.type)]


def run_id_of(part: str) -> str | None:
    # part-<run_id>-<n>.parquet
    stem = part.rsplit("/", 1)[-1]
    if not (stem.startswith("part-") and stem.endswith(".parquet")):
        return None
    return stem[len("part-") :].rsplit("-", 1)[0]


def committed_runs(out) -> set[str]:
    loc = location(out)
    return {
        p.rsplit("/", 1)[-1][: -len(".json")]
        for p in loc.listdir(join(out, "_runs"))
        if p.endswith(".json") and not p.rsplit("/", 1)[-1].startswith(".")
    }


def recover(out) -> list[str]:
    """Delete leftovers of crashed runs; returns what was removed (for the log)."""
    loc = location(out)
    removed = finish_retirements(out)
    for d in loc.listdir(join(out, "_staging")):
        loc.rmtree(d)
        removed.append(str(d))
    done = committed_runs(out)
    for table in list(TABLES_BY_DATE) + list(UNPARTITIONED):
        for part in loc.find(join(out, table)):
            run_id = run_id_of(part)
            if run_id is not None and run_id not in done:
                loc.rm(part)
                removed.append(str(part))
    return removed


def finish_retirements(out) -> list[str]:
    """Delete the parts a committed run retired (jobs/reprocess.py) that are still there: the
    run was killed after its commit point, before it deleted them."""
    loc = location(out)
    removed = []
    for run in sorted(committed_runs(out)):
        path = join(out, "_runs", f"{run}.json")
        try:
            retired = json.loads(loc.read_text(path)).get("retired", [])
        except (OSError, ValueError):
            continue  # the ledger names an unreadable manifest
        for rel in retired:
            part = join(out, rel)
            if loc.exists(part):
                loc.rm(part)
                removed.append(str(part))
    return removed


@dataclass(frozen=True)
class StagedPart:
    table: str
    date: str | None
    path: str  # where it is staged


def publish(out, run_id: str, parts: list[StagedPart], manifest: dict, retired: list[str] = ()) -> list[str]:
    """Move staged parts into the dataset, then write the run manifest: until the manifest
    exists the parts are orphans that :func:`recover` removes, so a reader never counts a run
    that did not finish. `retired` parts (paths relative to `out`, rows this run replaces) are
    deleted right after the manifest, which names them so that recovery finishes the job."""
    loc = location(out)
    moved = []
    for part in sorted(parts, key=lambda p: p.path):
        name = part.path.rsplit("/", 1)[-1]
        dest_dir = join(out, part.table, f"date={part.date}" if part.date else "")
        loc.mkdirs(dest_dir)
        loc.move(part.path, join(dest_dir, name))
        moved.append(join(part.table, f"date={part.date}" if part.date else "", name))
    manifest["outputs"] = moved
    if retired:
        manifest["retired"] = list(retired)
    runs = join(out, "_runs")
    loc.mkdirs(runs)
    loc.write_text_atomic(join(runs, f"{run_id}.json"), json.dumps(manifest, indent=2, sort_keys=False, default=str))
    for rel in retired:
        loc.rm(join(out, rel))
    loc.rmtree(join(out, "_staging", run_id))
    loc.rmdir_if_empty(join(out, "_staging"))
    return moved


class StagedWriter:
    """Streams record batches into staged, date-partitioned Parquet files."""

    def __init__(self, out, run_id: str, stage: str | None = None, tag: str = "", max_rows_per_file: int | None = None):
        """`stage` and `tag` let several writers of one run (the Spark engine's tasks) stage
        their parts side by side: each in its own directory, with `tag` in its file names."""
        self.out = out
        self.run_id = run_id
        self.loc = location(out)
        self.stage = str(stage) if stage is not None else join(out, "_staging", run_id)
        if stage is None and not self.loc.remote and os.path.exists(self.stage):
            raise FileExistsError(f"{self.stage}: a run with this id is staged already")
        self.loc.mkdirs(self.stage)
        self.tag = tag
        self._writers: dict[tuple[str, str | None], pq.ParquetWriter] = {}
        self._files: dict[tuple[str, str | None], object] = {}
        self._paths: dict[tuple[str, str | None], str] = {}
        self.rows: dict[str, int] = {}
        self._seq = 0
        self.max_rows_per_file = max_rows_per_file or MAX_ROWS_PER_FILE
        self._file_rows: dict[tuple[str, str | None], int] = {}
        self._full: list[StagedPart] = []

    def _writer(self, table: str, date: str | None, schema: pa.Schema) -> pq.ParquetWriter:
        key = (table, date)
        w = self._writers.get(key)
        if w is None:
            sub = join(self.stage, table, f"date={date}" if date else "")
            self.loc.mkdirs(sub)
            path = join(sub, f"part-{self.run_id}-{self.tag}{self._seq:05d}.parquet")
            self._seq += 1
            sink = self._files[key] = self.loc.open_write(path)
            w = pq.ParquetWriter(
                sink,
                schema,
                use_dictionary=_dictionary_columns(schema),
                column_encoding=_column_encoding(schema),
                write_statistics=_statistics(table, schema),
                **PARQUET_OPTIONS,
            )
            self._writers[key] = w
            self._paths[key] = path
        return w

    def write(self, table: str, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows[table] = self.rows.get(table, 0) + batch.num_rows
        ts_col = TABLES_BY_DATE.get(table)
        if ts_col is None:
            self._write_part(table, None, batch)
            return
        # Partition by UTC day from integer nanoseconds: formatting a date string per row costs
        # more than the whole decode (a locale per value). Most batches hold a single day, which
        # the batch's earliest and latest instants show without a day computed for every row.
        ts = batch.column(ts_col)
        lo, hi = (v.as_py() for v in pc.min_max(ts.cast(pa.int64())).values())
        if lo is not None and lo // NS_PER_DAY == hi // NS_PER_DAY:
            self._write_part(table, _date_of(lo // NS_PER_DAY), batch)
            return
        days = _utc_days(ts)
        for day in pc.unique(days).to_pylist():
            self._write_part(table, _date_of(day), batch.filter(pc.equal(days, day)))

    def _write_part(self, table: str, date: str | None, batch: pa.RecordBatch) -> None:
        key = (table, date)
        self._writer(table, date, batch.schema).write_batch(batch)
        rows = self._file_rows[key] = self._file_rows.get(key, 0) + batch.num_rows
        if rows >= self.max_rows_per_file:
            self._writers.pop(key).close()
            self._files.pop(key).close()
            self._full.append(StagedPart(table, date, self._paths.pop(key)))
            del self._file_rows[key]

    def close(self) -> list[StagedPart]:
        """Close every part file; returns them for :func:`publish`."""
        for key, w in self._writers.items():
            w.close()
            self._files[key].close()
        parts = self._full + [StagedPart(table, date, path) for (table, date), path in self._paths.items()]
        self._writers.clear()
        self._files.clear()
        self._paths.clear()
        self._file_rows.clear()
        self._full = []
        return parts

    def commit(self, manifest: dict, more_parts: list[StagedPart] = (), retired: list[str] = ()) -> list[str]:
        """Close, move this writer's parts (and `more_parts`, staged by other writers of the run)
        into place, then publish the manifest (the commit point)."""
        return publish(self.out, self.run_id, self.close() + list(more_parts), manifest, retired)

    def abort(self) -> None:
        for key, w in self._writers.items():
            try:
                w.close()
                self._files[key].close()
            except Exception:  # noqa: BLE001 - best effort while already failing
                pass
        self.loc.rmtree(self.stage)

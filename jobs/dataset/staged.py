"""Write the Parquet dataset so that a reader never sees a half-written run.

Every run writes its part files under ``<out>/_staging/<run_id>/`` and, only when all inputs are
done, moves them into ``<out>/<table>/date=YYYY-MM-DD/`` and then writes the run manifest
``<out>/_runs/<run_id>.json``. A part file whose run has no manifest is an orphan of a crashed
run; :func:`recover` removes such files before the next run writes anything.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

from tailscope import _native
from tailscope.jobs.dataset.storage import join, location

# The column whose UTC day partitions each table (one rule, in the native writer).
TABLES_BY_DATE: dict[str, str] = dict(_native.tables_by_date())
UNPARTITIONED = ("files",)

# Rows after which a part file is closed and the next go to a new one; None: the native
# writer's default (signatures/src/store/mod.rs, MAX_ROWS_PER_FILE). Tests lower it.
MAX_ROWS_PER_FILE: int | None = None


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
    if not loc.remote:
        from tailscope.jobs.dataset import compact

        # a compaction killed after its commit: swap its staged partitions in before its
        # staging is removed below (jobs/dataset/compact.py)
        compact.finish(out)
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
    """Delete the parts a committed run retired (jobs/run/reprocess.py) that are still there: the
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
    """Streams record batches into staged, date-partitioned Parquet files. The files are written
    by the native core on its own thread (signatures/src/store/: encodings, row groups, file
    rotation); a native `Session` given :attr:`native` hands it the packets itself."""

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
        # On object storage the parts are written locally and uploaded when closed.
        self._local = tempfile.mkdtemp(prefix="tailscope-stage-") if self.loc.remote else self.stage
        self.native = _native.PartWriter(self._local, run_id, tag, max_rows_per_file or MAX_ROWS_PER_FILE)
        self._rows: dict[str, int] = {}
        self._parts: list[StagedPart] | None = None

    @property
    def rows(self) -> dict[str, int]:
        """Rows written by table: asked once every batch is in, it closes the writer."""
        self.close()
        return self._rows

    def write(self, table: str, batch) -> None:
        if batch.num_rows:
            self.native.write(table, batch)

    def write_files(self, rows: list[dict]) -> None:
        """The `files` table from its rows (jobs/run/run_model.file_rows)."""
        self.native.write_files(rows)

    def close(self) -> list[StagedPart]:
        """Close every part file; returns them for :func:`publish`."""
        if self._parts is None:
            parts, rows = self.native.close()
            self._rows = dict(rows)
            self._parts = [StagedPart(table, date, self._upload(path)) for table, date, path in parts]
        return self._parts

    def _upload(self, path: str) -> str:
        if not self.loc.remote:
            return path
        dest = join(self.stage, os.path.relpath(path, self._local).replace(os.sep, "/"))
        self.loc.upload(path, dest)
        return dest

    def commit(self, manifest: dict, more_parts: list[StagedPart] = (), retired: list[str] = ()) -> list[str]:
        """Close, move this writer's parts (and `more_parts`, staged by other writers of the run)
        into place, then publish the manifest (the commit point)."""
        parts = self.close() + list(more_parts)
        if self.loc.remote:
            shutil.rmtree(self._local, ignore_errors=True)
        return publish(self.out, self.run_id, parts, manifest, retired)

    def abort(self) -> None:
        try:
            self.native.close()
        except OSError:
            pass  # best effort while already failing
        if self.loc.remote:
            shutil.rmtree(self._local, ignore_errors=True)
        self.loc.rmtree(self.stage)

"""`tailscope compact DATASET`: rewrite a partition's many small part files as few large ones.

A fleet's hourly runs leave one small part per table, day and run (168 a week per table), and one
`files` part per run: every query then opens them all. Compaction rewrites each such partition (a
table's `date=D` directory; the unpartitioned `files` table's directory as a whole) with the
native part writer (signatures/src/store/compact.rs: the runs' encodings, 65,536-row row groups,
the file size limit, rows in their order), in one commit:

1. the new parts of every partition are staged under `_staging/<id>/new/<table>[/date=D]/`;
2. the commit point: the compaction's manifest `_runs/<id>.json` (`kind: compaction`), naming
   every partition it rewrites with the old and new part names, and every capture whose rows the
   new parts hold as `carried_captures` (so `--reprocess` finds them: jobs/run/reprocess.py, and
   the ledger's holders, jobs/dataset/ledger.py). It lists no inputs: the ledger, the prune
   records and the dataset's pseudonymization settings read only inputs, and stay as they were;
3. each staged partition directory is exchanged with the live one in one rename (Linux
   renameat2 RENAME_EXCHANGE): a reader's file listing holds the old parts or the new ones,
   never both (doubled rows) and never neither (missing rows). The old parts, now in staging,
   are deleted with it.
A query that listed a partition's old parts just before its swap and opens one after it fails
with "No such file or directory" naming that part, and gives the compacted dataset's rows when
run again; never a wrong count (as across a prune or a --reprocess, which delete parts too). A
query that already opened the old parts reads on: on a local filesystem a deleted file stays
readable while open, so no grace period would help the first kind or is needed by the second.

A compaction killed after its commit is finished by the next run's or compaction's recovery
(`finish`, called by jobs/dataset/staged.py recover); killed before, its staging is removed.
Datasets on object storage are refused (no atomic swap of a directory's files there), and so is a
filesystem without RENAME_EXCHANGE (NFS): tried on two empty directories before the commit, as a
compaction committed but never swapped in would stop every later run's recovery.

Like `analyze` and `prune`, one writer at a time: a compaction and a run must not overlap (the
automatic compaction after a run, `analyze --compact-over`, runs in the run's process).
"""
from __future__ import annotations

import ctypes
import datetime as dt
import errno
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

# A partition is compacted automatically after a run when it holds more than this many part
# files (`analyze --compact-over N`, 0: never): 24 is a day of hourly runs; below it, opening
# the parts costs less than rewriting them after every run.
COMPACT_OVER = 24

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class CompactError(RuntimeError):
    pass


def exchange(a: Path, b: Path) -> None:
    """Swap two directories atomically (renameat2 RENAME_EXCHANGE, Linux 3.15+)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        raise CompactError("compaction needs renameat2 (Linux): this system cannot swap a partition atomically")
    if fn(_AT_FDCWD, os.fsencode(str(a)), _AT_FDCWD, os.fsencode(str(b)), _RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise CompactError(f"{a} <-> {b}: cannot exchange the directories ({errno.errorcode.get(e, e)}: {os.strerror(e)})")


@dataclass
class Partition:
    table: str
    date: str | None  # None: an unpartitioned table (files)
    parts: list[str]  # part file names in the live directory
    bytes: int = 0


def directory(dataset: Path, table: str, date: str | None) -> Path:
    """A partition's directory: `<table>/date=D`, or `<table>` for the unpartitioned files table."""
    return dataset / table / f"date={date}" if date is not None else dataset / table


@dataclass
class Result:
    run_id: str | None
    partitions: list[Partition] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def candidates(dataset: Path, over: int) -> list[Partition]:
    """The partitions holding more than `over` parts: date partitions on or after the retention
    horizon, and the files table (one part per run; its rows outlive a prune, as the ledger's)."""
    from tailscope.jobs.dataset.prune import horizon_of
    from tailscope.jobs.dataset.staged import TABLES_BY_DATE, UNPARTITIONED

    horizon = horizon_of(dataset)
    dirs = [(table, d.name[len("date="):]) for table in TABLES_BY_DATE for d in sorted((dataset / table).glob("date=*"))
            if d.is_dir() and d.name[len("date="):] >= horizon]
    dirs += [(table, None) for table in UNPARTITIONED if (dataset / table).is_dir()]
    found = []
    for table, day in dirs:
        d = directory(dataset, table, day)
        parts = sorted(p.name for p in d.glob("part-*.parquet"))
        if len(parts) > over:
            found.append(Partition(table, day, parts, sum((d / p).stat().st_size for p in parts)))
    return found


def _can_exchange(scratch: Path) -> None:
    """Raise CompactError unless this filesystem swaps directories (tried on two empty ones)."""
    a, b = scratch / "probe-a", scratch / "probe-b"
    a.mkdir(parents=True)
    b.mkdir()
    try:
        exchange(a, b)
    except CompactError as exc:
        raise CompactError(f"{exc}: compaction needs a filesystem that swaps two directories in one rename "
                           "(renameat2 RENAME_EXCHANGE: ext4, xfs, btrfs, tmpfs; not NFS)") from None
    finally:
        a.rmdir()
        b.rmdir()


def compact(dataset, over: int = 1, log=lambda m: None) -> Result:
    """Compact every partition holding more than `over` parts, in one commit (the module's steps)."""
    from tailscope import _native
    from tailscope.jobs.dataset import staged
    from tailscope.jobs.dataset.storage import is_url
    from tailscope.jobs.run.run_model import new_run_id

    if is_url(dataset):
        raise CompactError(f"{dataset}: compaction works on local datasets only (object storage cannot swap a "
                           "partition's files in one step: a reader would count rows twice or miss them)")
    dataset = Path(dataset).absolute()
    if not (dataset / "_runs").is_dir():
        raise CompactError(f"{dataset}: not a tailscope dataset (no _runs/ directory)")
    staged.recover(dataset)
    todo = candidates(dataset, max(1, over))
    if not todo:
        return Result(None)
    run_id = new_run_id()
    stage = dataset / "_staging" / run_id
    new = stage / "new"
    result = Result(run_id, todo)
    t0 = time.monotonic()
    try:
        captures: set[str] = set()
        entries = []
        _can_exchange(stage)
        for p in todo:
            live = directory(dataset, p.table, p.date)
            outs = _native.compact_parts(str(new), run_id, p.table, [str(live / n) for n in p.parts],
                                         staged.MAX_ROWS_PER_FILE)
            if any(date != p.date for _, date, _ in outs):
                raise CompactError(f"{live}: holds rows of another day; not compacted")
            names = sorted(Path(path).name for _, _, path in outs)
            captures |= _captures([str(live / n) for n in p.parts])
            entries.append({"table": p.table, "date": p.date, "parts": p.parts, "outputs": names})
            result.outputs += [str(directory(Path(), p.table, p.date) / n) for n in names]
        manifest = {
            "run_id": run_id, "kind": "compaction",
            "started": dt.datetime.now(dt.timezone.utc).isoformat(),
            "inputs": [], "compacted": entries, "carried_captures": sorted(captures),
            "outputs": result.outputs, "elapsed_s": round(time.monotonic() - t0, 3),
        }
        (dataset / "_runs").mkdir(exist_ok=True)
        tmp = dataset / "_runs" / f".{run_id}.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2))
        tmp.replace(dataset / "_runs" / f"{run_id}.json")  # the commit point
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        staged.location(dataset).rmdir_if_empty(str(dataset / "_staging"))
        raise
    finish(dataset)
    log(f"compacted {len(todo)} partitions ({sum(len(p.parts) for p in todo)} parts, "
        f"{sum(p.bytes for p in todo) / 2**20:.1f} MiB) into {len(result.outputs)} parts")
    return result


def _captures(paths: list[str]) -> set[str]:
    import duckdb

    con = duckdb.connect()
    try:
        rows = con.execute("SELECT DISTINCT capture_id FROM read_parquet(?, union_by_name=true) WHERE capture_id IS NOT NULL",
                           [paths]).fetchall()
    finally:
        con.close()
    return {r[0] for r in rows}


def finish(dataset: Path) -> list[str]:
    """Swap in the staged partitions of every committed compaction not done yet, then delete the
    old parts. Idempotent: a partition whose staged directory holds the old parts (swapped
    already) is only cleaned up."""
    from tailscope.jobs.dataset.staged import committed_runs

    dataset = Path(dataset)
    done = []
    for run in sorted(committed_runs(dataset)):
        stage = dataset / "_staging" / run
        if not stage.is_dir():
            continue
        try:
            m = json.loads((dataset / "_runs" / f"{run}.json").read_text())
        except (OSError, ValueError):
            continue
        if m.get("kind") != "compaction":
            continue
        for e in m.get("compacted", []):
            live = directory(dataset, e["table"], e["date"])
            new = directory(stage / "new", e["table"], e["date"])
            if new.is_dir() and set(e["outputs"]) <= {p.name for p in new.iterdir()}:
                exchange(new, live)  # `new` now holds the old parts
            done.append(str(live))
        shutil.rmtree(stage, ignore_errors=True)
    try:
        (dataset / "_staging").rmdir()
    except OSError:
        pass
    return done

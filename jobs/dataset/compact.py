"""`tailscope compact DATASET`: rewrite a date partition's many small part files as few large ones.

A fleet's hourly runs leave one small part per table, day and run (168 a week per table): every
query then opens them all. Compaction rewrites each such partition with the native part writer
(signatures/src/store/compact.rs: the runs' encodings, row groups and file size limit, rows in
their order), in one commit:

1. the new parts of every partition are staged under `_staging/<id>/new/<table>/date=D/`;
2. the commit point: the compaction's manifest `_runs/<id>.json` (`kind: compaction`), naming
   every partition it rewrites with the old and new part names, and every capture whose rows the
   new parts hold as `carried_captures` (so `--reprocess` finds them: jobs/run/reprocess.py, and
   the ledger's holders, jobs/dataset/ledger.py). It lists no inputs: the ledger, the prune
   records and the dataset's pseudonymization settings read only inputs, and stay as they were;
3. each staged partition directory is exchanged with the live one in one rename (Linux
   renameat2 RENAME_EXCHANGE): a reader's file listing holds the old parts or the new ones,
   never both (doubled rows) and never neither (missing rows). The old parts, now in staging,
   are deleted with it after a grace period for queries that listed them.
A compaction killed after its commit is finished by the next run's or compaction's recovery
(`finish`, called by jobs/dataset/staged.py recover); killed before, its staging is removed.

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
    date: str
    parts: list[str]  # part file names in the live directory
    bytes: int = 0


@dataclass
class Result:
    run_id: str | None
    partitions: list[Partition] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def candidates(dataset: Path, over: int) -> list[Partition]:
    """The date partitions (on or after the retention horizon) holding more than `over` parts."""
    from tailscope.jobs.dataset.prune import horizon_of
    from tailscope.jobs.dataset.staged import TABLES_BY_DATE

    horizon = horizon_of(dataset)
    found = []
    for table in TABLES_BY_DATE:
        for d in sorted((dataset / table).glob("date=*")):
            day = d.name[len("date="):]
            if not d.is_dir() or day < horizon:
                continue
            parts = sorted(p.name for p in d.glob("part-*.parquet"))
            if len(parts) > over:
                found.append(Partition(table, day, parts, sum((d / p).stat().st_size for p in parts)))
    return found


def compact(dataset, over: int = 1, grace_s: float = 5.0, log=lambda m: None) -> Result:
    """Compact every partition holding more than `over` parts, in one commit (the module's steps)."""
    from tailscope import _native
    from tailscope.jobs.dataset import staged
    from tailscope.jobs.dataset.storage import is_url
    from tailscope.jobs.run.run_model import new_run_id

    if is_url(dataset):
        raise CompactError(f"{dataset}: compaction works on local datasets only")
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
        for p in todo:
            live = dataset / p.table / f"date={p.date}"
            outs = _native.compact_parts(str(new), run_id, p.table, [str(live / n) for n in p.parts],
                                         staged.MAX_ROWS_PER_FILE)
            if any(date != p.date for _, date, _ in outs):
                raise CompactError(f"{live}: holds rows of another day; not compacted")
            names = sorted(Path(path).name for _, _, path in outs)
            captures |= _captures([str(live / n) for n in p.parts])
            entries.append({"table": p.table, "date": p.date, "parts": p.parts, "outputs": names})
            result.outputs += [f"{p.table}/date={p.date}/{n}" for n in names]
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
    finish(dataset, grace_s=grace_s)
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


def finish(dataset: Path, grace_s: float = 0.0) -> list[str]:
    """Swap in the staged partitions of every committed compaction not done yet, then delete the
    old parts (after `grace_s`, for queries that listed them). Idempotent: a partition whose
    staged directory holds the old parts (swapped already) is only cleaned up."""
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
        swapped = False
        for e in m.get("compacted", []):
            live = dataset / e["table"] / f"date={e['date']}"
            new = stage / "new" / e["table"] / f"date={e['date']}"
            if new.is_dir() and set(e["outputs"]) <= {p.name for p in new.iterdir()}:
                exchange(new, live)  # `new` now holds the old parts
                swapped = True
            done.append(str(live))
        if swapped and grace_s > 0:
            time.sleep(grace_s)
        shutil.rmtree(stage, ignore_errors=True)
    try:
        (dataset / "_staging").rmdir()
    except OSError:
        pass
    return done

"""Retention: `tailscope prune DATASET --older-than 30d` removes whole days of data.

A prune has one commit point, the dataset's retention horizon (`_retention.json`, written
atomically): every view of the dataset (jobs/analytics/db.py) shows only the days on or after it, so a
reader sees the dataset before the prune or after it, never a part of it. Then, in order:

1. the inputs whose every packet came before the horizon leave the ledger's inputs (their run
   manifest lists them under `pruned_inputs`: a later run skips them, counted as below the
   horizon, and `--reprocess` analyses them again; jobs/run/admission.py);
2. after a grace period that lets queries already running finish (they listed the old files),
   the date partitions before the horizon are moved out of the tables (one rename each) and
   deleted. A query that listed a table's files just before such a rename fails to open one and
   says so (retrying it gives the new dataset): no query ever counts a half-pruned dataset, as
   the horizon already hides every row of those partitions.

A prune killed after its commit is finished by running it again (every step is idempotent). Data
older than the horizon that a later run analyses stays hidden until the horizon is lowered by
hand (edit or delete `_retention.json`).
"""
from __future__ import annotations

import datetime as dt
import json
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.jobs.dataset.ledger import PROCESSED_STATUSES
from tailscope.jobs.dataset.staged import TABLES_BY_DATE, committed_runs

RETENTION_FILE = "_retention.json"
NO_HORIZON = "0001-01-01"


class PruneError(ValueError):
    pass


def parse_age(text: str) -> dt.timedelta:
    m = re.fullmatch(r"\s*(\d+)\s*([dwh])\s*", text or "")
    if not m or int(m[1]) <= 0:
        raise PruneError(f"--older-than {text!r}: expected a positive number of days, weeks or hours, e.g. 30d, 8w, 36h")
    n, unit = int(m[1]), m[2]
    return {"d": dt.timedelta(days=n), "w": dt.timedelta(weeks=n), "h": dt.timedelta(hours=n)}[unit]


def retention_text(horizon: str, pruned_at: str | None = None) -> str:
    """The horizon file: one JSON document. The views read it with its format and column fixed
    (jobs/analytics/db.py), never sniffed: a sniffing read opens the file twice per query (detection,
    then the read), and across the atomic replace of a prune the two opens could see two
    different files (a CI run failed so: "Malformed JSON ... line 2")."""
    doc = {"horizon": horizon} | ({"pruned_at": pruned_at} if pruned_at else {})
    return json.dumps(doc) + "\n"


def horizon_of(dataset: Path) -> str:
    """The first day the dataset shows (YYYY-MM-DD)."""
    try:
        return json.loads((Path(dataset) / RETENTION_FILE).read_text())["horizon"]
    except FileNotFoundError:
        return NO_HORIZON
    except (OSError, ValueError, KeyError) as exc:
        raise PruneError(f"{Path(dataset) / RETENTION_FILE}: unreadable retention horizon ({exc})") from exc


@dataclass
class Plan:
    horizon: str
    partitions: list[tuple[str, str, Path, int]] = field(default_factory=list)  # table, date, dir, bytes
    inputs: list[tuple[str, str]] = field(default_factory=list)  # run_id, path

    @property
    def bytes(self) -> int:
        return sum(p[3] for p in self.partitions)


def plan(dataset: Path, older_than: dt.timedelta, now: dt.datetime | None = None) -> Plan:
    dataset = Path(dataset)
    if not (dataset / "_runs").is_dir():
        raise PruneError(f"{dataset}: not a tailscope dataset (no _runs/ directory)")
    now = now or dt.datetime.now(dt.timezone.utc)
    # whole days only: the horizon is the first day every moment of which is younger than the age
    cut = (now - older_than).date() + dt.timedelta(days=1)
    horizon = max(cut.isoformat(), horizon_of(dataset))
    p = Plan(horizon)
    for table in TABLES_BY_DATE:
        for d in sorted((dataset / table).glob("date=*")):
            day = d.name[len("date="):]
            if d.is_dir() and day < horizon:
                p.partitions.append((table, day, d, sum(f.stat().st_size for f in d.rglob("*") if f.is_file())))
    cut_ns = int(dt.datetime.fromisoformat(horizon).replace(tzinfo=dt.timezone.utc).timestamp() * 1e9)
    for run in sorted(committed_runs(dataset)):
        m = json.loads((dataset / "_runs" / f"{run}.json").read_text())
        for e in m.get("inputs", []):
            if e.get("status") in PROCESSED_STATUSES and e.get("last_ts_ns") is not None and e["last_ts_ns"] < cut_ns:
                p.inputs.append((m.get("run_id", run), e["path"]))
    return p


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def apply(dataset: Path, p: Plan, grace_s: float = 5.0, log=print) -> None:
    dataset = Path(dataset)
    # 1. the commit point
    _write_atomic(dataset / RETENTION_FILE, retention_text(p.horizon, dt.datetime.now(dt.timezone.utc).isoformat()))
    log(f"horizon {p.horizon}: readers now see the days from {p.horizon} on")
    # 2. the ledger
    gone = {}
    for run, path in p.inputs:
        gone.setdefault(run, set()).add(path)
    for run in sorted(committed_runs(dataset)):
        mpath = dataset / "_runs" / f"{run}.json"
        m = json.loads(mpath.read_text())
        paths = gone.get(m.get("run_id", run))
        if not paths:
            continue
        keep = [e for e in m.get("inputs", []) if e["path"] not in paths]
        m["pruned_inputs"] = m.get("pruned_inputs", []) + [e for e in m.get("inputs", []) if e["path"] in paths]
        m["inputs"] = keep
        _write_atomic(mpath, json.dumps(m, indent=2, default=str))
    # 3. the data, once the queries that listed it are done
    if p.partitions and grace_s > 0:
        time.sleep(grace_s)
    trash = dataset / "_pruned"
    for table, day, d, _ in p.partitions:
        if d.exists():
            (trash / table).mkdir(parents=True, exist_ok=True)
            d.replace(trash / table / d.name)
    shutil.rmtree(trash, ignore_errors=True)
    log(f"removed {len(p.partitions)} partitions ({p.bytes / 2**20:.1f} MiB) and {len(p.inputs)} ledger entries")

"""`tailscope prune`: whole days leave in one commit; a reader sees the dataset before or after."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from support import corpus
from tailscope.jobs.analytics import db
from tailscope.jobs.dataset import ledger, prune
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture()
def dataset(tmp_path) -> Path:
    out = tmp_path / "ds"
    analyze([str(corpus.corpus_dir() / "pcaps")], out, AnalyzeOptions(progress=False))
    return out


def days(out: Path) -> list[str]:
    return sorted({p.name[5:] for p in (out / "packets").glob("date=*")})


def test_dry_run_changes_nothing(dataset):
    before = sorted(p for p in dataset.rglob("*") if p.is_file() and p.name != prune.RETENTION_FILE)
    r = tailscope("prune", dataset, "--older-than", "30d")
    assert r.returncode == 0 and "dry run" in r.stdout and "would remove" in r.stdout
    assert sorted(p for p in dataset.rglob("*") if p.is_file() and p.name != prune.RETENTION_FILE) == before
    assert tailscope("prune", dataset, "--older-than", "soon").returncode == 2


def test_a_reader_sees_the_old_or_the_new_dataset(dataset):
    all_days = days(dataset)
    assert len(all_days) > 4
    middle = all_days[len(all_days) // 2]
    # "now" such that the horizon is the middle day
    now = dt.datetime.fromisoformat(middle).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=29, hours=12)
    plan = prune.plan(dataset, dt.timedelta(days=30), now=now)
    assert plan.horizon == middle and plan.partitions and plan.inputs
    path = db.build(dataset)  # a database built before the prune
    con = duckdb.connect(str(path), read_only=True)
    count = "SELECT (SELECT count(*) FROM packets), (SELECT count(*) FROM flows), (SELECT count(DISTINCT date) FROM packets)"
    old = con.execute(count).fetchone()
    new = con.execute(count.replace("FROM packets", f"FROM packets WHERE date >= DATE '{middle}'")
                      .replace("FROM flows", f"FROM flows WHERE date >= DATE '{middle}'")).fetchone()
    assert new[0] < old[0] and new[2] == len([d for d in all_days if d >= middle])
    seen, errors, done, at_commit = set(), [], threading.Event(), []

    def read():
        c = con.cursor()
        while not done.is_set():
            try:
                seen.add(c.execute(count).fetchone())
            except duckdb.IOException as exc:
                # a query that listed a pruned partition's files just before they moved away
                errors.append(str(exc))

    def at(message):
        # right after the commit point, the old files are all still there, yet readers see the new dataset
        if message.startswith("horizon"):
            at_commit.append((con.cursor().execute(count).fetchone(), all(d.exists() for _, _, d, _ in plan.partitions)))

    t = threading.Thread(target=read)
    t.start()
    try:
        while not seen and t.is_alive():  # the reader has counted the old dataset at least once
            threading.Event().wait(0.01)
        prune.apply(dataset, plan, grace_s=1.0, log=at)
        threading.Event().wait(0.3)
    finally:
        done.set()
        t.join()
    assert at_commit == [(new, True)]
    pruned_days = {f"date={d}" for _, d, _, _ in plan.partitions}
    assert all(any(d in e for d in pruned_days) for e in errors), errors[:3]
    assert seen <= {old, new} and old in seen and new in seen, (old, new, seen)
    assert days(dataset) == [d for d in all_days if d >= middle]
    # the pruned inputs left the ledger: analysing one again reads it
    known = ledger.Ledger(dataset)
    gone = {path for _, path in plan.inputs}
    assert not any(e.path in gone for entries in known.entries.values() for e in entries)


def test_the_cli_prunes_and_stats_follow(dataset):
    r = tailscope("prune", dataset, "--older-than", "1d", "--yes", "--grace", "0")
    assert r.returncode == 0, r.stderr
    assert days(dataset) == []  # the corpus is years old
    s = tailscope("stats", dataset, "--format", "json")
    assert "Traceback" not in s.stderr

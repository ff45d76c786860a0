"""`tailscope compact`: a partition's small parts (a table's day, the files table) rewritten as few
large ones in one commit; rows identical through the views, readers see old or new files (never
both, never neither), and the ledger, --reprocess and prune stay true (jobs/dataset/compact.py).
Object storage and filesystems that cannot swap two directories are refused before any commit."""
from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from support import corpus
from tailscope.jobs.analytics import db
from tailscope.jobs.dataset import compact, ledger, staged
from tailscope.jobs.run.local import AnalyzeOptions, analyze

TABLES = ("packets", "flows", "queries", "events")


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> Path:
    """The corpus in three runs, each writing parts of 200 rows: many parts per partition."""
    out = tmp_path_factory.mktemp("compact") / "ds"
    pcaps = sorted(str(p) for p in (corpus.corpus_dir() / "pcaps").iterdir())
    with pytest.MonkeyPatch.context() as m:
        m.setattr(staged, "MAX_ROWS_PER_FILE", 200)
        for i in range(3):
            analyze(pcaps[i::3], out, AnalyzeOptions(progress=False))
    return out


@pytest.fixture()
def dataset(three_runs, tmp_path) -> Path:
    """A copy of the three runs' dataset for each test (made once: the corpus three times takes ~15 s)."""
    return Path(shutil.copytree(three_runs, tmp_path / "ds"))


def contents(out: Path) -> dict[str, tuple]:
    """Every view's row count and an order-free digest of its rows."""
    con = db.connect(out)
    try:
        return {t: con.execute(f"SELECT count(*), sum(hash(t)) FROM {t} t").fetchone() for t in (*TABLES, "files")}
    finally:
        con.close()


def parts(out: Path) -> int:
    return sum(1 for t in (*TABLES, "files") for _ in (out / t).rglob("part-*.parquet"))


def test_rows_identical_and_parts_fewer(dataset):
    before, n = contents(dataset), parts(dataset)
    assert n > 3 * len(TABLES)  # the fixture made partitions of many parts
    assert len(list((dataset / "files").glob("part-*.parquet"))) == 3  # one per run
    r = tailscope("compact", dataset)
    assert r.returncode == 0, r.stderr
    assert contents(dataset) == before
    assert parts(dataset) < n
    for d in [d for t in TABLES for d in (dataset / t).glob("date=*")] + [dataset / "files"]:
        assert len(list(d.glob("part-*.parquet"))) == 1, d
    assert not (dataset / "_staging").exists()
    # nothing left to do; the ledger and the dataset's settings are the runs'
    assert "nothing to compact" in tailscope("compact", dataset).stdout
    known = ledger.Ledger(dataset)
    assert len(known.by_content) == len({e for es in known.entries.values() for e in es}) > 0
    assert known.settings is not None and known.settings.key_fingerprint is None


def test_a_reader_never_sees_doubled_or_missing_rows(dataset):
    want = contents(dataset)
    seen, bad, retried, stop = [], [], [], threading.Event()

    def read():
        con = db.connect(dataset)
        try:
            while not stop.is_set():
                try:
                    got = con.execute("SELECT count(*), sum(hash(t)) FROM packets t").fetchone()
                except duckdb.IOException as exc:
                    # listed the old parts just before the swap, opened one after: the query
                    # fails and says so (as across a prune); never a wrong count
                    retried.append(str(exc))
                    continue
                (seen if got == want["packets"] else bad).append(got)
        finally:
            con.close()

    t = threading.Thread(target=read)
    t.start()
    try:
        while not seen:
            pass
        compact.compact(dataset, over=1)
        n = len(seen)
        while len(seen) < n + 3 and t.is_alive():
            pass
    finally:
        stop.set()
        t.join()
    assert not bad, bad[:3]
    assert all("No such file" in e for e in retried), retried[:1]
    assert len(seen) > 3


def test_killed_after_its_commit_is_finished_by_recovery(dataset, monkeypatch):
    before, n = contents(dataset), parts(dataset)
    monkeypatch.setattr(compact, "finish", lambda out: [])
    r = compact.compact(dataset, over=1)
    assert r.run_id and parts(dataset) == n and contents(dataset) == before  # committed, not swapped yet
    monkeypatch.undo()
    staged.recover(dataset)  # what the next run or compaction does first
    assert parts(dataset) < n and contents(dataset) == before
    # recovery keeps the compacted parts (their names name the committed compaction)
    staged.recover(dataset)
    assert parts(dataset) < n and contents(dataset) == before
    assert not (dataset / "_staging").exists()


def test_reprocess_and_prune_after_compaction(dataset, tmp_path):
    one = sorted((corpus.corpus_dir() / "pcaps").iterdir())[0]
    before = contents(dataset)
    compact.compact(dataset, over=1)
    staged.recover(dataset)  # a compacted part is no orphan (it was, when its name did not name its run)
    assert contents(dataset) == before
    # --reprocess finds the input's rows in the compacted parts and replaces them: same rows
    r = analyze([str(one)], dataset, AnalyzeOptions(progress=False, reprocess=True))
    assert r.manifest.get("reprocessed") == [str(one)]
    after = contents(dataset)
    for t in TABLES:
        assert after[t][0] == before[t][0], t
    # a rerun still says nothing new
    again = analyze([str(one)], dataset, AnalyzeOptions(progress=False))
    assert again.manifest["totals"]["files"] == 0
    # prune still removes whole days (every day here: the corpus is years old)
    assert tailscope("prune", dataset, "--older-than", "1d", "--yes", "--grace", "0").returncode == 0
    assert contents(dataset)["packets"][0] == 0


def test_object_storage_and_a_filesystem_without_a_swap_are_refused(dataset, tmp_path, monkeypatch):
    """No atomic swap of a directory's files on object storage: one line naming the dataset. A
    filesystem without RENAME_EXCHANGE (NFS) is found on two empty directories before the commit:
    a compaction committed but never swapped in would stop every later run's recovery."""
    r = tailscope("compact", "s3://bucket/ds")
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 1 and line.startswith("tailscope compact: error: s3://bucket/ds: ") and "local datasets only" in line
    # analyze --out keeps a URL a URL (it was a local directory named "s3:"), and names the engine
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(corpus.corpus_dir() / "pcaps"), "--out", "s3://bucket/ds"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    (line,) = r.stderr.strip().splitlines()
    assert r.returncode == 2 and "s3://bucket/ds" in line and "--engine spark" in line
    assert not (tmp_path / "s3:").exists()

    before, n, runs = contents(dataset), parts(dataset), sorted((dataset / "_runs").iterdir())

    def no_exchange(a, b):
        raise compact.CompactError(f"{a} <-> {b}: cannot exchange the directories (EINVAL: Invalid argument)")

    monkeypatch.setattr(compact, "exchange", no_exchange)
    with pytest.raises(compact.CompactError, match="not NFS"):
        compact.compact(dataset, over=1)
    assert sorted((dataset / "_runs").iterdir()) == runs and parts(dataset) == n and contents(dataset) == before
    assert not (dataset / "_staging").exists()

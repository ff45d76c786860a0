"""Re-running `analyze` into the same dataset: skipped by default, replaced with --reprocess,
never counted twice (issue 17: a second run used to double every row)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tailscope.jobs.analytics import db
from tailscope.jobs.dataset import ledger
from tailscope.jobs.dataset.staged import recover
from tailscope.jobs.run.local import AnalyzeOptions, analyze

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TABLES = ("packets", "flows", "queries", "events", "files")


def counts(out: Path) -> dict[str, int]:
    con = duckdb.connect(str(db.build(out)), read_only=True)
    try:
        c = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        c["distinct_flows"] = con.execute("SELECT count(DISTINCT (capture_id, flow_id)) FROM flows").fetchone()[0]
        return c
    finally:
        con.close()


def latest_manifest(out: Path) -> dict:
    # run ids start with the second they began: two runs of one second sort by their random tail
    return max((json.loads(p.read_text()) for p in (out / "_runs").glob("*.json")), key=lambda m: m["started"])


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", "analyze", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("in")
    for name in ("clean.pcap", "tail_loss.pcap"):
        shutil.copy(SAMPLES / name, d / name)
    return d


@pytest.fixture(scope="module")
def once(inputs, tmp_path_factory) -> dict[str, int]:
    out = tmp_path_factory.mktemp("once") / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    c = counts(out)
    assert c["packets"] > 0 and c["flows"] == c["distinct_flows"] > 0 and c["files"] == 2
    return c


def test_twice_is_once_and_says_nothing_new(inputs, once, tmp_path):
    out = tmp_path / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    again = cli(inputs, "--out", out)
    assert again.returncode == 0, again.stderr
    assert again.stdout == "nothing new: 2 inputs already in the dataset\n", "one line, no empty table"
    assert counts(out) == once
    # the dataset did not change, so no run is recorded: a cron re-run adds no manifest
    assert len(list((out / "_runs").glob("*.json"))) == 1


def test_reprocess_replaces_rows(inputs, once, tmp_path):
    out = tmp_path / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    r = cli(inputs, "--out", out, "-q", "--reprocess")
    assert r.returncode == 0, r.stderr
    assert counts(out) == once
    assert len(list((out / "_runs").glob("*.json"))) == 2
    manifest = latest_manifest(out)
    assert sorted(Path(p).name for p in manifest["reprocessed"]) == ["clean.pcap", "tail_loss.pcap"]
    assert manifest["retired"] and not any((out / p).exists() for p in manifest["retired"])


def test_a_renamed_copy_is_the_same_input(inputs, once, tmp_path):
    out = tmp_path / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    copy = tmp_path / "renamed"
    shutil.copytree(inputs, copy)
    for f in copy.iterdir():
        f.rename(f.with_name("copy-" + f.name))
    r = cli(copy, "--out", out)
    assert r.returncode == 0 and "nothing new: 2 inputs" in r.stdout
    assert counts(out) == once


def test_reprocessing_one_capture_keeps_the_others_rows(inputs, once, tmp_path):
    """Both captures share the first run's parts: replacing one carries the other over, and a
    later --reprocess of the other finds its rows where they were carried."""
    out = tmp_path / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    assert cli(inputs / "clean.pcap", "--out", out, "-q", "--reprocess").returncode == 0
    assert counts(out) == once
    latest = latest_manifest(out)
    assert latest["carried_captures"] == [f"{inputs.name}/tail_loss.pcap"]
    assert cli(inputs / "tail_loss.pcap", "--out", out, "-q", "--reprocess").returncode == 0
    assert counts(out) == once


def test_reprocess_takes_whole_captures(tmp_path):
    """Files of one rotation set are one capture: replacing one alone would drop the others."""
    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(SAMPLES / "clean.pcap", d / "trace.pcap0")
    shutil.copy(SAMPLES / "tail_loss.pcap", d / "trace.pcap1")
    out = tmp_path / "ds"
    assert cli(d, "--out", out, "-q").returncode == 0
    r = cli(d / "trace.pcap1", "--out", out, "-q", "--reprocess")
    assert r.returncode == 2 and "also holds" in r.stderr and "trace.pcap0" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_run_killed_after_its_commit_has_its_retirements_finished(inputs, tmp_path):
    out = tmp_path / "ds"
    analyze([str(inputs)], out, AnalyzeOptions(progress=False))
    parts = sorted(p for p in out.rglob("part-*.parquet"))
    # a committed manifest that retired a part still present: the run died before deleting it
    run = next((out / "_runs").glob("*.json"))
    m = json.loads(run.read_text())
    victim = parts[0]
    m["retired"] = [str(victim.relative_to(out))]
    run.write_text(json.dumps(m))
    removed = recover(out)
    assert str(victim) in removed and not victim.exists()


def test_no_incremental_still_appends(inputs, once, tmp_path):
    out = tmp_path / "ds"
    assert cli(inputs, "--out", out, "-q").returncode == 0
    assert cli(inputs, "--out", out, "-q", "--no-incremental").returncode == 0
    assert counts(out)["flows"] == 2 * once["flows"]
    assert len(ledger.Ledger(out).entries) == 2


def test_a_mistyped_input_leaves_no_dataset_directory(tmp_path):
    out = tmp_path / "ds"
    r = cli(tmp_path / "no-such.pcap", "--out", out)
    assert r.returncode == 3 and "no-such.pcap" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists()

"""The ledger of processed inputs (jobs/dataset/ledger.py) and `analyze --incremental` on the local engine."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.jobs.dataset import ledger
from tailscope.jobs.run.local import AnalyzeOptions, analyze

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def run(inputs, out, incremental=True):
    return analyze([str(i) for i in inputs], out, AnalyzeOptions(progress=False, incremental=incremental))


def test_second_run_takes_nothing_and_a_copy_is_the_same_file(tmp_path):
    a = SAMPLES / "clean.pcap"
    first = run([a], tmp_path / "out")
    assert first.manifest["totals"]["files"] == 1
    assert set(ledger.processed(tmp_path / "out").values()) == {first.run_id}
    copy = tmp_path / "elsewhere" / "renamed.pcap"
    copy.parent.mkdir()
    shutil.copy(a, copy)
    again = run([a, copy], tmp_path / "out")
    assert again.manifest["totals"]["files"] == 0
    assert sorted(again.manifest["already_processed"]) == sorted([str(a), str(copy)])
    assert again.manifest["totals"]["files_already_processed"] == 2
    assert "packets" not in again.manifest["totals"]["rows"], "a run that took no input wrote packets"


def test_failed_files_are_retried_partial_ones_are_not(tmp_path):
    good = tmp_path / "in" / "good.pcap"
    good.parent.mkdir()
    shutil.copy(SAMPLES / "clean.pcap", good)
    data = good.read_bytes()
    partial = tmp_path / "in" / "cut.pcap"
    partial.write_bytes(data[: len(data) // 2 + 7])
    broken = tmp_path / "in" / "broken.pcap"
    broken.write_bytes(b"not a capture at all")
    first = run([tmp_path / "in"], tmp_path / "out")
    status = {Path(f.path).name: f.status for f in first.files}
    assert status == {"good.pcap": "ok", "cut.pcap": "partial", "broken.pcap": "failed"}
    again = run([tmp_path / "in"], tmp_path / "out")
    assert [Path(f.path).name for f in again.files] == ["broken.pcap"]


def test_without_incremental_runs_append(tmp_path):
    run([SAMPLES / "clean.pcap"], tmp_path / "out", incremental=False)
    second = run([SAMPLES / "clean.pcap"], tmp_path / "out", incremental=False)
    assert second.manifest["totals"]["files"] == 1


def test_an_unreadable_manifest_is_named(tmp_path):
    run([SAMPLES / "clean.pcap"], tmp_path / "out")
    bad = next((tmp_path / "out" / "_runs").glob("*.json"))
    bad.write_text("{ not json")
    with pytest.raises(ledger.LedgerError, match=str(bad)):
        ledger.processed(tmp_path / "out")
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(SAMPLES / "clean.pcap"), "--out",
                        str(tmp_path / "out"), "--incremental", "-q"], capture_output=True, text=True)
    assert r.returncode == 2 and str(bad) in r.stderr and "unreadable run manifest" in r.stderr

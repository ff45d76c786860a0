"""A table's part file is closed after `staged.MAX_ROWS_PER_FILE` rows and its next rows go to a
new part (an open Parquet writer keeps every row group's metadata until it closes): the parts read
back as the same table, and all of them are committed together."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as ds

from tailscope.jobs.dataset import staged
from tailscope.jobs.run.local import AnalyzeOptions, analyze

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def _rows(out: Path, table: str) -> list[dict]:
    t = ds.dataset(out / table, format="parquet", partitioning="hive").to_table()
    return sorted(t.drop_columns(["file"]).to_pylist(), key=lambda r: (r["frame"], r["flow_id"], str(r["capture_id"])))


def test_parts_roll_over_and_read_back_as_one_table(tmp_path, monkeypatch):
    captures = sorted(str(p) for p in SAMPLES.glob("*.pcap"))
    whole = tmp_path / "whole"
    analyze(captures, whole, AnalyzeOptions(progress=False, capture_id="c"))
    monkeypatch.setattr(staged, "MAX_ROWS_PER_FILE", 500)
    rolled = tmp_path / "rolled"
    run = analyze(captures, rolled, AnalyzeOptions(progress=False, capture_id="c"))

    packets = sorted(rolled.glob("packets/*/*.parquet"))
    assert len(list(whole.glob("packets/*/*.parquet"))) == 1
    assert len(packets) >= 5, "2,809 sample packets in parts of about 500 rows"
    assert len({p.name for p in packets}) == len(packets)
    assert _rows(rolled, "packets") == _rows(whole, "packets")
    manifest = json.loads(sorted((rolled / "_runs").glob("*.json"))[-1].read_text())
    assert manifest["status"] == "ok" and run.manifest["status"] == "ok"
    assert not (rolled / "_staging").exists() or not any((rolled / "_staging").iterdir())

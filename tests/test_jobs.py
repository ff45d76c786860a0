"""`--jobs N`: capture groups analysed in parallel give the dataset one job gives — row for row
once sorted (batches of parallel captures interleave in the part files), the same files table
and the same manifest totals — on the samples and the corpus."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tailscope.jobs.run.local import AnalyzeOptions, analyze
from tests.support import corpus

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
TABLES = ("packets", "flows", "queries", "events", "files")


def _rows(out: Path, table: str) -> list[tuple]:
    files = sorted(str(p) for p in (out / table).rglob("*.parquet"))
    if not files:
        return []
    cols = "* EXCLUDE (run_id)" if table == "files" else "*"
    return duckdb.sql(f"SELECT {cols} FROM read_parquet({files}, hive_partitioning = true) ORDER BY ALL").fetchall()


def _inputs(kind: str) -> list[str]:
    if kind == "samples":
        return [str(p) for p in sorted(SAMPLES.glob("*.pcap"))]
    return [str(corpus.pcap_path(n)) for n in corpus.pcap_names()]


@pytest.mark.parametrize("kind", ["samples", "corpus"])
def test_any_number_of_jobs_gives_the_same_dataset(tmp_path, kind):
    inputs = _inputs(kind)
    runs = {n: analyze(inputs, tmp_path / f"j{n}", AnalyzeOptions(progress=False, jobs=n)) for n in (1, 4)}
    one, four = runs[1].manifest, runs[4].manifest
    assert one["totals"] == four["totals"]
    assert [f["path"] for f in one["inputs"]] == [f["path"] for f in four["inputs"]]
    for table in TABLES:
        a, b = _rows(tmp_path / "j1", table), _rows(tmp_path / "j4", table)
        assert a == b, table
    assert one["totals"]["rows"]["packets"] > 0

"""`analyze --packets all|tagged|none`: the packets table shrinks, every other table stays the
same (issue 15's fleet-scale option)."""
from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from support import corpus
from tailscope.jobs.run.local import AnalyzeOptions, analyze

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def table(ds: Path, name: str):
    path = ds / name
    if not path.is_dir():
        return None
    t = pq.read_table(path)
    return t.sort_by([(c, "ascending") for c in t.column_names if c in ("capture_id", "flow_id", "frame", "query_index", "ts", "signature")])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kept")
    inputs = [str(SAMPLES), str(corpus.corpus_dir() / "pcaps")]
    return {mode: analyze(inputs, tmp / mode, AnalyzeOptions(progress=False, packets=mode)).out for mode in ("all", "tagged", "none")}


def test_other_tables_identical(runs):
    for name in ("flows", "queries", "events"):
        ref = table(runs["all"], name).drop(["run_id"] if "run_id" in table(runs["all"], name).column_names else [])
        for mode in ("tagged", "none"):
            other = table(runs[mode], name)
            assert other.drop(["run_id"] if "run_id" in other.column_names else []).equals(ref), (name, mode)


def test_tagged_keeps_exactly_the_tagged_packets(runs):
    full, tagged = table(runs["all"], "packets"), table(runs["tagged"], "packets")
    want = full.filter(pc.or_(pc.not_equal(full["tags"], 0), pc.is_valid(full["rtt_ns"])))
    assert 0 < tagged.num_rows == want.num_rows < full.num_rows
    assert tagged.select(["capture_id", "frame", "tags", "rtt_ns"]).equals(want.select(["capture_id", "frame", "tags", "rtt_ns"]))
    assert table(runs["none"], "packets") is None

"""Nothing lost: for every run, per file and in total, frames read = decoded + skipped (by reason);
every decoded frame is one packets row and is counted in exactly one flow; every flow started is
one flows row, and a flow ended early by the flow-table limit is there with end_reason 'evicted',
as many as the manifest's flows_evicted. On the corpus, on the corpus through a tiny flow table,
and on the hostile files (tests/support/hostile.py)."""
from __future__ import annotations

import collections

import pytest
from conftest import read_table
from support import corpus, hostile
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def check_accounting(run) -> dict:
    """Assert every equality; returns a few figures for the caller's own checks."""
    m = run.manifest
    t = m["totals"]
    # per file
    for r in m["inputs"]:
        assert r["frames"] == r["decoded"] + sum(r["skipped"].values()), r
        assert all(v > 0 for v in r["skipped"].values()), r
    # per run
    assert t["frames"] == sum(r["frames"] for r in m["inputs"])
    assert t["decoded"] == sum(r["decoded"] for r in m["inputs"])
    assert t["skipped"] == sum(t["skipped_by_reason"].values())
    assert t["frames"] == t["decoded"] + t["skipped"]
    by_reason = collections.Counter()
    for r in m["inputs"]:
        by_reason.update(r["skipped"])
    assert dict(by_reason) == t["skipped_by_reason"]

    # the files table says the same as the manifest
    files = {f["path"]: f for f in read_table(run.out, "files", f"WHERE run_id = '{run.run_id}'")}
    assert len(files) == len(m["inputs"])
    for r in m["inputs"]:
        f = files[r["path"]]
        assert (f["frames"], f["decoded"], f["skipped"], f["status"]) == (
            r["frames"], r["decoded"], sum(r["skipped"].values()), r["status"]), r["path"]
        assert {x["reason"]: x["count"] for x in f["skipped_by_reason"]} == r["skipped"]

    # every decoded frame is one packets row, of its own file
    packets = read_table(run.out, "packets") if t["decoded"] else []
    assert len(packets) == t["decoded"] == t["rows"].get("packets", 0)
    per_file = collections.Counter(p["file"] for p in packets)
    for r in m["inputs"]:
        assert per_file.get(r["path"], 0) == r["decoded"], r["path"]

    # every flow started is one flows row; every packet is counted in exactly one flow
    flows = read_table(run.out, "flows") if t["flows"] else []
    assert len(flows) == t["flows"] == t["rows"].get("flows", 0)
    assert sum(f["c2s_packets"] + f["s2c_packets"] for f in flows) == t["decoded"]
    ids = {f["flow_id"] for f in flows}
    assert not {p["flow_id"] for p in packets} - ids, "packets of a flow that has no row"
    evicted = [f for f in flows if f["end_reason"] == "evicted"]
    assert len(evicted) == t["flows_evicted"]
    return {"flows": len(flows), "evicted": len(evicted), "packets": len(packets)}


def test_corpus(corpus_run):
    got = check_accounting(corpus_run)
    assert got["evicted"] == 0 and got["flows"] > 100
    assert corpus_run.manifest["totals"]["frames"] == sum(r["packets"] for r in corpus.manifest())


def test_corpus_through_a_tiny_flow_table(tmp_path):
    """--max-flows 2: most flows are evicted, and each shows up, marked, with all its packets."""
    run = analyze([str(corpus.corpus_dir() / "pcaps")], tmp_path / "ds",
                  AnalyzeOptions(progress=False, checksums=False, max_flows=2))
    got = check_accounting(run)
    assert got["evicted"] > 100, got
    # evicted flows keep what they saw: none is empty
    flows = read_table(run.out, "flows", "WHERE end_reason = 'evicted'")
    assert all(f["c2s_packets"] + f["s2c_packets"] > 0 for f in flows)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile-accounting")
    hostile.build(d / "in")
    return analyze([str(d / "in"), str(corpus.pcap_path("get.pcap"))], d / "ds",
                   AnalyzeOptions(progress=False, checksums=False))


def test_hostile_files(hostile_run):
    check_accounting(hostile_run)
    assert hostile_run.manifest["totals"]["files_partial"] > 5


def test_hostile_files_through_a_tiny_flow_table(tmp_path):
    d = tmp_path
    hostile.build(d / "in")
    run = analyze([str(d / "in"), str(corpus.pcap_path("get.pcap"))], d / "ds",
                  AnalyzeOptions(progress=False, checksums=False, max_flows=1))
    check_accounting(run)

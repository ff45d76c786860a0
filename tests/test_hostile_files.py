"""Hostile files (tests/support/hostile.py): claimed lengths past the end of the file, zero-length
and giant records and blocks, snaplen 0 and 2^32-1, timestamps going backwards, unknown block
types, link types and interfaces, damaged compression. Each gets a clear per-file error naming
the byte offset, or counted skips; never a crash or a hang; the other files of the same run are
still processed in full.

Truncation at every byte of the corpus captures is test_api.py's; here every prefix of a
generated pcapng holding one block of each kind, in both byte orders.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import corpus, hostile, pcapgen
from tailscope import _native

# A hostile file that hangs the reader fails here instead of hanging the suite.
RUN_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    expect = hostile.build(d / "in")
    good = [corpus.pcap_path("get.pcap"), corpus.pcap_path("pcapng-multi-interface.pcapng")]
    r = subprocess.run(
        [sys.executable, "-m", "tailscope", "analyze", str(d / "in"), *map(str, good),
         "--out", str(d / "ds"), "--json", "--no-checksums"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )
    assert r.stdout, r.stderr
    manifest = json.loads(r.stdout)
    by_name = {rep["path"].rsplit("/", 1)[-1]: rep for rep in manifest["inputs"]}
    return r, manifest, by_name, expect, d / "ds"


def test_every_hostile_file_is_reported(hostile_run):
    r, _manifest, by_name, expect, _ = hostile_run
    assert r.returncode == 1, r.stderr  # some inputs failed, the run finished
    assert "Traceback" not in r.stderr and "panicked" not in r.stderr, r.stderr
    for name, e in expect.items():
        rep = by_name[name]
        where = f"{name}: {rep}"
        assert rep["status"] == e.status, where
        assert rep["error_kind"] != "internal", where  # a Rust panic caught by the binding
        if e.frames >= 0:
            assert (rep["frames"], rep["decoded"]) == (e.frames, e.decoded), where
        assert {k: v for k, v in rep["skipped"].items() if v} == e.skipped, where
        assert rep["ts_backwards"] == e.ts_backwards, where
        if e.status == "ok":
            assert rep["error"] is None, where
            continue
        assert rep["error"].startswith(rep["path"] + ": "), where  # names the file
        if e.error_kind:
            assert rep["error_kind"] == e.error_kind, where
        if e.error_has:
            assert e.error_has in rep["error"], where
        assert isinstance(rep["error_offset"], int), where
        # ... and the CLI says so on stderr
        assert f"tailscope: {rep['error']}" in r.stderr, where


def test_other_files_of_the_run_are_processed_in_full(hostile_run):
    _, manifest, by_name, _, _ = hostile_run
    for name in ("get.pcap", "pcapng-multi-interface.pcapng"):
        rep = by_name[name]
        assert rep["status"] == "ok", rep
        assert rep["frames"] == corpus.manifest_row(name)["packets"], rep
    assert manifest["status"] == "partial"
    t = manifest["totals"]
    assert t["files"] == len(by_name)
    assert t["files_ok"] + t["files_partial"] + t["files_failed"] == t["files"]


def test_timestamps_going_backwards_are_counted_not_reordered(hostile_run):
    _, _, by_name, _, ds = hostile_run
    rep = by_name["time-backwards.pcapng"]
    # first/last are the extremes, whatever the order: a timestamp of 0 (1970) is the first
    assert rep["first_ts_ns"] == 0
    assert rep["last_ts_ns"] == hostile.T0 + 1000 * 1000
    from conftest import read_table

    rows = read_table(ds, "packets", "WHERE file LIKE '%time-backwards.pcapng' ORDER BY frame")
    assert [p["frame"] for p in rows] == [1, 2, 3, 4]  # kept in file order


def _cursor_outcome(data: bytes, path) -> str:
    """Feed ``data`` through a native Session; the outcome, after checking the accounting."""
    path.write_bytes(data)
    session = _native.Session("prefix")
    try:
        cursor = session.open(str(path), "prefix")
    except _native.CaptureFileError as exc:
        assert str(path) in str(exc)
        return "open-error"
    steps = 0
    while not cursor.done:
        session.step(cursor)
        steps += 1
        assert steps < 1000, "no progress"
    session.finish()
    st = cursor.stats()
    assert st["frames"] == st["decoded"] + sum(st["skipped"].values())
    assert st["error_kind"] != "internal", st["error"]
    return st["error_kind"] or "ok"


@pytest.mark.parametrize("big_endian", [False, True], ids=["le", "be"])
def test_every_prefix_of_a_pcapng_with_every_block_kind(tmp_path, big_endian):
    data = hostile.every_block_kind(big_endian)
    f = tmp_path / "cut.pcapng"
    outcomes = {n: _cursor_outcome(data[:n], f) for n in range(len(data) + 1)}
    assert outcomes[len(data)] == "ok"
    assert set(outcomes.values()) <= {"ok", "open-error", "truncated", "empty"}, {
        n: o for n, o in outcomes.items() if o not in ("ok", "open-error", "truncated", "empty")
    }
    session = _native.Session("whole")
    f.write_bytes(data)
    c = session.open(str(f), "whole")
    while not c.done:
        session.step(c)
    st = c.stats()
    # EPB, SPB, EPB on the raw-IP interface, EPB: four frames, every one decoded
    assert (st["frames"], st["decoded"], st["linktypes"]) == (4, 4, [1, 101])


def test_every_prefix_of_a_big_endian_nanosecond_pcap(tmp_path):
    fr = hostile.frames(3)
    data = pcapgen.pcap_bytes([(hostile.T0 + i * 7, f) for i, f in enumerate(fr)], nanosecond=True, big_endian=True)
    f = tmp_path / "cut.pcap"
    outcomes = {n: _cursor_outcome(data[:n], f) for n in range(len(data) + 1)}
    assert outcomes[len(data)] == "ok"
    assert set(outcomes.values()) <= {"ok", "open-error", "truncated"}

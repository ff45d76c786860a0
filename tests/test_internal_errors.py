"""A bug of ours (a Rust panic) at any entry point of the native core reaches Python as an error
naming the file or capture and saying 'internal error' — never pyo3's PanicException, never an
abort — and a run goes on, accounting for what it lost. The panics are forced through a test hook
(`_native._force_panic`): the next call of the named entry point panics inside its guard."""
from __future__ import annotations

import json

import pytest

from support import pcapgen
from tailscope import _native
from tailscope.jobs.run.local import AnalyzeOptions, analyze


@pytest.fixture
def trace(tmp_path):
    return pcapgen.write_chatty_flow(tmp_path / "chatty.pcap", 20)


@pytest.fixture(autouse=True)
def disarm():
    yield
    _native._force_panic("")


def _read(session, cursor):
    while not cursor.done:
        session.step(cursor)


def test_step_reports_the_file_failed(trace):
    session = _native.Session("cap")
    cursor = session.open(str(trace), "chatty")
    _native._force_panic("step")
    _read(session, cursor)
    st = cursor.stats()
    assert st["error_kind"] == "internal" and "internal error" in st["error"] and "forced panic" in st["error"]


@pytest.mark.parametrize("point", ["flush", "finish"])
def test_flush_and_finish_raise_naming_the_capture(trace, point):
    session = _native.Session("cap-7")
    _read(session, session.open(str(trace), "chatty"))
    _native._force_panic(point)
    with pytest.raises(_native.InternalError, match=r"capture cap-7: internal error while .*forced panic") as exc:
        getattr(session, point)()
    assert type(exc.value).__name__ == "InternalError"  # not pyo3's PanicException (a BaseException)
    # the hook fired once: the session still answers
    session.finish()


def test_open_and_probe_raise_naming_the_file(trace):
    _native._force_panic("open")
    with pytest.raises(_native.InternalError, match=rf"{trace}: internal error while opening it: .*forced panic"):
        _native.Session("cap").open(str(trace), "chatty")
    _native._force_panic("probe")
    with pytest.raises(_native.InternalError, match=rf"{trace}: internal error while probing it: .*forced panic"):
        _native.probe(str(trace))
    assert _native.probe(str(trace))["format"] == "pcap"


@pytest.mark.parametrize("point", ["probe", "open", "step", "flush", "finish"])
def test_a_run_goes_on_and_accounts_for_it(trace, tmp_path, point):
    (tmp_path / "other").mkdir()
    other = pcapgen.write_chatty_flow(tmp_path / "other" / "other.pcap", 5)  # another capture
    _native._force_panic(point)
    # one job: the hook is process-wide, so with captures in parallel it would fire in whichever
    # capture reaches the point first (the parallel case is the test below)
    res = analyze([str(trace), str(other)], tmp_path / "ds", AnalyzeOptions(progress=False, jobs=1))
    by_path = {f["path"]: f for f in res.manifest["inputs"]}
    hit = by_path[str(trace)]
    assert hit["error_kind"] == "internal" and "internal error" in hit["error"], hit
    # the hooked step is the file's first: nothing was read before it
    assert hit["status"] == ("failed" if point in ("probe", "open", "step") else "partial")
    assert by_path[str(other)]["status"] == "ok"
    assert res.manifest["status"] == "partial"
    json.dumps(res.manifest)


@pytest.mark.parametrize("point", ["step", "finish"])
def test_a_parallel_run_loses_only_the_capture_that_failed(trace, tmp_path, point):
    (tmp_path / "other").mkdir()
    other = pcapgen.write_chatty_flow(tmp_path / "other" / "other.pcap", 5)
    _native._force_panic(point)
    res = analyze([str(trace), str(other)], tmp_path / "ds", AnalyzeOptions(progress=False, jobs=2))
    inputs = res.manifest["inputs"]
    hit = [f for f in inputs if f["error_kind"] == "internal"]
    assert len(hit) == 1 and "internal error" in hit[0]["error"], inputs
    assert [f["status"] for f in inputs if f is not hit[0]] == ["ok"]
    assert res.manifest["status"] == "partial"

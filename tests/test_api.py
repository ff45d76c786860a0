"""The Python API: Arrow batches out of the core, and hostile input never crashes it."""
from __future__ import annotations

import threading
import time

import pytest

from support import corpus, pcapgen
from tailscope import _native
from tailscope import api


def test_tables_from_a_capture():
    t = api.tables([corpus.pcap_path("tls1.2.pcap")])
    assert t["packets"].num_rows == corpus.manifest_row("tls1.2.pcap")["packets"]
    assert t["flows"].num_rows == 1
    assert t["packets"].schema.equals(_native.packet_schema())
    assert isinstance(t["flows"].column("community_id")[0].as_py(), str)


def test_community_id_function_matches_spec_vector():
    assert _native.community_id("1.2.3.4", 1122, "5.6.7.8", 3344, 6) == "1:wCb3OG7yAFWelaUydu0D+125CLM="
    assert _native.community_id("5.6.7.8", 3344, "1.2.3.4", 1122, 17, seed=1) == "1:OShq+iKDAMVouh/4bMxB9Sz4amw="
    with pytest.raises(ValueError):
        _native.community_id("not-an-ip", 1, "1.2.3.4", 2, 6)


def test_not_a_capture_raises_naming_the_file(tmp_path):
    f = tmp_path / "x.pcap"
    f.write_text("hello")
    with pytest.raises(api.CaptureFileError, match=str(f)):
        list(api.batches([f]))


def _prefixes_decode_cleanly(data: bytes, tmp_path):
    f = tmp_path / "cut"
    outcomes = set()
    for n in range(len(data) + 1):
        f.write_bytes(data[:n])
        session = _native.Session("t")
        try:
            cursor = session.open(str(f), "cut")
        except _native.CaptureFileError as exc:
            outcomes.add("open-error")
            assert str(f) in str(exc)
            continue
        steps = 0
        while not cursor.done:
            session.step(cursor)
            steps += 1
            assert steps < 1000, f"no progress at prefix {n}"
        session.finish()
        st = cursor.stats()
        assert st["frames"] == st["decoded"] + sum(st["skipped"].values()), n
        assert st["error_kind"] != "internal", (n, st["error"])
        outcomes.add(st["error_kind"] or "ok")
    return outcomes


@pytest.mark.parametrize("name", ["get.pcap", "pcapng-multi-interface.pcapng"])
def test_truncation_at_every_byte(name, tmp_path):
    """Every prefix of a small capture is a clean error or a partial read, never a crash or a
    hang, and the accounting always balances."""
    outcomes = _prefixes_decode_cleanly(corpus.pcap_path(name).read_bytes(), tmp_path)
    assert "ok" in outcomes and ("truncated" in outcomes or "open-error" in outcomes)


def test_decoding_releases_the_gil(tmp_path):
    frame = pcapgen.ethernet(pcapgen.ipv4("198.18.0.1", "198.18.0.2", 6, pcapgen.tcp(40000, 443, 1, 1, flags=0x10, payload=b"x" * 100)))
    f = pcapgen.write_pcap(tmp_path / "big.pcap", [(i * 1000, frame) for i in range(300_000)])
    session = _native.Session("gil", batch_rows=1_000_000)
    cursor = session.open(str(f), "big")
    ticks = 0
    stop = False

    def spin():
        nonlocal ticks
        while not stop:
            ticks += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    try:
        before = ticks
        t0 = time.perf_counter()
        session.step(cursor, max_frames=10_000_000)  # one call decodes the whole file
        elapsed = time.perf_counter() - t0
        during = ticks - before
    finally:
        stop = True
        t.join()
    # Had the call held the GIL, the other thread could not have run a single bytecode in it.
    assert elapsed > 0.01 and during > 10_000, (elapsed, during)
    assert cursor.stats()["frames"] == 300_000

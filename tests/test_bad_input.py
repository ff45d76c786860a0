"""Bad input: a clear error naming the file and what is wrong, the other files still processed,
and nothing partial left looking complete."""
from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest

from conftest import read_table
from support import corpus, pcapgen
from tailscope.jobs.dataset import staged
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=300, cwd=cwd)


@pytest.fixture
def good(tmp_path):
    return corpus.pcap_path("get.pcap")


def test_missing_path_named_and_others_processed(tmp_path, good):
    r = cli("analyze", str(good), str(tmp_path / "nope.pcap"), "--out", str(tmp_path / "ds"), "-q")
    assert r.returncode == 1
    assert "nope.pcap: no such file or directory" in r.stderr
    assert len(read_table(tmp_path / "ds", "flows")) == 1


def test_only_bad_inputs_exit_3(tmp_path):
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    text = tmp_path / "notes.pcap"
    text.write_text("this is not a capture\n")
    r = cli("analyze", str(empty), str(text), "--out", str(tmp_path / "ds"), "-q")
    assert r.returncode == 3
    assert f"{empty}: empty file (0 bytes)" in r.stderr
    assert f"{text}: not a pcap or pcapng file" in r.stderr


def test_truncated_file_is_partial_with_offset(tmp_path, good):
    data = good.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[: len(data) - 30])  # inside the last record
    run = analyze([str(cut), str(corpus.pcap_path("tls1.2.pcap"))], tmp_path / "ds", AnalyzeOptions(progress=False))
    by = {r.path.split("/")[-1]: r for r in run.files}
    r = by["cut.pcap"]
    assert r.status == "partial" and r.error_kind == "truncated"
    assert r.frames == 13 and r.decoded == 13
    # The offset names the start of the record that was cut (the 14th).
    pos = 24
    for _ in range(13):
        pos += 16 + struct.unpack_from("<I", data, pos + 8)[0]
    assert r.error_offset == pos and f"byte {pos}" in r.error
    assert by["tls1.2.pcap"].status == "ok"
    assert run.manifest["status"] == "partial"
    files = {f["path"].split("/")[-1]: f for f in read_table(run.out, "files")}
    assert files["cut.pcap"]["status"] == "partial" and files["tls1.2.pcap"]["status"] == "ok"


@pytest.mark.parametrize("claimed", [0xFFFFFFFF, 200 << 20])
def test_giant_record_length_is_an_error_not_an_allocation(tmp_path, claimed):
    frame = pcapgen.ethernet(pcapgen.ipv4("198.18.0.1", "198.18.0.2", 6, pcapgen.tcp(1, 2, 3)))
    f = pcapgen.write_pcap(tmp_path / "t.pcap", [(10**9, frame), (2 * 10**9, frame)])
    data = bytearray(f.read_bytes())
    second = 24 + 16 + len(frame)
    struct.pack_into("<I", data, second + 8, claimed)
    f.write_bytes(bytes(data) + b"\0" * 64)
    run = analyze([str(f)], tmp_path / "ds", AnalyzeOptions(progress=False))
    r = run.files[0]
    assert r.frames == 1 and r.status == "partial"
    assert r.error_offset == second
    assert r.error_kind in ("record_too_large", "truncated", "corrupt")


def test_failed_run_leaves_nothing_that_looks_complete(tmp_path, good, monkeypatch):
    out = tmp_path / "ds"

    def boom(self, manifest, **_):
        raise RuntimeError("disk full (simulated)")

    monkeypatch.setattr(staged.StagedWriter, "commit", boom)
    with pytest.raises(RuntimeError):
        analyze([str(good)], out, AnalyzeOptions(progress=False))
    assert not list(out.glob("packets/**/*.parquet")) and not (out / "_runs").exists()
    monkeypatch.undo()
    run = analyze([str(good)], out, AnalyzeOptions(progress=False))
    assert run.manifest["status"] == "ok"
    assert len(read_table(out, "flows")) == 1


def test_orphans_of_a_crashed_commit_are_removed(tmp_path, good):
    out = tmp_path / "ds"
    analyze([str(good)], out, AnalyzeOptions(progress=False))
    orphan = out / "flows" / "date=2001-01-01" / "part-19990101T000000Z-dead00-00000.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"PAR1")
    run = analyze([str(good)], out, AnalyzeOptions(progress=False))
    assert str(orphan) in run.manifest["recovered_leftovers"]
    assert not orphan.exists()
    manifests = sorted((out / "_runs").glob("*.json"))
    assert len(manifests) == 2 and json.loads(manifests[-1].read_text())["status"] == "ok"


def test_directory_without_captures(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "readme.txt").write_text("hi")
    r = cli("analyze", str(d), "--out", str(tmp_path / "ds"), "-q")
    assert r.returncode == 3 and "holds no capture files" in r.stderr


def test_bad_option_values(tmp_path, good):
    r = cli("analyze", str(good), "--out", str(tmp_path / "ds"), "--max-flows", "0")
    assert r.returncode == 2 and "--max-flows must be positive" in r.stderr
    f = tmp_path / "file"
    f.write_text("x")
    r = cli("analyze", str(good), "--out", str(f))
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_db_on_a_non_dataset(tmp_path):
    r = cli("db", str(tmp_path))
    assert r.returncode == 2 and "not a tailscope dataset" in r.stderr

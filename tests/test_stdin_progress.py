"""`analyze -` reads a capture from standard input (plain or compressed; known by its sha256 as a
file is, issue 30), and progress over a compressed file follows the compressed bytes read (issue 17)."""
from __future__ import annotations

import gzip
import hashlib
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tailscope import _native

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def analyze(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", "analyze", *map(str, args)], input=stdin,
                          capture_output=True, timeout=120)


def rows(ds: Path, table: str, cols: list[str]) -> list[dict]:
    return pq.read_table(ds / table, columns=cols).sort_by([(c, "ascending") for c in cols]).to_pylist()


def test_stdin_gives_the_rows_of_the_file(tmp_path):
    pcap = SAMPLES / "tail_loss.pcap"
    assert analyze(pcap, "--out", tmp_path / "file", "-q").returncode == 0
    for name, data in (("plain", pcap.read_bytes()), ("gzip", gzip.compress(pcap.read_bytes()))):
        r = analyze("-", "--out", tmp_path / name, "-q", stdin=data)
        assert r.returncode == 0, r.stderr
        for table, cols in (("packets", ["frame", "ts", "seq", "tags"]), ("flows", ["client_port", "start", "rtt_p50_ns", "c2s_retx_packets", "s2c_retx_packets"])):
            assert rows(tmp_path / name, table, cols) == rows(tmp_path / "file", table, cols), (name, table)
        files = pq.read_table(tmp_path / name / "files").to_pylist()
        assert files[0]["path"] == "<stdin>" and files[0]["sha256"] == hashlib.sha256(data).hexdigest()
        assert files[0]["size"] == len(data) and files[0]["compression"] == ("gzip" if name == "gzip" else "none")


def test_stdin_twice_is_read_once_and_a_terminal_is_refused(tmp_path):
    data = (SAMPLES / "clean.pcap").read_bytes()
    assert analyze("-", "--out", tmp_path / "ds", "-q", stdin=data).returncode == 0
    again = analyze("-", "--out", tmp_path / "ds", stdin=data)
    assert again.returncode == 0 and b"nothing new: 1 inputs already in the dataset" in again.stdout
    bad = analyze("-", "--out", tmp_path / "x", stdin=b"not a capture")
    assert bad.returncode == 3 and b"<stdin>" in bad.stderr and b"Traceback" not in bad.stderr


def test_progress_follows_the_compressed_bytes(tmp_path):
    raw = (SAMPLES / "bufferbloat.pcap").read_bytes()
    gz = tmp_path / "b.pcap.gz"
    gz.write_bytes(gzip.compress(raw))
    session = _native.Session("p")
    cursor = session.open(str(gz), "b")
    while not cursor.done:
        session.step(cursor)
    assert cursor.offset == len(raw)  # the decompressed stream
    assert cursor.input_offset == gz.stat().st_size  # what progress measures against the file size


def test_the_progress_line_left_on_a_terminal_says_the_end():
    import io

    from tailscope.jobs.run.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    p = Progress(1000, 2, stream=out)
    p.update("a.pcap", 158, 10, force=True)
    p.file_done(500, 40, "a.pcap")
    p.file_done(500, 60, "b.pcap")
    p.close()
    last = out.getvalue().split("\r")[-1]
    assert last.rstrip().endswith("done") and "100.0%" in last and "2/2 files" in last and "100 pkts" in last
    quiet = Tty()
    Progress(1000, 1, stream=quiet).close()
    assert quiet.getvalue() == "", "no line drawn, none left"

"""Nothing counted twice, nothing skipped without a word (issue 30, items 1-5): each way a second
run could add the rows of an input the dataset holds, or leave part of one out silently, either
does the right thing or stops with one line; the rows are counted in DuckDB each time."""
from __future__ import annotations

import datetime as dt
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from support import corpus
from tailscope.jobs.analytics import db
from tailscope.jobs.dataset import prune

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
TABLES = ("packets", "flows", "files")


def counts(out: Path) -> dict[str, int]:
    """Rows in the dataset's DuckDB views, and rows in its Parquet parts whatever the views show."""
    con = duckdb.connect(str(db.build(out)), read_only=True)
    try:
        c = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        c["distinct_flows"] = con.execute("SELECT count(DISTINCT (capture_id, flow_id)) FROM flows").fetchone()[0]
    finally:
        con.close()
    parts = list((out / "packets").rglob("*.parquet"))
    c["packets_in_parquet"] = sql(f"SELECT count(*) FROM read_parquet({[str(p) for p in parts]})")[0][0] if parts else 0
    return c


def sql(query: str) -> list[tuple]:
    con = duckdb.connect()
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def cli(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", *map(str, args)], input=stdin,
                       capture_output=True, timeout=300)
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    assert "Traceback" not in r.stderr, r.stderr
    return r


def one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture(scope="module")
def wikipedia() -> Path:
    return corpus.pcap_path("wikipedia.pcap")


@pytest.fixture(scope="module")
def whole(wikipedia, tmp_path_factory) -> dict[str, int]:
    """The rows of wikipedia.pcap analysed once, from its file."""
    out = tmp_path_factory.mktemp("whole") / "ds"
    assert cli(wikipedia, "--out", out, "-q").returncode == 0
    c = counts(out)
    (decoded,) = sql(f"SELECT decoded FROM read_parquet('{out}/files/*.parquet')")
    assert c["packets"] == decoded[0] == c["packets_in_parquet"] > 100
    assert c["flows"] == c["distinct_flows"] > 0
    return c


# 1. the same capture streamed on standard input twice
def test_stdin_twice_is_once(wikipedia, whole, tmp_path):
    out, data = tmp_path / "ds", wikipedia.read_bytes()
    first = cli("-", "--out", out, "-q", stdin=data)
    assert first.returncode == 0, first.stderr
    assert counts(out) == whole
    again = cli("-", "--out", out, stdin=data)
    assert again.returncode == 0, again.stderr
    assert "nothing new: 1 inputs already in the dataset" in again.stdout
    as_file = cli(wikipedia, "--out", out)  # the stream's content is the file's: known by its sha256
    assert as_file.returncode == 0 and "nothing new" in as_file.stdout
    assert counts(out) == whole
    (row,) = sql(f"SELECT path, capture_id, format, size, sha256 FROM read_parquet('{out}/files/*.parquet')")
    assert row[0] == "<stdin>" and row[1].startswith("stdin-") and row[2] == "pcap" and row[3] == len(data)
    assert row[4] == __import__("hashlib").sha256(data).hexdigest()
    assert not (out / "_staging").exists(), "the spooled stream is removed"


def record_ends(pcap: bytes) -> list[int]:
    """Byte offsets where each record of a little-endian classic pcap ends."""
    ends, off = [], 24
    while off + 16 <= len(pcap):
        off += 16 + struct.unpack_from("<I", pcap, off + 8)[0]
        ends.append(off)
    return ends


# 2. a capture analysed while tcpdump was still writing it, then whole
@pytest.mark.parametrize("cut", ["mid_record", "record_boundary"])
def test_a_capture_that_grew_is_refused_then_replaced(wikipedia, whole, tmp_path, cut):
    data = wikipedia.read_bytes()
    end = record_ends(data)[40]
    prefix = data[: end + 7] if cut == "mid_record" else data[:end]
    path = tmp_path / "landing" / "trace.pcap"
    path.parent.mkdir()
    path.write_bytes(prefix)
    out = tmp_path / "ds"
    first = cli(path.parent, "--out", out, "-q")
    assert first.returncode == (1 if cut == "mid_record" else 0), first.stderr
    before = counts(out)
    assert 0 < before["packets"] < whole["packets"]
    path.write_bytes(data)
    grown = cli(path.parent, "--out", out, "-q")
    assert grown.returncode == 3, grown.stderr  # its only input refused: nothing read
    line = one_line(grown.stderr)
    assert "grew since run" in line and "--reprocess" in line and str(path) in line
    assert counts(out) == {**before, "files": before["files"] + 1}  # the refusal's row in `files`, no data
    again = cli(path.parent, "--out", out, "-q", "--reprocess")
    assert again.returncode == 0, again.stderr
    after = counts(out)
    assert {k: after[k] for k in ("packets", "flows", "distinct_flows", "packets_in_parquet")} == \
           {k: whole[k] for k in ("packets", "flows", "distinct_flows", "packets_in_parquet")}


# 3. another window or filter over an input the dataset holds
def test_a_wider_window_over_a_held_input_is_refused(wikipedia, whole, tmp_path):
    out = tmp_path / "ds"
    since = "2011-03-18T19:06:08Z"  # within the capture: some frames before it
    assert cli(wikipedia, "--out", out, "-q", "--since", since).returncode == 0
    part = counts(out)
    assert 0 < part["packets"] < whole["packets"]
    wider = cli(wikipedia, "--out", out, "-q")
    assert wider.returncode == 3
    line = one_line(wider.stderr)
    assert "took frames in [2011-03-18T19:06:08Z, -) only" in line and "--reprocess" in line
    assert counts(out)["packets"] == part["packets"]
    narrower = cli(wikipedia, "--out", out, "--since", "2011-03-18T19:06:09Z")
    assert narrower.returncode == 0 and "nothing new: 1 inputs already in the dataset" in narrower.stdout
    assert cli(wikipedia, "--out", out, "-q", "--reprocess").returncode == 0
    assert counts(out)["packets"] == whole["packets"]


def test_another_filter_is_refused(wikipedia, tmp_path):
    out = tmp_path / "ds"
    assert cli(wikipedia, "--out", out, "-q", "--filter", "tcp port 80").returncode == 0
    filtered = counts(out)
    for other in (["--filter", "udp"], []):
        r = cli(wikipedia, "--out", out, "-q", *other)
        assert r.returncode == 2
        assert "--filter 'tcp port 80'" in one_line(r.stderr) and "another --out" in r.stderr
    assert counts(out) == filtered


# 4. prune, then the usual re-run of the landing directory
def test_a_pruned_input_is_not_read_again(wikipedia, tmp_path):
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copy(wikipedia, landing / "old.pcap")
    out = tmp_path / "ds"
    assert cli(landing, "--out", out, "-q").returncode == 0
    assert counts(out)["packets_in_parquet"] > 0
    prune.apply(out, prune.plan(out, dt.timedelta(days=30)), grace_s=0, log=lambda _: None)
    assert counts(out)["packets_in_parquet"] == 0
    shutil.copy(SAMPLES / "clean.pcap", landing / "new.pcap")  # (dated 2026: above the horizon)
    again = cli(landing, "--out", out)
    assert again.returncode == 0, again.stderr
    assert "skipped 1 inputs below the retention horizon" in again.stderr
    c = counts(out)
    assert c["packets"] == c["packets_in_parquet"] > 0, "only new.pcap's rows"
    paths = sql(f"SELECT path FROM read_parquet('{out}/files/*.parquet') WHERE path LIKE '%old.pcap'")
    assert len(paths) == 1, "old.pcap is not read a second time"
    alone = cli(landing / "old.pcap", "--out", out)
    assert alone.returncode == 0 and "nothing new: 1 inputs below the retention horizon" in alone.stdout
    assert counts(out) == c


# 5. pseudonymized and plain client addresses in one dataset
def test_pseudonymization_is_not_mixed(tmp_path):
    keys = []
    for i in range(2):
        k = tmp_path / f"key{i}.hex"
        k.write_text(bytes(range(i, i + 32)).hex() + "\n")
        k.chmod(0o600)
        keys.append(k)
    pcap, other = SAMPLES / "clean.pcap", SAMPLES / "tail_loss.pcap"
    pseudo, plain = tmp_path / "pseudo", tmp_path / "plain"
    assert cli(pcap, "--out", pseudo, "-q", "--pseudonymize-clients", keys[0]).returncode == 0
    assert cli(pcap, "--out", plain, "-q").returncode == 0
    held = {d: counts(d) for d in (pseudo, plain)}
    for out, extra, why in ((pseudo, [], "would store real client addresses"),
                            (pseudo, ["--pseudonymize-clients", keys[1]], "pseudonymizes with key"),
                            (plain, ["--pseudonymize-clients", keys[0]], "are not pseudonymized")):
        r = cli(other, "--out", out, "-q", *extra)
        assert r.returncode == 2, r.stderr
        assert why in one_line(r.stderr) and "another --out" in r.stderr
    same = cli(other, "--out", pseudo, "-q", "--pseudonymize-clients", keys[0])
    assert same.returncode == 0, same.stderr
    assert counts(pseudo)["flows"] > held[pseudo]["flows"]
    assert counts(plain) == held[plain]

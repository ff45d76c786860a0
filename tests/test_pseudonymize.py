"""`analyze --pseudonymize-clients`: no real client address anywhere in the dataset, while the
enrichment (which reads the real address) and the statistics are those of a plain run."""
from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from tailscope.jobs.analytics import db
from tailscope.jobs.analytics.stats import compute_stats
from tailscope.jobs.enrichment.pseudonymize import PseudonymKeyError, Pseudonymizer, fingerprint, load_key

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "enrichment"
SAMPLES = ROOT / "samples"
INPUTS = [SAMPLES / "mobile_mixed.pcap", SAMPLES / "clean.pcap", SAMPLES / "clean_ipv6.pcap"]
KEY = bytes(range(100, 132))


def analyze(out: Path, *extra) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "tailscope", "analyze", *map(str, INPUTS), "--out", str(out), "-q",
            "--prefixes", str(FIXTURE / "prefixes.csv"), "--sessions", str(FIXTURE / "sessions.csv"),
            "--regions", str(FIXTURE / "regions.csv"), *map(str, extra)]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("pseudo")
    key = tmp / "key.hex"
    key.write_text(KEY.hex() + "\n")
    key.chmod(0o600)
    plain, pseudo = tmp / "plain", tmp / "pseudo"
    assert analyze(plain).returncode == 0
    r = analyze(pseudo, "--pseudonymize-clients", key)
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    return plain, pseudo, key


def real_clients(plain: Path) -> set[str]:
    flows = pq.read_table(plain / "flows", columns=["client_ip"])
    clients = {c for c in flows.column("client_ip").to_pylist() if c}
    assert len(clients) >= 2 and any(":" in c for c in clients)
    return clients


def every_string(value, into: list) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            every_string(v, into)
    elif isinstance(value, (list, tuple)):
        for v in value:
            every_string(v, into)


def spellings(addr: str) -> set[str]:
    a = ipaddress.ip_address(addr)
    return {str(a), a.exploded} if a.version == 6 else {str(a)}


def test_no_real_client_address_in_any_parquet_column(runs):
    plain, pseudo, _ = runs
    forbidden = set().union(*(spellings(c) for c in real_clients(plain)))
    seen: list[str] = []
    for part in sorted(pseudo.rglob("*.parquet")):
        for row in pq.read_table(part).to_pylist():
            every_string(row, seen)
    assert seen
    leaks = {s for s in seen if any(f in s for f in forbidden)}
    assert not leaks, sorted(leaks)[:5]


def test_no_real_client_address_in_the_duckdb_views(runs):
    plain, pseudo, _ = runs
    forbidden = set().union(*(spellings(c) for c in real_clients(plain)))
    con = duckdb.connect(str(db.build(pseudo)), read_only=True)
    try:
        views = [r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()]
        assert "flows" in views and "mart_week" in views
        for v in views:
            text = con.execute(f'SELECT CAST(list(to_json(t)) AS VARCHAR) FROM "{v}" AS t').fetchone()[0] or ""
            assert not any(f in text for f in forbidden), v
    finally:
        con.close()


def test_enrichment_and_stats_are_those_of_a_plain_run(runs):
    plain, pseudo, _ = runs
    cols = ["flow_id", "carrier", "asn", "network_type", "h3_cell", "region", "server_ip", "server_port", "rtt_p50_ns"]
    a = pq.read_table(plain / "flows", columns=cols).sort_by("flow_id").to_pylist()
    b = pq.read_table(pseudo / "flows", columns=cols).sort_by("flow_id").to_pylist()
    assert a == b and any(r["carrier"] not in (None, "unknown") for r in a) and any(r["h3_cell"] for r in a)
    assert compute_stats(plain) == compute_stats(pseudo)


def test_pseudonyms_are_crypto_pan_of_the_real_address_and_keep_prefixes(runs):
    plain, pseudo, key = runs
    p = Pseudonymizer(load_key(key))
    a = pq.read_table(plain / "flows", columns=["flow_id", "client_ip", "community_id"]).sort_by("flow_id").to_pylist()
    b = pq.read_table(pseudo / "flows", columns=["flow_id", "client_ip", "community_id"]).sort_by("flow_id").to_pylist()
    for x, y in zip(a, b):
        assert y["client_ip"] == p.address(x["client_ip"]) != x["client_ip"]
        assert y["community_id"] != x["community_id"]
    # the same key gives the same pseudonyms in another run
    manifest = max((json.loads(m.read_text()) for m in (pseudo / "_runs").glob("*.json")), key=lambda m: m["started"])
    assert manifest["totals"]["pseudonymization"] == {"clients": "crypto-pan", "key_fingerprint": fingerprint(KEY)}
    assert KEY.hex() not in json.dumps(manifest)


def test_key_files(tmp_path):
    raw = tmp_path / "raw.key"
    raw.write_bytes(KEY)
    assert load_key(raw) == KEY
    short = tmp_path / "short.key"
    short.write_text("abcd\n")
    with pytest.raises(PseudonymKeyError, match="short.key.*32 bytes"):
        load_key(short)
    r = analyze(tmp_path / "out", "--pseudonymize-clients", short)
    assert r.returncode == 2 and "short.key" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    loose = tmp_path / "loose.key"
    loose.write_text(KEY.hex())
    loose.chmod(0o644)
    r = analyze(tmp_path / "out2", "--pseudonymize-clients", loose)
    assert r.returncode == 0 and "readable by other users" in r.stderr


def test_a_site_that_requires_pseudonyms_is_only_analysed_with_its_key(tmp_path):
    """The agent's `pseudonymize_clients` key: its manifests name the key by fingerprint and
    analyze refuses such a file without that key (issue 19)."""
    import gzip

    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "cap.pcap.gz").write_bytes(gzip.compress((SAMPLES / "clean.pcap").read_bytes()))
    (landing / "cap.manifest.json").write_text(json.dumps({"capture_id": "a.b.c", "pseudonymize_clients": {"key_fingerprint": fingerprint(KEY)}}))
    right, wrong = tmp_path / "right.key", tmp_path / "wrong.key"
    right.write_text(KEY.hex())
    wrong.write_text(bytes(32).hex())
    for k in (right, wrong):
        k.chmod(0o600)

    def run(*extra):
        return subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(landing), "--out", str(tmp_path / "ds"), "-q", *map(str, extra)],
                              capture_output=True, text=True, timeout=120)

    r = run()
    assert r.returncode == 3 and "requires pseudonymized client addresses" in r.stderr and fingerprint(KEY) in r.stderr
    r = run("--pseudonymize-clients", wrong)
    assert r.returncode == 3 and "requires the pseudonymization key" in r.stderr
    r = run("--pseudonymize-clients", right)
    assert r.returncode == 0, r.stderr
    ips = pq.read_table(tmp_path / "ds" / "flows", columns=["client_ip"]).column("client_ip").to_pylist()
    assert ips and not set(ips) & {"198.18.1.2"}

"""Edge capture agent: unit tests of each module, no root or network needed (fast)."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import time
from pathlib import Path

import pytest
from agent_support.pcapread import PcapReader, count_packets
from tailscope.capture import manifest as mf
from tailscope.capture.config import (
    AgentConfig,
    ConfigError,
    landing_options,
    load_config,
    parse_override,
    parse_size,
    to_toml,
    validate,
)
from tailscope.capture.finalize import PcapError, finalize
from tailscope.capture.fsutil import DirLock, Journal, atomic_write_json, read_json
from tailscope.capture.landing import FsspecTarget, LocalTarget, Throttle
from tailscope.capture.metrics import METRICS, render
from tailscope.capture.shipper import Backoff, Shipper
from tailscope.capture.spool import Spool
from tailscope.capture.state import AgentState
from tailscope.capture.tcpdump import build_command, check_filter, parse_stats

T0 = 1_714_564_800 * 10**9  # 2024-05-01T12:00:00Z
BASE = [("agent.site", "s"), ("capture.interface", "eth0"), ("ship.landing", "/l")]


# ---- helpers ---------------------------------------------------------------------------------------
def pcap_bytes(records, nanos=True, endian="<", linktype=1, snaplen=192) -> bytes:
    out = struct.pack(endian + "IHHiIII", 0xA1B23C4D if nanos else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)
    for ts_ns, data, wirelen in records:
        sec, frac = divmod(ts_ns, 10**9)
        out += struct.pack(endian + "IIII", sec, frac if nanos else frac // 1000, len(data), wirelen) + data
    return out


def pkt(i: int, n: int = 60) -> bytes:
    return (b"P%06d" % i).ljust(n, b"\0")


def make_spool(root: Path, quota: int = 10**9) -> Spool:
    sp = Spool(root, quota, 0, AgentState(root / "state.json"), Journal(root / "journal.jsonl"))
    sp.init()
    return sp


STATS = ("tcpdump: listening on eth0\n{c} packets captured\n{r} packets received by filter\n"
         "{d} packets dropped by kernel\n")


def put_raw(sp: Spool, seq: int, records, *, start_ns=None, successor=None, succ_ns=None, drops=0,
            stats=True, cap_id="edge1.lb.eth0") -> str:
    start_ns = start_ns if start_ns is not None else T0 + seq * 60 * 10**9
    stem = mf.file_stem(cap_id, start_ns, seq)
    meta = {"stem": stem, "seq": seq, "capture_id": cap_id, "session_id": "s1", "site": "ams1",
            "capture_point": "lb", "interface": "eth0", "agent_id": "edge1", "bpf_filter": "tcp",
            "snaplen": 192, "hostname": "h", "start_ns": start_ns, "end_ns": start_ns + 60 * 10**9,
            "end_reason": "time", "previous_file": None, "contiguous_with_previous": seq > 0,
            "successor": successor, "successor_spawned_ns": succ_ns, "pid": None,
            "tcpdump_version": "4.99.3", "libpcap_version": "1.10.3"}
    atomic_write_json(sp.capture_dir / f"{stem}.meta.json", meta)
    (sp.capture_dir / f"{stem}.pcap").write_bytes(pcap_bytes(records))
    if stats:
        (sp.capture_dir / f"{stem}.stderr").write_text(
            STATS.format(c=len(records), r=len(records) + drops, d=drops))
    return stem


def fin(sp: Spool, stem: str, compression="gzip"):
    return finalize(sp, stem, compression=compression, level=None, agent_version="0.1.0")


def cfg_for(tmp: Path, **ship) -> AgentConfig:
    cfg = load_config(None, [("agent.site", "ams1"), ("agent.spool_dir", str(tmp / "spool")),
                             ("capture.interface", "eth0"), ("ship.landing", str(tmp / "landing")),
                             ("ship.retry_initial_seconds", 0.01), ("ship.retry_max_seconds", 0.05)])
    for k, v in ship.items():
        setattr(cfg.ship, k, v)
    return cfg


# ---- config -----------------------------------------------------------------------------------------
def test_parse_size():
    assert parse_size(100) == 100
    assert parse_size("64K") == 65536
    assert parse_size("100M") == 100 * 2**20
    assert parse_size("1.5GiB") == int(1.5 * 2**30)
    assert parse_size("10 gb") == 10 * 2**30
    with pytest.raises(ConfigError):
        parse_size("lots")


def test_config_file_then_set_then_flags(tmp_path):
    import argparse

    from tailscope.capture import cli as agent_cli

    f = tmp_path / "agent.toml"
    f.write_text('[agent]\nsite = "ams1"\nspool_dir = "/var/x"\n[capture]\ninterface = "eth0"\nsnaplen = 200\n'
                 'rotate_bytes = "50M"\n[ship]\nlanding = "s3://b/p"\n'
                 '[ship.storage_options]\nendpoint_url = "https://s3.example:9000"\n')
    parser = argparse.ArgumentParser()
    agent_cli.register(parser.add_subparsers())
    args = parser.parse_args(["agent", "run", "-c", str(f), "--set", "capture.snaplen=256",
                              "--set", "capture.rotate_bytes=64M", "--snaplen", "300", "-i", "eth1",
                              "--set", "ship.storage_options.region_name=eu-west-1"])
    cfg = agent_cli._load(args, need_capture=True, need_landing=True)
    assert cfg.capture.snaplen == 300  # flag beats --set beats file
    assert cfg.capture.interface == "eth1"
    assert cfg.capture.rotate_bytes == 64 * 2**20
    assert cfg.agent.spool_dir == "/var/x"
    assert cfg.ship.storage_options == {"endpoint_url": "https://s3.example:9000", "region_name": "eu-west-1"}
    assert args.func is agent_cli.cmd_run


def test_credentials_never_in_the_config_and_tls_verified_by_default(tmp_path):
    """Issue 19: credentials come from the environment, a 0600 file or the instance role; plain
    HTTP or unverified TLS must be asked for."""
    base = [("agent.site", "x"), ("capture.interface", "eth0"), ("ship.landing", "s3://b/p")]
    for name in ("secret", "key", "token", "aws_secret_access_key", "password"):
        with pytest.raises(ConfigError, match=f"storage_options.{name}: credentials never go"):
            validate(load_config(None, base + [(f"ship.storage_options.{name}", "hunter2")]))
    for insecure in ([("ship.storage_options.endpoint_url", "http://minio:9000")],
                     [("ship.storage_options.client_kwargs", {"verify": False})],
                     [("ship.storage_options.use_ssl", False)]):
        with pytest.raises(ConfigError, match="allow_insecure_tls"):
            validate(load_config(None, base + insecure))
        validate(load_config(None, base + insecure + [("ship.allow_insecure_tls", True)]))
    creds = tmp_path / "creds.toml"
    creds.write_text('key = "AK"\nsecret = "hunter2"\n')
    creds.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        validate(load_config(None, base + [("ship.credentials_file", str(creds))]))
    creds.chmod(0o600)
    cfg = load_config(None, base + [("ship.credentials_file", str(creds))])
    validate(cfg)
    assert landing_options(cfg.ship) == {"key": "AK", "secret": "hunter2"}
    assert "hunter2" not in to_toml(cfg) and "hunter2" not in str(cfg.to_dict())


def test_config_round_trip_and_defaults(tmp_path):
    cfg = load_config(None, BASE)
    validate(cfg)
    assert cfg.capture.bpf_filter == "(tcp or udp) and (port 443 or port 80)"
    assert cfg.capture.snaplen == 192
    p = tmp_path / "eff.toml"
    p.write_text(to_toml(cfg))
    again = load_config(str(p))
    assert again.to_dict() == cfg.to_dict()


@pytest.mark.parametrize("overrides, needle", [
    (BASE[1:], "site is required"),
    (BASE + [("agent.site", "a/b")], "letters, digits"),
    (BASE + [("capture.rotate_bytes", "1M"), ("spool.quota_bytes", "1M")], "at least 2 x rotate_bytes"),
    (BASE + [("capture.handover_seconds", 400)], "handover_seconds"),
    (BASE + [("capture.compression", "lz4")], "gzip or zstd"),
    (BASE[:2], "landing is required"),
])
def test_config_validation(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        validate(load_config(None, overrides))


def test_config_unknown_keys(tmp_path):
    with pytest.raises(ConfigError, match="unknown setting"):
        load_config(None, [("capture.snaplenn", 1)])
    f = tmp_path / "a.toml"
    f.write_text("[captur]\nx = 1\n")
    with pytest.raises(ConfigError, match="unknown section"):
        load_config(str(f))
    assert parse_override("capture.snaplen=256") == ("capture.snaplen", 256)
    assert parse_override("ship.landing=s3://b/p") == ("ship.landing", "s3://b/p")


# ---- names and layout -----------------------------------------------------------------------------------
def test_capture_id_names_and_partition():
    assert mf.capture_id("edge-1", "lb a", "eth0.100") == "edge-1.lb-a.eth0-100"
    stem = mf.file_stem("e.c.i", T0 + 5 * 10**9 + 123, 7)
    assert stem == "e.c.i.20240501T120005Z.00000007"
    assert mf.partition("ams1", T0 - 1) == "site=ams1/date=2024-05-01/hour=11"
    assert mf.partition("ams1", T0) == "site=ams1/date=2024-05-01/hour=12"
    assert mf.ns_to_iso(T0 + 5) == "2024-05-01T12:00:00.000000005Z"
    assert mf.stem_of(stem + ".pcap.zst") == stem and mf.stem_of(stem + ".manifest.json") == stem


def test_manifest_fields_documented():
    """Every manifest key is in the field reference (manifest.FIELDS) and in capture/README.md."""
    readme = (Path(__file__).resolve().parent.parent / "capture" / "README.md").read_text()
    m = mf.build_manifest(meta={"site": "s", "start_ns": T0, "end_ns": T0 + 1, "bpf_filter": "", "capture_point": "c",
                                "interface": "i", "agent_id": "a", "capture_id": "a.c.i", "session_id": "x", "seq": 0},
                          stats={}, data_name="f.pcap.gz", compression="gzip", agent_version="0",
                          pcap={k: 0 for k in ("linktype", "snaplen", "packets", "bytes_captured", "bytes_on_wire",
                                               "first_ns", "last_ns", "duplicates_removed", "size_bytes", "sha256",
                                               "pcap_size_bytes", "pcap_sha256")})
    documented = set()
    for k in mf.FIELDS:
        for part in k.split("/"):
            documented.add(part)
    documented |= {"start_ns", "end_ns"}
    for key in m:
        assert key in documented, key
        assert f"`{key}`" in readme, f"{key} missing from capture/README.md"


# ---- pcap reading ----------------------------------------------------------------------------------------
def test_finalize_formats_torn_tail_and_bad_header(tmp_path):
    """finalize copies us/ns and either byte order as they are, cuts a torn tail and counts it,
    and refuses a file that is not a pcap naming it (agent.py then moves it to spool/corrupt/)."""
    recs = [(T0 + i * 1000, pkt(i), 1500) for i in range(5)]
    for i, (nanos, endian) in enumerate(((True, "<"), (False, ">"))):
        sp = make_spool(tmp_path / f"s{i}")
        stem = put_raw(sp, 0, [])
        raw = pcap_bytes(recs, nanos=nanos, endian=endian)
        (sp.capture_dir / f"{stem}.pcap").write_bytes(raw[:-7])
        m = fin(sp, stem)
        kept = gzip.decompress((sp.ready_dir / m["file"]).read_bytes())
        assert kept == raw[:-(16 + 60)]  # the four whole records, byte for byte
        assert m["packets"] == 4 and m["bytes_on_wire"] == 4 * 1500 and m["bytes_captured"] == 4 * 60
        assert m["first_packet_time"] == mf.ns_to_iso(T0) and m["last_packet_time"] == mf.ns_to_iso(T0 + 3000)
        assert m["pcap_size_bytes"] == len(kept) and m["pcap_sha256"] == hashlib.sha256(kept).hexdigest()
        got = list(PcapReader(io.BytesIO(kept)))  # the test's own reader agrees
        assert [g.data for g in got] == [x[1] for x in recs[:4]]
    sp = make_spool(tmp_path / "bad")
    stem = put_raw(sp, 0, [])
    bad = sp.capture_dir / f"{stem}.pcap"
    bad.write_bytes(b"not a pcap file at all......")
    with pytest.raises(PcapError, match=re.escape(f"{bad}: not a classic pcap file")):
        fin(sp, stem)
    torn = PcapReader(io.BytesIO(pcap_bytes(recs)[:-7]))  # and the test reader sees the torn tail too
    assert len(list(torn)) == 4 and torn.truncated_tail == 16 + 60 - 7


# ---- finalize and the hand-over de-duplication --------------------------------------------------------------
def test_finalize_counts_stats_and_dedupes_handover(tmp_path):
    sp = make_spool(tmp_path / "spool")
    succ_ns = T0 + 10 * 10**9
    a_recs = [(T0 + i * 10**8, pkt(i), 100) for i in range(120)]  # 0 .. 11.9 s
    stem_a = put_raw(sp, 0, a_recs, start_ns=T0, drops=3, successor=None)
    # B started at 10 s: it saw A's packets from 10.05 s on, TX ones stamped 3 us apart, plus its own.
    overlap = [(ts + (3000 if i % 2 else 0), d, w) for i, (ts, d, w) in enumerate(a_recs) if ts >= succ_ns + 5 * 10**7]
    resend = (a_recs[-1][0] + 5 * 10**6, a_recs[-1][1], 100)  # identical bytes 5 ms later: a real packet
    own = [(T0 + 12 * 10**9 + i * 10**8, pkt(1000 + i), 100) for i in range(30)]
    stem_b = put_raw(sp, 1, overlap + [resend] + own, start_ns=succ_ns)
    meta_a = read_json(sp.capture_dir / f"{stem_a}.meta.json")
    meta_a.update(successor=stem_b, successor_spawned_ns=succ_ns)
    atomic_write_json(sp.capture_dir / f"{stem_a}.meta.json", meta_a)

    ma = fin(sp, stem_a)
    saved = read_json(sp.dedupe_dir / f"{stem_b}.json")  # from succ_ns - 0.5 s on, in the old agent's format
    assert saved["from"] == stem_a and len(saved["keys"]) == 25
    assert saved["keys"][0] == [T0 + 95 * 10**8, 60, 100, hashlib.blake2b(pkt(95), digest_size=8).hexdigest()]
    mb = fin(sp, stem_b)
    assert ma["packets"] == 120 and ma["kernel_drops"] == 3 and ma["packets_received_by_filter"] == 123
    assert ma["capture_stats_complete"] and ma["interface_drops"] == 0
    assert mb["overlap_duplicates_removed"] == len(overlap)
    assert mb["packets"] == 31  # the resend and B's own packets
    assert mb["first_packet_time"] == mf.ns_to_iso(resend[0])
    assert ma["path"] == f"site=ams1/date=2024-05-01/hour=12/{stem_a}.pcap.gz"
    assert ma["capture_id"] == "edge1.lb.eth0" and ma["schema_version"] == 1
    # the data file is what the manifest says
    data = (sp.ready_dir / ma["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == ma["sha256"] and len(data) == ma["size_bytes"]
    assert hashlib.sha256(gzip.decompress(data)).hexdigest() == ma["pcap_sha256"]
    assert count_packets(str(sp.ready_dir / ma["file"])) == 120
    # raw inputs are gone, counters applied once
    assert not list(sp.capture_dir.iterdir()) and not list(sp.dedupe_dir.iterdir())
    c = sp.state.counters
    assert c["files_finished"] == 2 and c["packets"] == 151 and c["kernel_drops"] == 3
    assert c["overlap_duplicates_removed"] == len(overlap)
    assert sp.state.last_file["edge1.lb.eth0"] == mb["file"]


def test_dedupe_file_of_the_python_agent_still_dedupes(tmp_path):
    """Keys as the Python agent wrote them (hashlib's blake2b-8 hex digest, lists in JSON) match the
    native digests: a file left by the old agent still de-duplicates its successor. The rule itself
    (closest first, each key once, 1 ms) is tested in parsers/src/finish.rs."""
    sp = make_spool(tmp_path / "spool")
    recs = [(T0 + i * 10**6 * 5, pkt(i), 100) for i in range(10)]
    stem = put_raw(sp, 1, recs, start_ns=T0)
    old_keys = [[ts + 2000, len(d), w, hashlib.blake2b(d, digest_size=8).hexdigest()] for ts, d, w in recs[:4]]
    old_keys.append([T0, 60, 99, old_keys[0][3]])  # same bytes, other wire length: not the same packet
    atomic_write_json(sp.dedupe_dir / f"{stem}.json", {"from": "older", "keys": old_keys})
    m = fin(sp, stem)
    assert m["overlap_duplicates_removed"] == 4 and m["packets"] == 6
    assert m["first_packet_time"] == mf.ns_to_iso(recs[4][0])


def test_finalize_is_deterministic_and_zstd(tmp_path):
    recs = [(T0 + i, pkt(i), 60) for i in range(50)]
    shas = []
    for run in range(2):
        sp = make_spool(tmp_path / f"s{run}")
        shas.append(fin(sp, put_raw(sp, 0, recs))["sha256"])
    assert shas[0] == shas[1]  # a redone finalization after a crash lands the same bytes
    sp = make_spool(tmp_path / "z")
    m = fin(sp, put_raw(sp, 0, recs), compression="zstd")
    assert m["file"].endswith(".pcap.zst") and m["compression"] == "zstd"
    assert count_packets(str(sp.ready_dir / m["file"])) == 50


def test_finalize_without_stats_or_file(tmp_path):
    sp = make_spool(tmp_path / "spool")
    m = fin(sp, put_raw(sp, 0, [(T0, pkt(0), 60)], stats=False))
    assert m["kernel_drops"] is None and not m["capture_stats_complete"]
    assert sp.state.counters["files_stats_missing"] == 1
    stem = put_raw(sp, 1, [])
    (sp.capture_dir / f"{stem}.pcap").unlink()  # tcpdump never created it
    assert fin(sp, stem) is None
    assert not list(sp.capture_dir.iterdir())
    assert [e["event"] for e in sp.journal.read()].count("capture_empty") == 1


def test_crash_after_data_rename_before_manifest(tmp_path):
    """Data file in ready/ but no manifest: recovery removes the orphan, finalize redoes it."""
    sp = make_spool(tmp_path / "spool")
    recs = [(T0 + i, pkt(i), 60) for i in range(10)]
    stem = put_raw(sp, 0, recs)
    (sp.ready_dir / f"{stem}.pcap.gz").write_bytes(b"half-done")
    (sp.tmp_dir / f"{stem}.pcap.gz").write_bytes(b"partial")
    sp.recover_ready()
    assert not list(sp.ready_dir.iterdir()) and not list(sp.tmp_dir.iterdir())
    m = fin(sp, stem)
    assert m["packets"] == 10 and sp.state.counters["files_finished"] == 1


def test_crash_after_manifest_commit_counts_once(tmp_path):
    """Manifest committed but raw files still there (killed before clean-up): no double count."""
    sp = make_spool(tmp_path / "spool")
    recs = [(T0 + i, pkt(i), 60) for i in range(10)]
    stem = put_raw(sp, 0, recs)
    saved = {p.name: p.read_bytes() for p in sp.capture_dir.iterdir()}
    fin(sp, stem)
    for name, data in saved.items():  # as if the clean-up had not happened
        (sp.capture_dir / name).write_bytes(data)
    m = fin(sp, stem)
    assert m["packets"] == 10
    assert sp.state.counters["files_finished"] == 1 and sp.state.counters["packets"] == 10
    assert not list(sp.capture_dir.iterdir())


# ---- spool quota -------------------------------------------------------------------------------------------
def _ready(sp: Spool, n: int, size: int = 20000) -> list[dict]:
    out = []
    for i in range(n):
        recs = [(T0 + i * 60 * 10**9 + j, os.urandom(size // 50), 100) for j in range(50)]
        out.append(fin(sp, put_raw(sp, i, recs)))
    return out


def test_quota_drops_oldest_finished_and_reports(tmp_path):
    sp = make_spool(tmp_path / "spool")
    ms = _ready(sp, 5)
    per = ms[0]["size_bytes"]
    sp.quota_bytes = sp.usage() - 2 * per + 8000  # room for all but 2 files (+ their tombstones)
    sp.in_flight.add(mf.stem_of(ms[0]["file"]))  # being uploaded: must not be dropped under the shipper
    assert sp.enforce_quota() == 2
    left = [i.manifest["file"] for i in sp.ready_items()]
    assert left == [ms[0]["file"], ms[3]["file"], ms[4]["file"]]
    tombs = [t for _, t in sp.tombstones()]
    assert [t["file"] for t in tombs] == [ms[1]["file"], ms[2]["file"]]
    assert all(t["status"] == "dropped_quota" and t["kind"] == mf.TOMBSTONE_KIND for t in tombs)
    c = sp.state.counters
    assert c["files_dropped_quota"] == 2 and c["packets_dropped_quota"] == 100
    assert c["bytes_dropped_quota"] == ms[1]["size_bytes"] + ms[2]["size_bytes"]
    assert [e["file"] for e in sp.journal.read() if e["event"] == "dropped"] == [ms[1]["file"], ms[2]["file"]]


def test_interrupted_drop_is_finished_on_recovery(tmp_path):
    sp = make_spool(tmp_path / "spool")
    (m,) = _ready(sp, 1)
    stem = mf.stem_of(m["file"])
    atomic_write_json(sp.tomb_dir / f"{stem}{mf.TOMBSTONE_SUFFIX}", mf.build_tombstone(m, "quota", "now"))
    sp.recover_ready()  # killed after writing the tombstone, before removing the item
    assert not sp.ready_items()
    assert sp.state.counters["files_dropped_quota"] == 1


# ---- shipping ---------------------------------------------------------------------------------------------
def test_ship_to_directory_layout_and_cleanup(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "landing").mkdir()
    sp = make_spool(tmp_path / "spool")
    ms = _ready(sp, 3)
    sh = Shipper(cfg, sp)
    assert sh.ship_pending() == 3
    for m in ms:
        data = tmp_path / "landing" / m["path"]
        assert data.read_bytes() and hashlib.sha256(data.read_bytes()).hexdigest() == m["sha256"]
        assert json.loads(data.with_name(mf.stem_of(m["file"]) + ".manifest.json").read_text()) == m
    assert not sp.ready_items() and not [p for p in (tmp_path / "landing").rglob(".*")]
    c = sp.state.counters
    assert c["files_shipped"] == 3 and c["bytes_shipped"] == sum(m["size_bytes"] for m in ms)
    assert sp.state.gauges["last_success_timestamp_seconds"] > time.time() - 60


def test_ship_is_idempotent_after_crash_between_upload_and_cleanup(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "landing").mkdir()
    sp = make_spool(tmp_path / "spool")
    (m,) = _ready(sp, 1)
    item = sp.ready_items()[0]
    target = LocalTarget(str(tmp_path / "landing"))
    target.put_file(item.data_path, m["path"])  # what the killed agent had uploaded
    target.put_bytes(item.manifest_path.read_bytes(), m["path"].replace(".pcap.gz", ".manifest.json"))
    before = (tmp_path / "landing" / m["path"]).stat().st_mtime_ns
    assert Shipper(cfg, sp).ship_item(item) == "already_landed"
    assert (tmp_path / "landing" / m["path"]).stat().st_mtime_ns == before  # not uploaded again
    assert sp.state.counters["files_shipped"] == 1 and sp.state.counters["files_already_landed"] == 1
    assert len(list((tmp_path / "landing").rglob("*.pcap.gz"))) == 1


def test_ship_conflict_is_kept_aside(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "landing").mkdir()
    sp = make_spool(tmp_path / "spool")
    (m,) = _ready(sp, 1)
    other = dict(m, sha256="0" * 64)
    LocalTarget(str(tmp_path / "landing")).put_bytes(json.dumps(other).encode(),
                                                      m["path"].replace(".pcap.gz", ".manifest.json"))
    assert Shipper(cfg, sp).ship_item(sp.ready_items()[0]) == "conflict"
    assert (sp.root / "conflict" / m["file"]).exists()
    assert sp.state.counters["ship_conflicts"] == 1 and not sp.ready_items()


class FlakyTarget:
    def __init__(self, inner, failures):
        self.inner, self.failures, self.url = inner, failures, inner.url

    def _maybe_fail(self):
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("landing zone unreachable")

    def get_json(self, rel):
        self._maybe_fail()
        return self.inner.get_json(rel)

    def put_file(self, *a, **k):
        return self.inner.put_file(*a, **k)

    def put_bytes(self, *a, **k):
        return self.inner.put_bytes(*a, **k)


def test_ship_retries_with_backoff(tmp_path):
    cfg = cfg_for(tmp_path, retry_initial_seconds=1.0, retry_max_seconds=4.0)
    (tmp_path / "landing").mkdir()
    sp = make_spool(tmp_path / "spool")
    _ready(sp, 2)
    flaky = FlakyTarget(LocalTarget(str(tmp_path / "landing")), failures=4)
    sh = Shipper(cfg, sp, target_factory=lambda: flaky)
    delays = [sh.pass_with_backoff() for _ in range(4)]
    assert [round(d) for d in delays] == [round(d) for d in delays]  # numbers
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0 and delays[3] <= 4.0
    assert sp.state.counters["upload_failures"] == 4 and len(sp.ready_items()) == 2
    assert sh.pass_with_backoff() == cfg.ship.poll_seconds
    assert not sp.ready_items() and sh.backoff.failures == 0


def test_unmounted_directory_is_unreachable(tmp_path):
    from tailscope.capture.landing import LandingUnavailable

    t = LocalTarget(str(tmp_path / "not-mounted"))
    with pytest.raises(LandingUnavailable):
        t.get_json("x.json")
    assert not (tmp_path / "not-mounted").exists()


def test_tombstones_ship_or_revert(tmp_path):
    cfg = cfg_for(tmp_path)
    (tmp_path / "landing").mkdir()
    sp = make_spool(tmp_path / "spool")
    ms = _ready(sp, 2)
    items = sp.ready_items()
    target = LocalTarget(str(tmp_path / "landing"))
    # file 0 had actually landed before the agent died; the quota then dropped the local copy
    target.put_file(items[0].data_path, ms[0]["path"])
    target.put_bytes(items[0].manifest_path.read_bytes(), ms[0]["path"].replace(".pcap.gz", ".manifest.json"))
    for it in items:
        sp.drop(it, "quota")
    sh = Shipper(cfg, sp)
    sh.ship_pending()
    tombs = list((tmp_path / "landing").rglob("*.dropped.json"))
    assert [p.name for p in tombs] == [mf.stem_of(ms[1]["file"]) + ".dropped.json"]
    c = sp.state.counters
    assert c["files_dropped_quota"] == 1 and c["files_shipped"] == 1 and c["tombstones_shipped"] == 1


def test_local_upload_interrupted_leaves_nothing(tmp_path):
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3 * 2**20))
    (tmp_path / "landing").mkdir()
    t = LocalTarget(str(tmp_path / "landing"))
    calls = []

    def abort():
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(InterruptedError):
        t.put_file(src, "a/b/f.bin", abort=abort)
    assert not [p for p in (tmp_path / "landing").rglob("*") if p.is_file()]
    t.put_file(src, "a/b/f.bin")
    assert (tmp_path / "landing/a/b/f.bin").read_bytes() == src.read_bytes()


def test_fsspec_rename_target_memory(tmp_path):
    import fsspec

    t = FsspecTarget("memory://landing-test")
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 5000)
    t.put_file(src, "site=a/date=2024-05-01/hour=12/f.pcap.gz")
    t.put_bytes(b'{"sha256": "1"}', "site=a/date=2024-05-01/hour=12/f.manifest.json")
    fs = fsspec.filesystem("memory")
    names = sorted(p.rsplit("/", 1)[1] for p in fs.find("/landing-test"))
    assert names == ["f.manifest.json", "f.pcap.gz"]
    assert t.get_json("site=a/date=2024-05-01/hour=12/f.manifest.json") == {"sha256": "1"}
    assert t.get_json("nope.json") is None
    fs.rm("/landing-test", recursive=True)


def test_throttle_paces_uploads():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    th = Throttle(1000, sleep=sleep, clock=lambda: now[0])
    for _ in range(3):
        th(1000)
        now[0] += 0.1  # time spent sending
    assert slept == pytest.approx([1.0, 0.9, 0.9])  # 3000 bytes at 1000 B/s take 3 s in all
    assert Throttle(0, sleep=sleep)(10**9) is None


def test_backoff_grows_and_caps():
    b = Backoff(1, 8)
    ds = [b.next_delay() for _ in range(8)]
    assert 0.5 <= ds[0] <= 1 and 4 <= ds[3] <= 8 and all(d <= 8 for d in ds)
    b.reset()
    assert b.next_delay() <= 1


# ---- state, journal, lock ---------------------------------------------------------------------------------------
def test_state_seq_and_idempotent_counters(tmp_path):
    s = AgentState(tmp_path / "state.json")
    assert [s.allocate_seq("c"), s.allocate_seq("c"), s.allocate_seq("d")] == [0, 1, 0]
    assert s.apply("shipped", "f1", {"files_shipped": 1})
    assert not s.apply("shipped", "f1", {"files_shipped": 1})
    s2 = AgentState(tmp_path / "state.json")  # after a restart
    assert s2.allocate_seq("c") == 2 and s2.counters["files_shipped"] == 1
    assert not s2.apply("shipped", "f1", {"files_shipped": 1})


def test_journal_tolerates_torn_line(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.append("a", file="x")
    with open(tmp_path / "j.jsonl", "ab") as f:
        f.write(b'{"event": "b", "fi')
    assert [r["event"] for r in j.read()] == ["a"]


def test_spool_lock_is_exclusive(tmp_path):
    a, b = DirLock(tmp_path / "agent.lock"), DirLock(tmp_path / "agent.lock")
    a.acquire()
    with pytest.raises(RuntimeError, match="in use by another agent"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()


# ---- tcpdump, rotation timing, metrics ---------------------------------------------------------------------
def test_parse_tcpdump_stats():
    s = parse_stats("tcpdump: listening on eth0\n12 packets captured\n15 packets received by filter\n"
                    "3 packets dropped by kernel\n2 packets dropped by interface\n")
    assert s == {"captured": 12, "received_by_filter": 15, "kernel_drops": 3, "interface_drops": 2}
    assert parse_stats("1 packet captured\n1 packet received by filter\n0 packets dropped by kernel\n")[
        "interface_drops"] == 0
    assert parse_stats("tcpdump: listening on eth0\n")["kernel_drops"] is None  # killed hard


def test_tcpdump_command():
    cfg = load_config(None, [("capture.interface", "eth9"), ("capture.snaplen", 160)])
    cmd = build_command(cfg.capture, "/spool/x.pcap")
    assert cmd[:3] == ["tcpdump", "-i", "eth9"] and "-s" in cmd and cmd[cmd.index("-s") + 1] == "160"
    assert "--time-stamp-precision=nano" in cmd and "-p" in cmd and cmd[-1] == cfg.capture.bpf_filter
    assert cmd[cmd.index("-w") + 1] == "/spool/x.pcap"
    if os.geteuid() == 0:
        assert cmd[cmd.index("-Z") + 1] == "root"


@pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump not installed")
def test_filter_check():
    cfg = load_config(None, [])
    assert check_filter(cfg.capture) is None
    cfg.capture.bpf_filter = "tcp and and port"
    assert check_filter(cfg.capture)


def test_rotation_deadlines_align_to_wall_clock():
    from tailscope.capture.capture import next_deadline

    assert next_deadline(1000.0, 300, True) == 1200
    assert next_deadline(1170.0, 300, True) == 1200
    assert next_deadline(1195.0, 300, True) == 1500  # a first period under 10% is merged
    assert next_deadline(1195.0, 300, False) == 1495


def test_metrics_exposition():
    values = {key: 3 for _n, _t, _h, key in METRICS}
    values["last_success_timestamp_seconds"] = 1.5
    text = render(values, {"site": 'am"s', "version": "0.1.0"})
    assert 'tailscope_agent_info{site="am\\"s",version="0.1.0"} 1' in text
    lines = text.splitlines()
    for name, mtype, _h, _k in METRICS:
        full = f"tailscope_agent_{name}"
        assert f"# TYPE {full} {mtype}" in lines
        assert any(ln.startswith(full + " ") for ln in lines)
        if mtype == "counter":
            assert name.endswith("_total")
    assert "tailscope_agent_last_success_timestamp_seconds 1.5" in lines


# ---- CLI --------------------------------------------------------------------------------------------------
def test_cli_help_and_config_command(tmp_path, capsys):
    from tailscope.cli import main

    with pytest.raises(SystemExit) as e:
        main(["agent", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for action in ("run", "status", "metrics", "config", "drain"):
        assert action in out
    with pytest.raises(SystemExit):
        main(["agent", "run", "--help"])
    assert "--interface" in capsys.readouterr().out
    f = tmp_path / "a.toml"
    f.write_text('[agent]\nsite = "ams1"\n[capture]\ninterface = "eth0"\n[ship]\nlanding = "/srv/l"\n')
    assert main(["agent", "config", "-c", str(f), "--snaplen", "256"]) == 0
    assert "snaplen = 256" in capsys.readouterr().out
    assert main(["agent", "run", "--spool-dir", str(tmp_path / "s")]) == 2  # no site/interface/landing
    assert "site is required" in capsys.readouterr().err


def test_status_and_metrics_offline(tmp_path, capsys):
    from tailscope.cli import main

    sp = make_spool(tmp_path / "spool")
    _ready(sp, 2)
    sp.drop(sp.ready_items()[0], "quota")
    assert main(["agent", "status", "--spool-dir", str(tmp_path / "spool")]) == 0
    st = json.loads(capsys.readouterr().out)
    assert st["files_pending"] == 1 and st["tombstones_pending"] == 1 and not st["agent_running"]
    assert len(st["dropped_files"]) == 1 and st["counters"]["files_finished"] == 2
    assert main(["agent", "metrics", "--spool-dir", str(tmp_path / "spool")]) == 0
    text = capsys.readouterr().out
    assert "tailscope_agent_files_pending 1" in text and "tailscope_agent_quota_dropped_files_total 1" in text

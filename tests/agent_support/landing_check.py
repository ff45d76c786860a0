"""Read back a landing zone the agent filled, and check it independently of the agent's code paths
where it matters (hashes recomputed, packets re-counted, tcpdump used as a second reader)."""
from __future__ import annotations

import collections
import gzip
import hashlib
import io
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from .pcapread import PcapReader

TSQ = re.compile(rb"TSQ:([A-Za-z0-9_-]+):(\d+):")


@dataclass
class Landed:
    manifests: dict[str, dict] = field(default_factory=dict)      # stem -> manifest
    data: dict[str, bytes] = field(default_factory=dict)          # stem -> data file bytes
    tombstones: dict[str, dict] = field(default_factory=dict)     # stem -> tombstone
    hidden: list[str] = field(default_factory=list)               # temporaries ('.' / '_')
    paths: dict[str, str] = field(default_factory=dict)           # stem -> relative data path
    data_names: collections.Counter = field(default_factory=collections.Counter)


def _stem(name: str) -> str:
    for s in (".manifest.json", ".dropped.json", ".pcap.gz", ".pcap.zst"):
        if name.endswith(s):
            return name[: -len(s)]
    return name


def load(fs, root: str) -> Landed:
    """fs: an fsspec file system (LocalFileSystem for directories); root: landing root in it."""
    out = Landed()
    root = root.rstrip("/")
    for path in sorted(fs.find(root)):
        rel = path[len(root) + 1:] if path.startswith(root + "/") else path
        name = rel.rsplit("/", 1)[-1]
        if name.startswith((".", "_")):
            out.hidden.append(rel)
            continue
        stem = _stem(name)
        if name.endswith(".manifest.json"):
            out.manifests[stem] = json.loads(fs.cat_file(path))
        elif name.endswith(".dropped.json"):
            out.tombstones[stem] = json.loads(fs.cat_file(path))
        else:
            out.data[stem] = fs.cat_file(path)
            out.paths[stem] = rel
            out.data_names[name] += 1
    return out


def records(data: bytes, compression: str):
    if compression == "gzip":
        raw = gzip.decompress(data)
    else:  # streamed frames carry no content size: decompress as a stream
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return raw, list(PcapReader(io.BytesIO(raw)))


def tcpdump_count(raw_pcap: bytes) -> int | None:
    """Second opinion on the packet count from tcpdump itself."""
    if not shutil.which("tcpdump"):
        return None
    r = subprocess.run(["tcpdump", "-n", "-q", "-r", "-"], input=raw_pcap, capture_output=True, timeout=60)
    return len([ln for ln in r.stdout.splitlines() if ln.strip()])


def verify(landed: Landed, use_tcpdump: bool = True) -> dict:
    """Check every landed file against its manifest. Returns the TSQ sequence numbers seen
    (tag -> Counter of n) and per-file facts; raises AssertionError on any inconsistency."""
    assert not landed.hidden, f"temporaries visible in the landing zone: {landed.hidden}"
    assert set(landed.data) == set(landed.manifests), (
        f"data without manifest: {set(landed.data) - set(landed.manifests)}; "
        f"manifest without data: {set(landed.manifests) - set(landed.data)}")
    assert all(c == 1 for c in landed.data_names.values())
    assert not set(landed.tombstones) & set(landed.manifests), "a file is both landed and dropped"
    seqs: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for stem, m in landed.manifests.items():
        data = landed.data[stem]
        assert m["schema_version"] == 1 and m["kind"] == "tailscope.capture.manifest"
        assert landed.paths[stem] == m["path"], (landed.paths[stem], m["path"])
        assert hashlib.sha256(data).hexdigest() == m["sha256"], f"{stem}: sha256 mismatch"
        assert len(data) == m["size_bytes"]
        raw, recs = records(data, m["compression"])
        assert hashlib.sha256(raw).hexdigest() == m["pcap_sha256"]
        assert len(recs) == m["packets"], f"{stem}: {len(recs)} records, manifest says {m['packets']}"
        if use_tcpdump:
            n = tcpdump_count(raw)
            assert n is None or n == m["packets"], f"{stem}: tcpdump reads {n}, manifest {m['packets']}"
        assert m["capture_id"] == f"{m['agent_id']}.{m['capture_point']}.{m['interface']}"
        d = m["start_time"]
        assert f"date={d[:10]}/hour={d[11:13]}/" in m["path"]
        for r in recs:
            mt = TSQ.search(r.data)
            if mt:
                seqs[mt.group(1).decode()][int(mt.group(2))] += 1
    return {"seqs": seqs}


def chains(landed: Landed) -> dict[str, list[dict]]:
    """Manifests and tombstones of each capture_id in seq order."""
    by: dict[str, list[dict]] = collections.defaultdict(list)
    for m in list(landed.manifests.values()) + list(landed.tombstones.values()):
        by[m["capture_id"]].append(m)
    for v in by.values():
        v.sort(key=lambda m: m["seq"])
    return by


def udp_tcp_ports(recs) -> collections.Counter:
    """(proto, dst port) counts for IPv4 over Ethernet records (enough for the lab's traffic)."""
    c: collections.Counter = collections.Counter()
    for r in recs:
        d = r.data
        if len(d) >= 38 and d[12:14] == b"\x08\x00":
            ihl = (d[14] & 0x0F) * 4
            proto = d[23]
            off = 14 + ihl
            if len(d) >= off + 4:
                sport = int.from_bytes(d[off:off + 2], "big")
                dport = int.from_bytes(d[off + 2:off + 4], "big")
                c[(proto, dport)] += 1
                c[(proto, "src", sport)] += 1
    return c


def journal_events(spool_dir, event: str) -> list[dict]:
    import pathlib

    out, seen = [], set()
    for name in ("journal.jsonl.1", "journal.jsonl"):
        p = pathlib.Path(spool_dir) / name
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("event") == event and rec.get("file") not in seen:
                seen.add(rec.get("file"))
                out.append(rec)
    return out


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out

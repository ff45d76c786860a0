#!/usr/bin/env python3
"""The edge agent's own CPU per million packets and its spool bytes per packet (docs/scale.md).

The agent's work per captured file, after tcpdump wrote it, is `capture.finalize.finalize`: one
native call (`_native.finish_capture`, parsers/src/finish.rs) reads every record, de-duplicates the
hand-over overlap, counts, hashes (sha256) and compresses into spool/tmp/, then Python commits it
into spool/ready/ with its manifest. It needs the built extension (run it with .venv/bin/python).
This script puts make_trace.py's mix trace into a fresh spool as a raw capture (as tcpdump would
leave it, with a meta file and tcpdump's statistics), times finalize() for each compression
(user+sys CPU of this process, by resource.getrusage), and reports CPU per million packets and the
finished file's bytes per packet, which is what the spool and the landing zone hold.

It does not measure tcpdump itself (capturing from an interface needs traffic and privileges);
`tcpdump -r TRACE -w FILE` is timed instead as a stand-in for its user-space write path.

    .venv/bin/python benchmarks/agent_finalize.py                    # 1M packets
    .venv/bin/python benchmarks/agent_finalize.py --packets 200000
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the agent is the repo's capture/ package

from capture import manifest as mf  # noqa: E402
from capture.finalize import finalize  # noqa: E402
from capture.fsutil import Journal, atomic_write_json  # noqa: E402
from capture.spool import Spool  # noqa: E402
from capture.state import AgentState  # noqa: E402


def cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def one(pcap: Path, packets: int, compression: str, tmp: Path) -> dict:
    root = tmp / compression
    sp = Spool(root, 10**12, 0, AgentState(root / "state.json"), Journal(root / "journal.jsonl"))
    sp.init()
    start_ns = 1_795_321_260 * 10**9
    stem = mf.file_stem("edge1.lb.eth0", start_ns, 0)
    atomic_write_json(sp.capture_dir / f"{stem}.meta.json", {
        "stem": stem, "seq": 0, "capture_id": "edge1.lb.eth0", "session_id": "bench", "site": "bench",
        "capture_point": "lb", "interface": "eth0", "agent_id": "edge1", "bpf_filter": "tcp or udp",
        "snaplen": 192, "hostname": "bench", "start_ns": start_ns, "end_ns": start_ns + 3600 * 10**9,
        "end_reason": "time", "previous_file": None, "contiguous_with_previous": False,
        "successor": None, "successor_spawned_ns": None, "pid": None,
        "tcpdump_version": "bench", "libpcap_version": "bench"})
    shutil.copyfile(pcap, sp.capture_dir / f"{stem}.pcap")
    (sp.capture_dir / f"{stem}.stderr").write_text(
        f"{packets} packets captured\n{packets} packets received by filter\n0 packets dropped by kernel\n")
    t0 = cpu()
    m = finalize(sp, stem, compression=compression, level=None, agent_version="bench")
    used = cpu() - t0
    size = m["size_bytes"]
    shutil.rmtree(root)
    return {"compression": compression, "cpu_s": used, "size_bytes": size, "packets": m["packets"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000)
    a = ap.parse_args(argv)
    pcap = ROOT / "benchmarks" / "out" / f"trace-{a.packets}.pcap"
    if not pcap.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), "--packets", str(a.packets),
                        "--out", str(pcap), "-q"], check=True)
    n = json.loads(Path(str(pcap) + ".json").read_text())["packets"]
    per_m = 1e6 / n
    kinds = ["gzip", "zstd"]
    with tempfile.TemporaryDirectory(dir=ROOT / "benchmarks" / "out") as d:
        tmp = Path(d)
        rows = [one(pcap, n, k, tmp) for k in kinds]
        c0 = children_cpu()
        subprocess.run(["tcpdump", "-r", str(pcap), "-w", str(tmp / "copy.pcap")], check=True,
                       capture_output=True)
        tcpdump_cpu = children_cpu() - c0
    raw = pcap.stat().st_size
    print(f"{pcap.name}: {n:,} packets, raw pcap {raw / n:.1f} bytes per packet\n")
    print("| step | CPU s per 1M packets | bytes per packet kept | vs raw |")
    print("|---|---:|---:|---:|")
    print(f"| tcpdump -r -w (stand-in for tcpdump's write path) | {tcpdump_cpu * per_m:.2f} | {raw / n:.1f} | 1.00 |")
    for r in rows:
        print(f"| finalize, {r['compression']} (default level) | {r['cpu_s'] * per_m:.2f} | "
              f"{r['size_bytes'] / n:.1f} | {r['size_bytes'] / raw:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

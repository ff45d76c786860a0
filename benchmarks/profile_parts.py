#!/usr/bin/env python3
"""Where tailscope's time goes, per part, in µs per packet: a `perf record` of `tailscope analyze`
grouped by what the sampled code does (read, decode, flow lookup, TCP analysis, ...).

    python3 benchmarks/profile_parts.py TRACE --packets none [--cpu 1] [--freq 8000] [--cpu-seconds S]
    python3 benchmarks/profile_parts.py --data perf.data --frames N     # group an existing recording

Needs perf (linux-perf). The release build keeps line tables (Cargo.toml's `[profile.release]
debug = "line-tables-only"`), so perf names the source file of inlined code: `TcpState::analyze`
with its phases inlined is split by file, and so is `Session::track`. A sample is put in the first
part whose rule matches (shared object, symbol, source file): the rules are PARTS below, in order.
With --cpu-seconds (e.g. the median CPU time of the same command in `run.py`), shares are scaled to
that time; else to the recording's own sampled time (perf's cpu-clock, a little above a plain run).
It prints a table (stdout) and exits 0; a benchmark, never a test.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = "_native."
RUST_ROWS_FILES = ("packets.rs", "events.rs", "columns.rs", "resends.rs", "flows.rs", "queries.rs")

# (part, rule(dso, sym, file) -> bool), first match wins. Kernel samples are read() copies and
# syscalls unless they are page-fault handling (memory).
PAGE_FAULT = re.compile(r"page_fault|clear_page|handle_mm_fault|anonymous_page|alloc_pages|folio|rmqueue|"
                        r"lru|zap_|free_pages|free_unref|mmap|munmap|brk|pte|pmd|do_fault|list_del|memcg|unmap|freelist|"
                        r"frozen_pages|mas_walk|vma|percpu_counter")


def _native(d, s, f):
    return NATIVE in d


PARTS = [
    ("sha256 of the input (libcrypto; the incremental ledger's key)", lambda d, s, f: "libcrypto" in d),
    ("Python: interpreter, imports, the run's bookkeeping",
     lambda d, s, f: "python" in d and NATIVE not in d or "pyarrow" in d or "libarrow" in d
     or "ld-linux" in d or "libffi" in d or "libz." in d or "liblzma" in d or "libm." in d),
    ("compression (zstd)", lambda d, s, f: _native(d, s, f) and re.match(r"(ZSTD|HUF|FSE|HIST|zstd)", s)),
    ("encoding (parquet, arrow writer)", lambda d, s, f: _native(d, s, f) and re.search(r"^<?(parquet|arrow_\w+)::|<parquet|<arrow", s)),
    ("read (pcap records, file reads)",
     lambda d, s, f: _native(d, s, f) and ("pcap_parser" in s or "CaptureReader" in s or "parsers::source" in s
                                           or "parsers::capture" in s or "flate2" in s)),
    ("decode (link, IP, TCP/UDP, QUIC headers)",
     lambda d, s, f: _native(d, s, f) and ("tailscope_parsers" in s or "etherparse" in s)),
    ("flow lookup (hash, table)",
     lambda d, s, f: _native(d, s, f) and ("flow::" in s or "hashbrown" in s or "hash_one" in s or "ahash" in s
                                           or ("Session::track" in s and f in ("flow.rs", "sse2.rs", "bitmask.rs")))),
    ("TCP analysis (tcp::*, scoreboard, RTT)",
     lambda d, s, f: _native(d, s, f) and ("::tcp::" in s or "seq_number" in s or "::rtt::" in s)),
    ("QUIC analysis", lambda d, s, f: _native(d, s, f) and re.search(r"signatures::quic", s)),
    ("detectors (policing, bufferbloat)", lambda d, s, f: _native(d, s, f) and "pathology" in s),
    ("queries (inference, time budget)", lambda d, s, f: _native(d, s, f) and ("queries" in s or "budget" in s)),
    ("rows (staging, events, Session::track/step)",
     lambda d, s, f: _native(d, s, f) and ("tables::" in s or "session::" in s or "Session" in s or "resends" in s
                                           or "events" in s)),
    ("other native (service, TLS, QUIC keys, ...)", _native),
    ("memory (malloc/free, memmove/memset, page faults)",
     lambda d, s, f: ("libc" in d and re.search(r"malloc|free|realloc|memmove|memcpy|memset|unlink_chunk|consolidate|"
                                                r"tcache|sysmalloc|mremap", s))
     or ("kernel" in d and PAGE_FAULT.search(s))),
    ("other kernel and libc (read() copies, syscalls)", lambda d, s, f: True),
]

LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*?)\s{2,}(\S*)\s*$")


def record(args, data: Path) -> int:
    tailscope = args.tailscope or shutil.which("tailscope") or str(Path(sys.executable).parent / "tailscope")
    out = Path(tempfile.mkdtemp(prefix="tailscope-profile-"))
    cmd = ["taskset", "-c", str(args.cpu), args.perf, "record", "-q", "-F", str(args.freq), "-o", str(data), "--",
           tailscope, "analyze", args.trace, "--out", str(out / "ds"), "-q", "--no-checksums", "--jobs", "1",
           "--packets", args.packets]
    subprocess.run(cmd, check=True)
    shutil.rmtree(out, ignore_errors=True)
    sidecar = Path(args.trace + ".json")
    return json.loads(sidecar.read_text()).get("packets", 0) if sidecar.exists() else 0


def group(perf: str, data: Path) -> tuple[dict[str, float], float]:
    rep = subprocess.run([perf, "report", "-i", str(data), "--no-children", "--sort", "dso,sym,srcfile", "--stdio",
                          "--percent-limit", "0"], capture_output=True, text=True, check=True).stdout
    total_ns = 0.0
    m = re.search(r"Event count \(approx\.\): (\d+)", rep)
    if m:
        total_ns = float(m.group(1))
    parts = {name: 0.0 for name, _ in PARTS}
    for line in rep.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        share, dso, sym, src = float(m.group(1)), m.group(2), m.group(3).strip(), m.group(4)
        for name, rule in PARTS:
            if rule(dso, sym, src):
                parts[name] += share
                break
    return parts, total_ns / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="capture to analyze (a make_trace.py trace: its packet count is read from the .json sidecar)")
    ap.add_argument("--packets", default="all", choices=["all", "tagged", "none"], help="tailscope analyze --packets")
    ap.add_argument("--cpu", type=int, default=1, help="core to pin to (default 1)")
    ap.add_argument("--freq", type=int, default=8000, help="perf sampling frequency (default 8000 Hz)")
    ap.add_argument("--data", help="group this perf.data instead of recording")
    ap.add_argument("--frames", type=int, help="packets in the trace (default: from the trace's .json sidecar)")
    ap.add_argument("--cpu-seconds", type=float, help="scale the shares to this CPU time (e.g. run.py's median)")
    ap.add_argument("--tailscope", help="tailscope console script (default: on PATH or next to this Python)")
    ap.add_argument("--perf", default=shutil.which("perf") or "/usr/bin/perf")
    args = ap.parse_args()
    if args.data:
        data, frames = Path(args.data), args.frames or 0
    else:
        if not args.trace:
            ap.error("a TRACE or --data is needed")
        data = Path(tempfile.mkdtemp(prefix="tailscope-perf-")) / "perf.data"
        recorded = record(args, data)
        frames = args.frames or recorded
    if not frames:
        ap.error("--frames is needed (no .json sidecar)")
    parts, sampled_s = group(args.perf, data)
    cpu_s = args.cpu_seconds or sampled_s
    total = sum(parts.values()) or 1.0
    print(f"# {data}: {sampled_s:.3f} s sampled, scaled to {cpu_s:.3f} s CPU over {frames:,} packets")
    print("| part | share | µs per packet |")
    print("|---|---:|---:|")
    for name, share in parts.items():
        print(f"| {name} | {share / total * 100:.1f}% | {share / total * cpu_s / frames * 1e6:.3f} |")
    print(f"| **total** | 100% | {cpu_s / frames * 1e6:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Peak memory of `tailscope analyze` on generated worst cases (benchmarks/README.md, "Memory on
hostile traces"). Not a test; tests/test_bounded_memory.py asserts the caps.

  python3 benchmarks/memory.py                          # all rows below
  python3 benchmarks/memory.py --max-flows 20000 200000 # SYN flood rows for these limits only

Rows:
  syn-flood     1,000,000 SYNs from distinct clients (1M concurrent half-open flows), once per
                --max-flows value
  one-huge-flow one TCP connection carrying 1 GiB (headers captured only), default limit
  chatty-flow   one TCP connection of N request/response exchanges (queries), for two N

Traces come from tests/support/pcapgen.py and are written to benchmarks/out/ (gitignored).
Peak RSS is the tool process's own ru_maxrss, read with os.wait4 in a small intermediate
process (see "How peak RSS is measured" in the README). Standard library only.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE.parent / "tests"))
from support import pcapgen

WRAPPER = r"""
import json, os, sys
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "maxrss_kb": ru.ru_maxrss,
                  "cpu_s": ru.ru_utime + ru.ru_stime}))
"""


def tailscope() -> list[str]:
    exe = shutil.which("tailscope") or "/tmp/venv/bin/tailscope"
    with open(exe, "rb") as fh:
        first = fh.readline().decode().strip()
    python = first[2:].split()[0] if first.startswith("#!") else sys.executable
    return [python, "-m", "tailscope"]


def measure(trace: Path, *extra: str) -> dict:
    ds = OUT / "memory-ds"
    shutil.rmtree(ds, ignore_errors=True)
    cmd = [sys.executable, "-I", "-S", "-c", WRAPPER, *tailscope(), "analyze", str(trace), "--out", str(ds),
           "-q", "--no-checksums", *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    res = json.loads(r.stdout)
    res["wall_s"] = time.perf_counter() - t0
    manifest = json.loads(max((ds / "_runs").glob("*.json")).read_text())
    res["totals"] = manifest["totals"]
    shutil.rmtree(ds, ignore_errors=True)
    return res


def trace(name: str, make) -> Path:
    OUT.mkdir(exist_ok=True)
    p = OUT / name
    if not p.exists():
        make(p)
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-flows", type=int, nargs="+", default=[10_000, 20_000, 50_000, 100_000, 200_000])
    ap.add_argument("--syn-only", action="store_true", help="only the SYN flood rows")
    args = ap.parse_args()
    rows = []
    syn = trace("syn-flood-1000000.pcap", lambda p: pcapgen.write_syn_flood(p, 1_000_000))
    for n in args.max_flows:
        r = measure(syn, "--max-flows", str(n))
        rows.append((f"syn-flood, --max-flows {n:,}", r))
    if not args.syn_only:
        bulk = trace("one-huge-flow-1GiB.pcap", lambda p: pcapgen.write_bulk_flow(p, 1 << 30))
        rows.append(("one huge flow, 1 GiB", measure(bulk)))
        for n in (100_000, 400_000):
            chatty = trace(f"chatty-flow-{n}.pcap", lambda p, n=n: pcapgen.write_chatty_flow(p, n))
            rows.append((f"one flow, {n:,} exchanges", measure(chatty)))
    print("| trace | packets | flows | evicted | wall s | cpu s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        t = r["totals"]
        print(f"| {name} | {t['frames']:,} | {t['flows']:,} | {t['flows_evicted']:,} | {r['wall_s']:.1f} | "
              f"{r['cpu_s']:.1f} | {r['maxrss_kb'] / 1024:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

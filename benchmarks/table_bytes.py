#!/usr/bin/env python3
"""Parquet bytes per million packets of each table, per `--packets` mode (docs/scale.md).

Runs the local engine (`tailscope analyze --no-checksums -q --jobs 1`) on make_trace.py's mix trace
once per mode (all, tagged, none) and prints, per table (packets, flows, queries, events, files),
the rows and the bytes of its part files, both per million trace packets, plus the run's user+sys
CPU. The packet count is the trace's sidecar's; the rows are read from the Parquet footers
(pyarrow). Sizes depend on the trace: this one is the lab's impairment
mix (benchmarks/README.md, "The trace"), where far more packets are tagged than ordinary traffic.

    python benchmarks/table_bytes.py                       # 1M packets, benchmarks/out/
    python benchmarks/table_bytes.py --packets 200000 --json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
TABLES = ("packets", "flows", "queries", "events", "files")
MODES = ("all", "tagged", "none")


def trace(packets: int) -> Path:
    path = OUT / f"trace-{packets}.pcap"
    # Reused when present, as run.py names it; unlike run.py this does not check the sidecar against
    # the samples: delete benchmarks/out/trace-N.pcap (or run run.py) after the samples change.
    if not path.exists():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), "--packets", str(packets),
                        "--out", str(path), "-q"], check=True)
    return path


def table_sizes(dataset: Path) -> dict[str, dict[str, int]]:
    import pyarrow.parquet as pq

    sizes = {}
    for t in TABLES:
        parts = sorted((dataset / t).rglob("part-*.parquet")) if (dataset / t).exists() else []
        sizes[t] = {"parts": len(parts), "bytes": sum(p.stat().st_size for p in parts),
                    "rows": sum(pq.ParquetFile(p).metadata.num_rows for p in parts)}
    return sizes


def run_mode(tailscope: list[str], pcap: Path, mode: str) -> dict:
    out = OUT / f"table-bytes-{mode}"
    shutil.rmtree(out, ignore_errors=True)
    pid = os.fork()
    if pid == 0:  # child: exec the tool so wait4 reports its own CPU
        os.execvp(tailscope[0], [*tailscope, "analyze", str(pcap), "--out", str(out), "--packets", mode,
                                 "--no-checksums", "-q", "--jobs", "1"])
    _, status, ru = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tailscope analyze --packets {mode} failed ({status})")
    return {"mode": mode, "cpu_s": ru.ru_utime + ru.ru_stime, "tables": table_sizes(out)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000, help="trace size (default 1000000)")
    ap.add_argument("--tailscope", default=None, help="tailscope executable (default: next to this Python)")
    ap.add_argument("--json", action="store_true", help="JSON instead of the Markdown table")
    a = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    exe = a.tailscope or str(Path(sys.executable).with_name("tailscope"))
    pcap = trace(a.packets)
    sidecar = json.loads(pcap.with_suffix(".pcap.json").read_text())
    n = sidecar.get("packets") or a.packets
    results = [run_mode([exe], pcap, m) for m in MODES]
    if a.json:
        print(json.dumps({"trace": str(pcap), "packets": n, "results": results}, indent=1, default=str))
        return 0
    per_m = 1e6 / n
    print(f"{pcap.name}: {n:,} packets, {pcap.stat().st_size / n:.1f} pcap bytes per packet; "
          "per million trace packets: MB of Parquet (rows)\n")
    print("| `--packets` | " + " | ".join(TABLES) + " | all tables | CPU s |")
    print("|---|" + "---:|" * (len(TABLES) + 2))
    for r in results:
        cells = [f"{r['tables'][t]['bytes'] * per_m / 1e6:.3f} ({r['tables'][t]['rows'] * per_m:,.0f})"
                 for t in TABLES]
        total = sum(r["tables"][t]["bytes"] for t in TABLES) * per_m / 1e6
        print(f"| `{r['mode']}` | " + " | ".join(cells) + f" | {total:.2f} | {r['cpu_s'] * per_m:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

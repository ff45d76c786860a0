#!/usr/bin/env python3
"""Spark engine benchmark: packets per second per executor core, next to the local engine.

Builds (or reuses) the benchmark trace (make_trace.py), cuts it into --files files spread over
--captures captures (edge servers: a directory each, its files a rotation set, as edge agents
ship them), then times, each in its own process pinned to the cores it may use:

  local[1]        tailscope analyze (the local engine) on 1 core, --jobs 1
  local[2]        the local engine on 2 cores (a capture per thread)
  spark[1]        the Spark engine, local[1] on 1 core: a task per bin of capture groups
  spark[2]        the Spark engine, local[2] on 2 cores
  spark-split[N]  --spark-split-captures: frames shuffled by flow group (captures too large for a task)

Two times per Spark row: `run` is the analyze() call in a JVM already started and warmed up by a
run on a small capture (what a long-lived cluster pays per batch of files), `wall` adds starting
Spark and the warm-up. Printed: packets/s, packets/s per
core, and the speed-up from 1 to 2 cores. Same datasets are checked equal row counts.
This is a benchmark, not a test: it exits 0 whatever the figures are.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))

import make_trace  # noqa: E402

RUNNER = r"""
import json, sys, time
t0 = time.perf_counter()
from tailscope.jobs.run.local import AnalyzeOptions
engine, inputs, out, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
options = AnalyzeOptions(progress=False, checksums=False, jobs=cores)
if engine == "local":
    from tailscope.jobs.run.local import analyze
    t1 = time.perf_counter()
    r = analyze([inputs], out, options)
else:
    from tailscope.jobs.run import spark_engine as se
    split = engine == "spark-split"
    spark_options = se.SparkOptions(master=f"local[{cores}]", partitions=4 * cores if split else None, split_captures=split)
    se.spark_session(spark_options)
    # The first job of a JVM pays for class loading, JIT and Python worker start (~10 s): a
    # warm-up run on a small capture, as a long-lived cluster would have had.
    import tempfile
    with tempfile.TemporaryDirectory() as warm:
        se.analyze([sys.argv[5]], warm + "/ds", options, spark_options)
    t1 = time.perf_counter()
    r = se.analyze([inputs], out, options, spark_options)
t2 = time.perf_counter()
print(json.dumps({"wall_s": t2 - t0, "run_s": t2 - t1, "frames": r.manifest["totals"]["frames"],
                  "rows": r.manifest["totals"]["rows"], "status": r.status}))
"""


def split(trace: Path, files: int, captures: int, dest: Path) -> None:
    """Files of about equal sizes, dealt in turn to `captures` edge servers (dest/edge-a/,
    edge-b/, ...), each a tcpdump -C style rotation set (trace.pcap0, trace.pcap1, ...)."""
    data = trace.read_bytes()
    header, pos, cut_every = data[:24], 24, max(1, (len(data) - 24) // files + 1)
    n, start = 0, 24
    while pos < len(data):
        incl = struct.unpack("<I", data[pos + 8 : pos + 12])[0]
        pos += 16 + incl
        if pos - start >= cut_every or pos >= len(data):
            edge = dest / f"edge-{chr(ord('a') + n % captures)}"
            edge.mkdir(parents=True, exist_ok=True)
            (edge / f"trace.pcap{n // captures}").write_bytes(header + data[start:pos])
            n, start = n + 1, pos


def run(python: str, engine: str, inputs: Path, cores: int) -> dict:
    out = OUT / f"spark-bench-{engine}-{cores}"
    shutil.rmtree(out, ignore_errors=True)
    cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cores])
    warmup = HERE.parent / "samples" / "clean.pcap"
    cmd = ["taskset", "-c", cpus, python, "-c", RUNNER, engine, str(inputs), str(out), str(cores), str(warmup)]
    env = dict(os.environ, PYSPARK_PYTHON=python)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{engine} on {cores} core(s) failed:\n{r.stderr[-3000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    shutil.rmtree(out, ignore_errors=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packets", type=int, default=1_000_000, help="trace size (default 1000000)")
    ap.add_argument("--files", type=int, default=8, help="files the trace is cut into (default 8)")
    ap.add_argument("--captures", type=int, default=4, help="captures (edge servers) the files are dealt to (default 4)")
    ap.add_argument("--python", default=None, help="interpreter with tailscope[spark] installed (default: this one)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args(argv)
    python = args.python or sys.executable
    OUT.mkdir(exist_ok=True)
    trace = OUT / f"trace-{args.packets}.pcap"
    if not trace.exists():
        make_trace.build(trace, args.packets, seed=make_trace.DEFAULT_SEED, rate=make_trace.DEFAULT_RATE,
                         sample_dir=make_trace.DEFAULT_SAMPLES, names=None, quiet=True)
    rot = OUT / f"captures-{args.packets}-{args.files}-{args.captures}"
    if not rot.is_dir():
        split(trace, args.files, args.captures, rot)
    cores = len(os.sched_getaffinity(0))
    rows = [("local", 1), ("spark", 1), ("spark-split", 1)]
    if cores >= 2:
        rows += [("local", 2), ("spark", 2), ("spark-split", 2)]
    results = {}
    for engine, n in rows:
        print(f"running {engine} on {n} core(s)...", file=sys.stderr, flush=True)
        results[f"{engine}[{n}]"] = run(python, engine, rot, n)
    counts = {k: v["rows"] for k, v in results.items()}
    if len({json.dumps(c, sort_keys=True) for c in counts.values()}) != 1:
        print(f"warning: the runs wrote different row counts: {counts}", file=sys.stderr)
    frames = results["local[1]"]["frames"]
    table = []
    for name, r in results.items():
        n = int(name.split("[")[1].rstrip("]"))
        pps = frames / r["run_s"]
        table.append({"row": name, "cores": n, "frames": frames, "run_s": round(r["run_s"], 2), "wall_s": round(r["wall_s"], 2),
                      "pps": round(pps), "pps_per_core": round(pps / n)})
    local = results["local[1]"]["run_s"]
    for t in table:
        t["per_core_vs_local"] = round(local / (t["run_s"] * t["cores"]), 2)
    speedup = (results["spark[1]"]["run_s"] / results["spark[2]"]["run_s"]) if "spark[2]" in results else None
    if args.json:
        print(json.dumps({"rows": table, "spark_speedup_1_to_2": speedup, "files": args.files, "captures": args.captures}, indent=2))
        return 0
    print(f"trace: {frames} packets in {args.files} files of {args.captures} captures")
    print(f"{'row':<15} {'cores':>5} {'run s':>8} {'wall s':>8} {'packets/s':>11} {'per core':>10} {'per core vs local[1]':>21}")
    for t in table:
        print(f"{t['row']:<15} {t['cores']:>5} {t['run_s']:>8} {t['wall_s']:>8} {t['pps']:>11,} {t['pps_per_core']:>10,} "
              f"{t['per_core_vs_local']:>20}x")
    if speedup:
        print(f"spark speed-up 1 -> 2 cores: {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A fleet's many small runs, before and after `tailscope compact` (issue 31).

One synthetic trace (benchmarks/make_trace.py) spanning --hours hours is cut into hourly files
(editcap -i 3600); each hour is analysed in its own run into one dataset (as an edge server's
hourly upload would be), the same files in one run into another. Then `tailscope stats`,
`tailscope report` and every dashboard panel's SQL (dashboards/json, run as tests/test_dashboards.py
runs them) are timed on: the hourly dataset, the same after `tailscope compact`, and the one-run
dataset. Prints a Markdown table (best of --repeat).

    python benchmarks/compact.py --hours 168 --packets 1000000
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tailscope(*args) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], check=True, capture_output=True, text=True)
    return time.perf_counter() - t0


def dashboards_s(out: Path) -> tuple[float, int]:
    sys.path.insert(0, str(ROOT / "tests"))
    import test_dashboards as td

    from tailscope.jobs.analytics import db

    con = db.connect(out)
    try:
        t0 = time.perf_counter()
        n = 0
        rng = td.data_time_range(con)
        for f in sorted((ROOT / "dashboards" / "json").glob("*.json")):
            dash = json.loads(f.read_text())
            selected = td.resolve_variables(con, dash, rng, {})
            for panel in td.walk_panels(dash["panels"]):
                for t in panel.get("targets", []):
                    con.sql(td.interpolate(t["rawSql"], selected, rng)).fetchall()  # timed, not checked
                    n += 1
        return time.perf_counter() - t0, n
    finally:
        con.close()


def measure(out: Path, tmp: Path, repeat: int) -> dict:
    parts = sum(1 for _ in out.rglob("part-*.parquet"))
    stats = min(tailscope("stats", out) for _ in range(repeat))
    report = min(tailscope("report", out, "--out", tmp / "report") for _ in range(repeat))
    dash = min(dashboards_s(out) for _ in range(repeat))
    return {"parts": parts, "stats_s": stats, "report_s": report, "dashboards_s": dash[0], "panels": dash[1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=int, default=168, help="hourly runs (default 168, a week)")
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets of the whole trace (default 1000000)")
    ap.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "out" / "compact")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args(argv)
    shutil.rmtree(a.work, ignore_errors=True)
    hours = a.work / "hours"
    hours.mkdir(parents=True)
    trace = a.work / "trace.pcap"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), "--packets", str(a.packets),
                    "--rate", str(a.packets / (a.hours * 3600)), "--out", str(trace)], check=True, capture_output=True)
    subprocess.run(["editcap", "-i", "3600", str(trace), str(hours / "h.pcap")], check=True, capture_output=True)
    files = sorted(hours.iterdir())
    hourly, one = a.work / "hourly", a.work / "one"
    t0 = time.perf_counter()
    for f in files:
        tailscope("analyze", f, "--out", hourly, "--quiet", "--compact-over", "0")
    runs_s = time.perf_counter() - t0
    tailscope("analyze", hours, "--out", one, "--quiet", "--compact-over", "0")
    rows = {"hourly runs": measure(hourly, a.work, a.repeat)}
    rows["hourly, compacted"] = {"compact_s": tailscope("compact", hourly), **measure(hourly, a.work, a.repeat)}
    rows["one run"] = measure(one, a.work, a.repeat)
    print(f"{len(files)} hourly files, {a.packets} packets; {len(files)} runs took {runs_s:.1f} s\n")
    print("| dataset | part files | compact s | stats s | report s | dashboards s (panels) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        c = f"{r['compact_s']:.2f}" if "compact_s" in r else ""
        print(f"| {name} | {r['parts']} | {c} | {r['stats_s']:.2f} | {r['report_s']:.2f} | {r['dashboards_s']:.2f} ({r['panels']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

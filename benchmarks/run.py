#!/usr/bin/env python3
"""Throughput benchmark: tailscope vs. tcptrace, tshark and the libpcap read floor.

Builds (or reuses) a trace of at least --packets packets from the lab samples
(benchmarks/make_trace.py; --trace bulk: only the samples of bulk transfers with loss, policing,
queues and reordering), then runs, pinned to one core with ``taskset -c <cpu>``:

  tailscope          tailscope analyze TRACE --out DIR -q --no-checksums --jobs 1
                     (decode + flows + every TCP signature + Parquet: the full local engine)
  tcptrace           tcptrace -n -l -r TRACE > out/tcptrace.txt
  tshark             tshark -n -r TRACE -T fields -e frame.number -e tcp.analysis.flags
                     (Wireshark's TCP sequence analysis on every packet)
  tcpdump            tcpdump -r TRACE -w /dev/null   (the libpcap read floor)

and, not pinned, `tailscope:all-cores` (the same analyze with its default --jobs, every core:
the wall-clock row; tcptrace and tshark are single-threaded);

and, unless --no-breakdown, two rows that split tailscope's time (no targets apply to them):

  tailscope:native   the Rust Session driven directly (decode + flows + signatures into Arrow
                     batches, dropped): no Parquet, no dataset bookkeeping
  tailscope:startup  `tailscope analyze` of an empty capture (interpreter, imports, an empty
                     run); Parquet and the rest ~= tailscope - native - startup

Rounds are interleaved (each round runs every tool once) so that a change of load on the machine
hits all tools alike; the table shows the median wall time of --repeat rounds and the largest
peak RSS. Wall time is measured around each run; CPU time (user+sys) comes from wait4(); peak
RSS is the tool process's own ru_maxrss, reported by GNU time (/usr/bin/time, package `time`)
when installed, else by a small Python wrapper (see measure()). taskset execs the tool, so the
measured process is the tool itself.

Targets (issue 15): tailscope on one core >= 1.5x tcptrace's packets/s by CPU time; with every
core >= 2.5x tcptrace by wall clock; start-up (analyze of an empty capture) <= 80 ms; peak RSS
<= 256 MiB.
This is a benchmark, not a test: it exits 0 whatever the figures, unless --check is given.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
sys.path.insert(0, str(HERE))
import make_trace  # noqa: E402

TARGET_CPU_RATIO_VS_TCPTRACE = 1.5
TARGET_WALL_RATIO_ALL_CORES = 2.5
TARGET_STARTUP_S = 0.080
TARGET_PEAK_RSS_MIB = 256
# --trace bulk: the samples whose connections are bulk transfers meeting loss, a policer, a
# queue or reordering
BULK_SAMPLES = ["bufferbloat", "policing", "midburst_loss", "reordering"]
# --trace window: long transfers with this many segments in flight, one after the other
WINDOW_TRACE = [1000, 3000, 10000]
# --sweep: segments in flight
SWEEP_WINDOWS = [10, 100, 1000, 10000]

NATIVE_SNIPPET = r"""
import sys, time
import pyarrow  # the batches arrive as pyarrow objects: import it before the clock starts
from tailscope import _native
c0, w0 = time.process_time(), time.perf_counter()
s = _native.Session("bench")
c = s.open(sys.argv[1], "trace")
rows = 0
while not c.done:
    for t, b in s.step(c):
        rows += b.num_rows if t != "query_flows" else 0
for t, b in s.finish():
    rows += b.num_rows if t != "query_flows" else 0
print(c.stats()["frames"], rows, time.process_time() - c0, time.perf_counter() - w0)
"""

# `tailscope analyze` of an empty capture: the interpreter, the imports, an empty run's commit.
STARTUP_SNIPPET = r"""
import sys, tempfile
from tailscope.cli import main
with tempfile.TemporaryDirectory() as d:
    with open(d + "/empty.pcap", "wb") as f:
        f.write(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
    sys.exit(main(["analyze", d + "/empty.pcap", "--out", d + "/ds", "-q", "--no-checksums"]))
"""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# environment


def find_tailscope(explicit: str | None) -> tuple[str | None, str | None]:
    """The tailscope console script and the Python interpreter it runs with."""
    candidates = []
    if explicit:
        candidates.append(explicit)
    if os.environ.get("TAILSCOPE"):
        candidates.append(os.environ["TAILSCOPE"])
    candidates.append(str(Path(sys.executable).parent / "tailscope"))
    which = shutil.which("tailscope")
    if which:
        candidates.append(which)
    candidates.append("/tmp/venv/bin/tailscope")
    for c in candidates:
        p = Path(c)
        if p.is_file() and os.access(p, os.X_OK):
            python = None
            try:
                first = p.open("rb").readline().decode(errors="replace").strip()
                if first.startswith("#!"):
                    python = first[2:].strip().split()[0]
            except OSError:
                pass
            if not python or not Path(python).exists():
                python = str(p.parent / "python")
            return str(p), python if Path(python).exists() else None
    return None, None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total_mib() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def loadavg() -> list[float]:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def tool_version(argv: list[str], pattern: str) -> str | None:
    import subprocess

    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(pattern, r.stdout + r.stderr)
    return m.group(0) if m else None


# ---------------------------------------------------------------------------------------------
# running one measured process


# Peak RSS needs care: ru_maxrss of a process that exec'ed is at least the high-water RSS of the
# image it exec'ed *from* (Linux records the old mm's high-water mark at exec), and a child spawned
# directly from this script starts as a copy of it (tens of MiB). So the tool is started by a small
# intermediate that reports the tool's own rusage: GNU time (~1 MiB floor) when installed, else a
# bare `python -I -S` wrapper (~8 MiB floor, which only shows for tiny tools such as tcpdump).
# CPU times come from wait4() on the intermediate, which includes the child it reaped.

RUSAGE_WRAPPER = r"""
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawnp(argv[0], argv, os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as fh:
    json.dump({"maxrss_kib": ru.ru_maxrss, "wall_s": wall, "user_s": ru.ru_utime, "sys_s": ru.ru_stime}, fh)
sys.exit(os.waitstatus_to_exitcode(status) & 255)
"""


def find_gnu_time() -> str | None:
    exe = shutil.which("time", path="/usr/bin:/bin:/usr/local/bin")
    if not exe:
        return None
    import subprocess

    try:
        r = subprocess.run([exe, "-f", "%M", "-o", os.devnull, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if r.returncode == 0 else None


def measure(argv: list[str], stdout: str = os.devnull, stderr: str = os.devnull, pin: list[str] | None = None,
            gnu_time: str | None = None) -> dict:
    """Run argv (pinned); wall/user/sys seconds, peak RSS of the tool's process, exit status."""
    rss_file = OUT / ".rss"
    rss_file.unlink(missing_ok=True)
    if gnu_time:
        full = [gnu_time, "-f", "%M", "-o", str(rss_file)] + (pin or []) + argv
    else:
        full = [sys.executable, "-I", "-S", "-c", RUSAGE_WRAPPER, str(rss_file)] + (pin or []) + argv
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
        (os.POSIX_SPAWN_OPEN, 2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
    ]
    t0 = time.perf_counter()
    pid = os.posix_spawn(full[0], full, os.environ, file_actions=actions)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    maxrss_kib = None
    user, sys_ = ru.ru_utime, ru.ru_stime
    try:
        text = rss_file.read_text().strip()
        if gnu_time:  # "Command exited with non-zero status N" may come first
            maxrss_kib = int(text.splitlines()[-1])
        else:  # the wrapper's own start-up must not count: take its figures for the child
            rep = json.loads(text)
            maxrss_kib, wall, user, sys_ = rep["maxrss_kib"], rep["wall_s"], rep["user_s"], rep["sys_s"]
    except (OSError, ValueError, IndexError, KeyError):
        pass
    return {
        "wall_s": wall,
        "user_s": user,
        "sys_s": sys_,
        "cpu_s": user + sys_,
        "max_rss_mib": maxrss_kib / 1024.0 if maxrss_kib is not None else float("nan"),
        "exit": os.waitstatus_to_exitcode(status),
    }


# ---------------------------------------------------------------------------------------------
# tools


class Tool:
    def __init__(self, name, argv, *, stdout=os.devnull, before=None, parse=None, main=True, what="", pinned=True):
        self.name = name
        self.pinned = pinned  # False: the tool may use every core
        self.argv = argv
        self.stdout = stdout
        self.before = before  # callable run (untimed) before each run
        self.parse = parse  # callable(stdout_path) -> dict of what the tool reported ("packets", ...)
        self.main = main  # False for breakdown rows
        self.what = what
        self.runs: list[dict] = []
        self.reported_packets = None


def tailscope_report(stdout):
    try:
        return {"packets": json.loads(Path(stdout).read_text())["totals"]["frames"]}
    except (OSError, ValueError, KeyError):
        return {}


def tcptrace_report(stdout):
    try:
        with open(stdout, errors="replace") as fh:
            for _ in range(20):
                m = re.match(r"\s*(\d+) packets seen", fh.readline())
                if m:
                    return {"packets": int(m.group(1))}
    except OSError:
        pass
    return {}


def native_report(stdout):
    """Frames, rows, and the CPU/wall seconds of the decode loop alone (after the imports)."""
    try:
        frames, rows, cpu, wall = Path(stdout).read_text().split()[:4]
        return {"packets": int(frames), "rows": int(rows), "loop_cpu_s": float(cpu), "loop_wall_s": float(wall)}
    except (OSError, ValueError):
        return {}


def build_tools(trace: Path, ts_bin, ts_python, selected: set[str], breakdown: bool,
                kept: tuple[str, ...] = ()) -> tuple[list[Tool], list[str]]:
    tools, missing = [], []
    ts_out = OUT / "run-tailscope"

    def clean_ts_out():
        shutil.rmtree(ts_out, ignore_errors=True)

    if "tailscope" in selected:
        if ts_bin:
            tools.append(
                Tool(
                    "tailscope",
                    [ts_bin, "analyze", str(trace), "--out", str(ts_out), "-q", "--no-checksums", "--json", "--jobs", "1"],
                    stdout=str(OUT / "tailscope.json"),
                    before=clean_ts_out,
                    parse=tailscope_report,
                    what="decode + flows + TCP signatures + Parquet",
                )
            )
            for k in kept:
                tools.append(
                    Tool(
                        f"tailscope:{k}",
                        [ts_bin, "analyze", str(trace), "--out", str(ts_out), "-q", "--no-checksums", "--json", "--jobs", "1",
                         "--packets", k],
                        stdout=str(OUT / f"tailscope-{k}.json"),
                        before=clean_ts_out,
                        parse=tailscope_report,
                        main=False,
                        what=f"the same, --packets {k}",
                    )
                )
            tools.append(
                Tool(
                    "tailscope:all-cores",
                    [ts_bin, "analyze", str(trace), "--out", str(ts_out), "-q", "--no-checksums", "--json"],
                    stdout=str(OUT / "tailscope-all.json"),
                    before=clean_ts_out,
                    parse=tailscope_report,
                    main=False,
                    pinned=False,
                    what="the same, every core (default --jobs)",
                )
            )
            if breakdown and ts_python:
                tools.append(
                    Tool(
                        "tailscope:native",
                        [ts_python, "-c", NATIVE_SNIPPET, str(trace)],
                        stdout=str(OUT / "native.txt"),
                        parse=native_report,
                        main=False,
                        what="Rust Session only, Arrow batches dropped (no Parquet)",
                    )
                )
                tools.append(
                    Tool(
                        "tailscope:startup",
                        [ts_python, "-c", STARTUP_SNIPPET],
                        main=False,
                        what="analyze of an empty capture",
                    )
                )
        else:
            missing.append("tailscope (install the package, or pass --tailscope PATH)")
    if "tcptrace" in selected:
        exe = shutil.which("tcptrace")
        if exe:
            tools.append(
                Tool(
                    "tcptrace",
                    [exe, "-n", "-l", "-r", str(trace)],
                    stdout=str(OUT / "tcptrace.txt"),
                    parse=tcptrace_report,
                    what="tcptrace -n -l -r (long stats + RTT)",
                )
            )
        else:
            missing.append("tcptrace (apt-get install tcptrace)")
    if "tshark" in selected:
        exe = shutil.which("tshark")
        if exe:
            tools.append(
                Tool(
                    "tshark",
                    [exe, "-n", "-r", str(trace), "-T", "fields", "-e", "frame.number", "-e", "tcp.analysis.flags"],
                    what="tshark TCP sequence analysis, a field per packet",
                )
            )
        else:
            missing.append("tshark (apt-get install tshark)")
    if "tcpdump" in selected:
        exe = shutil.which("tcpdump")
        if exe:
            tools.append(
                Tool("tcpdump", [exe, "-r", str(trace), "-w", os.devnull], what="libpcap read floor")
            )
        else:
            missing.append("tcpdump (apt-get install tcpdump)")
    return tools, missing


# ---------------------------------------------------------------------------------------------
# trace


def ensure_window_trace(packets: int, seed: int, rebuild: bool, windows: list[int]) -> tuple[Path, dict]:
    """The --trace window trace (make_trace.py --window): built once per size, seed and windows."""
    trace = OUT / f"trace-window-{'-'.join(map(str, windows))}-{packets}.pcap"
    side = Path(str(trace) + ".json")
    if trace.exists() and side.exists() and not rebuild:
        try:
            meta = json.loads(side.read_text())
            if (meta.get("requested_packets"), meta.get("seed"), meta.get("windows")) == (packets, seed, windows) \
                    and trace.stat().st_size == meta.get("bytes"):
                log(f"reusing {trace} ({meta['packets']:,} packets)")
                return trace, meta
        except (ValueError, TypeError, OSError):
            pass
    log(f"building {trace} (long transfers, {windows} segments in flight)")
    return trace, make_trace.build_window(trace, packets, windows, seed=seed)


def ensure_trace(packets: int, seed: int, rate: float, rebuild: bool, names: list[str] | None = None) -> tuple[Path, dict]:
    trace = OUT / (f"trace-{packets}.pcap" if names is None else f"trace-bulk-{packets}.pcap")
    side = Path(str(trace) + ".json")
    samples, _ = make_trace.load_samples(make_trace.DEFAULT_SAMPLES, names)
    want_samples = [(s["name"], s["sha256"]) for s in samples]
    if trace.exists() and side.exists() and not rebuild:
        try:
            meta = json.loads(side.read_text())
            same = (
                meta.get("requested_packets") == packets
                and meta.get("seed") == seed
                and float(meta.get("rate_pps")) == float(rate)
                and [(s["name"], s["sha256"]) for s in meta.get("samples", [])] == want_samples
                and trace.stat().st_size == meta.get("bytes")
            )
        except (ValueError, TypeError, KeyError, OSError):
            same = False
        if same:
            log(f"reusing {trace} ({meta['packets']:,} packets)")
            return trace, meta
        log(f"{trace} was built with other parameters or samples: rebuilding")
    log(f"building {trace} ...")
    meta = make_trace.build(trace, packets, seed=seed, rate=rate, names=names)
    return trace, meta


def warm_cache(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 22):
            pass


# ---------------------------------------------------------------------------------------------
# main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="tailscope vs tcptrace vs tcpdump, one core (see README.md)")
    ap.add_argument("--packets", type=int, default=1_000_000, help="trace size, at least this many packets (default 1000000)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the median wall time is reported (default 5)")
    ap.add_argument("--cpu", type=int, default=0, help="core to pin every tool to (default 0)")
    ap.add_argument("--tools", default="tailscope,tcptrace,tshark,tcpdump", help="comma-separated subset of tailscope,tcptrace,tshark,tcpdump")
    ap.add_argument("--trace", choices=["mix", "bulk", "window"], default="mix",
                    help="mix: every lab sample (default); bulk: bulk transfers with loss, policing, queues, reordering; "
                         "window: long transfers with 1,000-10,000 segments in flight (make_trace.py --window)")
    ap.add_argument("--kept", default="",
                    help="also run tailscope with these --packets choices (comma-separated: tagged,none), as rows "
                         "tailscope:tagged, tailscope:none")
    ap.add_argument("--sweep", action="store_true",
                    help="instead of the table: CPU µs per packet of tailscope --packets none and tcptrace against "
                         "segments in flight (10, 100, 1,000, 10,000), each on a window trace of --packets packets")
    ap.add_argument("--no-breakdown", action="store_true", help="skip the tailscope:native and tailscope:startup rows")
    ap.add_argument("--tailscope", help="path of the tailscope console script (default: next to this Python, on PATH, or /tmp/venv/bin)")
    ap.add_argument("--seed", type=int, default=make_trace.DEFAULT_SEED, help="trace seed")
    ap.add_argument("--rate", type=float, default=make_trace.DEFAULT_RATE, help="trace packets per second of trace time (connection overlap)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the trace even if a matching one exists")
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout (the table goes to stderr)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--no-gnu-time", action="store_true", help="measure peak RSS with the Python wrapper even if /usr/bin/time exists")
    args = ap.parse_args(argv)
    if args.packets <= 0 or args.repeat <= 0:
        ap.error("--packets and --repeat must be positive")
    selected = {t.strip() for t in args.tools.split(",") if t.strip()}
    unknown = selected - {"tailscope", "tcptrace", "tshark", "tcpdump"}
    if unknown:
        ap.error(f"unknown tool(s): {', '.join(sorted(unknown))}")

    kept = tuple(k.strip() for k in args.kept.split(",") if k.strip())
    if set(kept) - {"all", "tagged", "none"}:
        ap.error("--kept: choices are all, tagged, none")

    OUT.mkdir(parents=True, exist_ok=True)
    ts_bin, ts_python = find_tailscope(args.tailscope)
    if args.sweep:
        return sweep(args, ts_bin)
    if args.trace == "window":
        trace, meta = ensure_window_trace(args.packets, args.seed, args.rebuild, WINDOW_TRACE)
    else:
        trace, meta = ensure_trace(args.packets, args.seed, args.rate, args.rebuild, BULK_SAMPLES if args.trace == "bulk" else None)
    tools, missing = build_tools(trace, ts_bin, ts_python, selected, not args.no_breakdown, kept)
    for m in missing:
        log(f"warning: not found, skipped: {m}")
    if not tools:
        log("nothing to run")
        return 2

    taskset = shutil.which("taskset")
    if taskset:
        pin = [taskset, "-c", str(args.cpu)]
        pinning = f"taskset -c {args.cpu}"
    else:  # children inherit our affinity
        os.sched_setaffinity(0, {args.cpu})
        pin = []
        pinning = f"sched_setaffinity({{{args.cpu}}}) (taskset not found)"

    gnu_time = None if args.no_gnu_time else find_gnu_time()
    rss_method = f"GNU time ({gnu_time})" if gnu_time else "python -I -S wrapper + wait4 (no GNU time; ~8 MiB floor)"

    warm_cache(trace)
    load_before = loadavg()
    started = dt.datetime.now().astimezone()
    log(f"{len(tools)} tools x {args.repeat} rounds on {trace.name}, pinned with {pinning}; load average {load_before}")
    for r in range(args.repeat):
        for t in tools:
            if t.before:
                t.before()
            err = str(OUT / f"{t.name.replace(':', '-')}.stderr")
            res = measure(t.argv, stdout=t.stdout, stderr=err, pin=pin if t.pinned else None, gnu_time=gnu_time)
            res["load1"] = loadavg()[:1]
            t.runs.append(res)
            if t.parse and res["exit"] == 0:
                res["reported"] = t.parse(t.stdout)
                if t.reported_packets is None:
                    t.reported_packets = res["reported"].get("packets")
            if res["exit"] != 0:
                kept = Path(err).with_suffix(f".round{r + 1}.stderr")
                shutil.copyfile(err, kept)
                tail = kept.read_text(errors="replace").strip().splitlines()[-3:]
                log(f"warning: {t.name} exited with {res['exit']} (stderr kept in {kept}): {' | '.join(tail)}")
            log(f"  round {r + 1}/{args.repeat} {t.name:18s} {res['wall_s']:7.3f} s wall {res['cpu_s']:7.3f} s cpu {res['max_rss_mib']:7.1f} MiB")
    load_after = loadavg()

    n = meta["packets"]
    rows = []
    for t in tools:
        # A failed run (non-zero exit) does not count; a tool with no good run is reported as failed.
        good = [x for x in t.runs if x["exit"] == 0] or t.runs
        wall = statistics.median(x["wall_s"] for x in good)
        cpu = statistics.median(x["cpu_s"] for x in good)
        rows.append(
            {
                "tool": t.name,
                "what": t.what,
                "argv": t.argv,
                "breakdown": not t.main,
                "packets": n if t.name != "tailscope:startup" else 0,
                "packets_reported": t.reported_packets,
                "wall_s": wall,
                "wall_s_min": min(x["wall_s"] for x in good),
                "cpu_s": cpu,
                "pps": n / wall if t.name != "tailscope:startup" else None,
                "pps_cpu": n / cpu if t.name != "tailscope:startup" and cpu > 0 else None,
                "max_rss_mib": max(x["max_rss_mib"] for x in good),
                "exit_codes": sorted({x["exit"] for x in t.runs}),
                "failed_runs": sum(x["exit"] != 0 for x in t.runs),
                "ok": any(x["exit"] == 0 for x in t.runs),
                "runs": t.runs,
            }
        )
    by = {r["tool"]: r for r in rows}
    for r in rows:
        for ref in ("tcptrace", "tcpdump"):
            ok = r["pps"] and ref in by and by[ref]["pps"]
            r[f"x_{ref}"] = r["pps"] / by[ref]["pps"] if ok else None
            r[f"x_{ref}_cpu"] = r["pps_cpu"] / by[ref]["pps_cpu"] if ok and r["pps_cpu"] and by[ref]["pps_cpu"] else None

    # Where tailscope's CPU time goes: interpreter + imports, the native decode loop (timed inside
    # the tailscope:native process, after its imports), and the rest (Parquet + dataset code).
    split = None
    if {"tailscope", "tailscope:native", "tailscope:startup"} <= by.keys():
        native_tool = next(t for t in tools if t.name == "tailscope:native")
        loops = [x["reported"]["loop_cpu_s"] for x in native_tool.runs if "loop_cpu_s" in x.get("reported", {})]
        if loops:
            full, st, nat = by["tailscope"]["cpu_s"], by["tailscope:startup"]["cpu_s"], statistics.median(loops)
            split = {
                "total_cpu_s": round(full, 3),
                "startup_cpu_s": round(st, 3),
                "native_loop_cpu_s": round(nat, 3),
                "parquet_and_rest_cpu_s": round(max(0.0, full - st - nat), 3),
            }

    targets = {}
    if "tailscope" in by:
        ts = by["tailscope"]
        if ts["x_tcptrace_cpu"] is not None:
            targets["cpu_one_core"] = {
                "target": f"one core >= {TARGET_CPU_RATIO_VS_TCPTRACE:g}x tcptrace by CPU",
                "measured": round(ts["x_tcptrace_cpu"], 3),
                "ok": ts["x_tcptrace_cpu"] >= TARGET_CPU_RATIO_VS_TCPTRACE,
            }
        if by.get("tailscope:all-cores", {}).get("x_tcptrace") is not None:
            x = by["tailscope:all-cores"]["x_tcptrace"]
            targets["wall_all_cores"] = {
                "target": f"all cores >= {TARGET_WALL_RATIO_ALL_CORES:g}x tcptrace by wall",
                "measured": round(x, 3),
                "ok": x >= TARGET_WALL_RATIO_ALL_CORES,
            }
        if "tailscope:startup" in by:
            st = by["tailscope:startup"]["wall_s"]
            targets["startup"] = {"target": f"start-up <= {TARGET_STARTUP_S * 1000:g} ms", "measured_s": round(st, 3), "ok": st <= TARGET_STARTUP_S}
        targets["memory"] = {
            "target": f"peak RSS <= {TARGET_PEAK_RSS_MIB} MiB",
            "measured_mib": round(ts["max_rss_mib"], 1),
            "ok": ts["max_rss_mib"] <= TARGET_PEAK_RSS_MIB,
        }

    result = {
        "date": started.isoformat(timespec="seconds"),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "mem_total_mib": mem_total_mib(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "load_before": load_before,
            "load_after": load_after,
            "pinning": pinning,
            "rss_method": rss_method,
        },
        "versions": {
            "tcptrace": tool_version(["tcptrace", "-v"], r"version [\d.]+") if "tcptrace" in by else None,
            "tcpdump": tool_version(["tcpdump", "--version"], r"tcpdump version [\d.]+") if "tcpdump" in by else None,
            "tshark": tool_version(["tshark", "--version"], r"TShark \(Wireshark\) [\d.]+") if "tshark" in by else None,
            "libpcap": tool_version(["tcpdump", "--version"], r"libpcap version [\d.]+") if "tcpdump" in by else None,
            "tailscope": tool_version([ts_bin, "--version"], r"tailscope [\w.+-]+") if ts_bin else None,
        },
        "trace": {k: meta.get(k) for k in ("trace", "packets", "bytes", "copies", "instances", "seed", "rate_pps", "span_s")},
        "repeat": args.repeat,
        "tools": rows,
        "tailscope_cpu_split": split,
        "targets": targets,
    }

    print_table(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    (OUT / "last-run.json").write_text(json.dumps(result, indent=1) + "\n")
    if not all(r["ok"] for r in rows):
        return 1
    if args.check and not all(t["ok"] for t in targets.values()):
        return 1
    return 0


def pin_argv(cpu: int) -> list[str]:
    taskset = shutil.which("taskset")
    if taskset:
        return [taskset, "-c", str(cpu)]
    os.sched_setaffinity(0, {cpu})
    return []


def sweep(args, ts_bin) -> int:
    """CPU µs per packet against segments in flight: tailscope --packets none (the analysis with
    no packet rows) and tcptrace, interleaved rounds on one core, one window trace per size."""
    tcptrace = shutil.which("tcptrace")
    if not ts_bin:
        log("tailscope not found")
        return 2
    pin = pin_argv(args.cpu)
    gnu_time = None if args.no_gnu_time else find_gnu_time()
    ts_out = OUT / "run-tailscope"
    rows = []
    for w in SWEEP_WINDOWS:
        trace, meta = ensure_window_trace(args.packets, args.seed, args.rebuild, [w])
        warm_cache(trace)
        runs = {"tailscope": [], "tcptrace": []}
        for _ in range(args.repeat):
            shutil.rmtree(ts_out, ignore_errors=True)
            r = measure([ts_bin, "analyze", str(trace), "--out", str(ts_out), "-q", "--no-checksums", "--jobs", "1",
                         "--packets", "none"], pin=pin, gnu_time=gnu_time)
            if r["exit"] == 0:
                runs["tailscope"].append(r["cpu_s"])
            if tcptrace:
                r = measure([tcptrace, "-n", "-l", "-r", str(trace)], pin=pin, gnu_time=gnu_time)
                if r["exit"] == 0:
                    runs["tcptrace"].append(r["cpu_s"])
        n = meta["packets"]
        us = {k: statistics.median(v) / n * 1e6 if v else None for k, v in runs.items()}
        rows.append({"segments_in_flight": w, "packets": n, "tailscope_none_us": us["tailscope"], "tcptrace_us": us["tcptrace"]})
        log(f"  {w:>6,} in flight: tailscope --packets none {fmt(us['tailscope'], '.3f')} µs/packet, "
            f"tcptrace {fmt(us['tcptrace'], '.3f')} µs/packet")
    print(f"\nCPU µs per packet (median of {args.repeat}, {' '.join(pin) or 'pinned'}; load {loadavg()})")
    print(f"{'in flight':>10s} {'packets':>10s} {'tailscope none':>15s} {'tcptrace':>9s} {'x tcptrace':>10s}")
    for r in rows:
        x = r["tcptrace_us"] / r["tailscope_none_us"] if r["tcptrace_us"] and r["tailscope_none_us"] else None
        print(f"{r['segments_in_flight']:>10,} {r['packets']:>10,} {fmt(r['tailscope_none_us'], '.3f'):>15s} "
              f"{fmt(r['tcptrace_us'], '.3f'):>9s} {fmt(x, '.2f'):>10s}")
    (OUT / "last-sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def print_table(res: dict, fh) -> None:
    m, tr = res["machine"], res["trace"]
    w = lambda s="": print(s, file=fh)  # noqa: E731
    w()
    if tr.get("instances") is None:
        w(f"trace   {tr['trace']}: {tr['packets']:,} packets, {tr['bytes'] / 2**20:.1f} MiB over {tr['span_s']:g} s")
    else:
        w(f"trace   {tr['trace']}: {tr['packets']:,} packets, {tr['bytes'] / 2**20:.1f} MiB, "
          f"{tr['instances']:,} sample instances ({tr['copies']} copies) over {tr['span_s']:g} s")
    w(f"machine {m['cpu']}, {m['cores']} cores, {m['mem_total_mib']} MiB RAM, Linux {m['kernel']}; "
      f"{m['pinning']}; load {m['load_before']} -> {m['load_after']}")
    w(f"date    {res['date']}; median of {res['repeat']} rounds; peak RSS via {m['rss_method']}")
    w()
    hdr = f"{'tool':22s} {'packets':>10s} {'wall s':>8s} {'cpu s':>8s} {'cpu µs/pkt':>10s} {'packets/s':>12s} {'x tcptrace':>10s} {'x tcp cpu':>9s} {'x tcpdump':>10s} {'peak RSS MiB':>12s}"
    w(hdr)
    w("-" * len(hdr))
    for r in res["tools"]:
        name = r["tool"] if not r["breakdown"] else "  " + r["tool"]
        w(
            f"{name:22s} {fmt(r['packets'] or None, ',d'):>10s} {r['wall_s']:8.3f} {r['cpu_s']:8.3f} "
            f"{fmt(r['cpu_s'] / r['packets'] * 1e6 if r['packets'] else None, '.3f'):>10s} "
            f"{fmt(r['pps'], ',.0f'):>12s} {fmt(r['x_tcptrace'], '.2f'):>10s} {fmt(r['x_tcptrace_cpu'], '.2f'):>9s} "
            f"{fmt(r['x_tcpdump'], '.3f'):>10s} "
            f"{r['max_rss_mib']:12.1f}"
        )
    w()
    sp = res.get("tailscope_cpu_split")
    if sp:
        full = sp["total_cpu_s"] or 1.0
        w(
            f"tailscope CPU {sp['total_cpu_s']:.2f} s = startup+imports {sp['startup_cpu_s']:.2f} s ({sp['startup_cpu_s'] / full:.0%})"
            f" + native decode/flows/signatures {sp['native_loop_cpu_s']:.2f} s ({sp['native_loop_cpu_s'] / full:.0%})"
            f" + Parquet and the rest {sp['parquet_and_rest_cpu_s']:.2f} s ({sp['parquet_and_rest_cpu_s'] / full:.0%})"
        )
    for key, t in res["targets"].items():
        if "measured" in t:
            extra = f"measured {t['measured']:.2f}x"
        elif "measured_s" in t:
            extra = f"measured {t['measured_s'] * 1000:.0f} ms"
        else:
            extra = f"measured {t['measured_mib']:.1f} MiB"
        w(f"target  {t['target']:40s} {extra:24s} {'OK' if t['ok'] else 'MISSED'}")
    for r in res["tools"]:
        if r["failed_runs"]:
            state = "no run succeeded" if not r["ok"] else "left out of the figures"
            w(f"warning: {r['tool']}: {r['failed_runs']} of {len(r['runs'])} runs failed ({state}); see out/*.stderr")
    mism = [r["tool"] for r in res["tools"] if r["packets_reported"] not in (None, r["packets"])]
    if mism:
        w(f"warning: packet counts reported by {', '.join(mism)} differ from the trace's {res['trace']['packets']:,}")
    w()


if __name__ == "__main__":
    sys.exit(main())

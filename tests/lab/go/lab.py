"""Go's stacks as a lab app (Scenario.app == "go"): quic-go HTTP/3 (h3load) and crypto/tls +
net/http HTTP/2 and HTTP/1.1 (tlsload) on one server port, UDP and TCP, through the lab's relay.

    python -m tests.lab.go.lab serve SERVER.json     # both servers; prints READY cc=... when listening
    python -m tests.lab.go.lab client PLAN.json LOG  # the plan's connections, one after the other

The client runs, for each of `conns` rounds, one connection of every protocol in `protos` in turn
(h3, h2, h1: each the whole `sizes` plan, one request after the other, `gap` apart), so the
impairments of a draw strike every transport alike. Its log is one `request` record per request
in the lab's shape (quic_queries_eval: t_send_ns, t_first_byte_ns, t_last_byte_ns on the
capture's clock, sport = the connection's client port) with `proto`.

The binaries are built once per source version into GO_CACHE (`go build`; the modules come from
the Go module proxy: scripts/install-lab-deps.sh downloads them).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = ("h3load", "tlsload")
GO_CACHE = Path(os.environ.get("TAILSCOPE_LAB_GO_CACHE", "/tmp/tailscope-lab-go"))
_build_lock = threading.Lock()


def go_command() -> str | None:
    for go in (os.environ.get("GO"), shutil.which("go"), "/usr/local/go/bin/go", "/usr/local/lib/tailscope-go/bin/go"):
        if go and (Path(go).exists() or shutil.which(go)):
            return go
    return None


def available() -> tuple[bool, str]:
    if go_command() is None:
        return False, "Go is not installed (the Go stacks' lab needs go >= 1.24: scripts/install-lab-deps.sh)"
    return True, ""


def binaries() -> dict[str, str]:
    """program -> path of its binary, built if this source version has none yet."""
    files = sorted(p for p in HERE.rglob("*") if p.suffix in (".go", ".mod", ".sum"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()[:16]
    dest = GO_CACHE / digest
    with _build_lock:
        if not all((dest / p).exists() for p in PROGRAMS):
            go = go_command()
            if go is None:
                raise RuntimeError(available()[1])
            dest.mkdir(parents=True, exist_ok=True)
            for p in PROGRAMS:
                tmp = dest / f".{p}.tmp"
                subprocess.run([go, "build", "-o", str(tmp), f"./{p}"], cwd=HERE, check=True,
                               capture_output=True, timeout=600)
                tmp.rename(dest / p)
    return {p: str(dest / p) for p in PROGRAMS}


def _listening(port: int) -> bool:
    out = subprocess.run(["ss", "-Htuln"], capture_output=True, text=True).stdout
    tcp = any(line.split()[0] == "tcp" and line.split()[4].endswith(f":{port}") for line in out.splitlines())
    udp = any(line.split()[0] == "udp" and line.split()[4].endswith(f":{port}") for line in out.splitlines())
    return tcp and udp


def serve(cfg_path: str) -> int:
    cfg = json.loads(Path(cfg_path).read_text())
    addr = f"{cfg['addr']}:{cfg['port']}"
    procs = [subprocess.Popen([cfg["bin"][p], "-listen", addr] + (["-cc", cfg["cc"]] if p == "tlsload" else []))
             for p in PROGRAMS]
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + 20
    while not _listening(cfg["port"]):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            print(f"servers not listening on {addr}: exit codes {[p.poll() for p in procs]}", file=sys.stderr)
            for p in procs:
                p.kill()
            return 1
        time.sleep(0.05)
    print(f"READY cc={cfg['cc']}", flush=True)
    while not stop.is_set() and all(p.poll() is None for p in procs):
        stop.wait(0.2)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
    return 0


def _records(stdout: str, proto: str, round_: int) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        r = json.loads(line)
        out.append({"kind": "request", "proto": proto, "transport": "quic" if proto == "h3" else "tcp",
                    "round": round_, "index": r["index"], "sport": r.get("local_port"),
                    "negotiated": r.get("proto"), "resp_bytes": r["size"], "t_send_ns": r["start_ns"],
                    "t_first_byte_ns": r.get("first_byte_ns") or None, "t_last_byte_ns": r["end_ns"],
                    "ok": not r.get("error"), **({"error": r["error"]} if r.get("error") else {})})
    return out


def client(plan_path: str, log_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    g = plan["go"]
    addr = f"{plan['server']}:{plan['port']}"
    sizes = ",".join(str(s) for s in g["sizes"])
    deadline = time.monotonic() + plan["deadline_s"]
    rc = 0
    with open(log_path, "w") as log:
        for round_ in range(g["conns"]):
            for proto in g["protos"]:
                program = "h3load" if proto == "h3" else "tlsload"
                cmd = [plan["bin"][program], "-connect", addr, "-sizes", sizes, "-gap", g.get("gap", "50ms"),
                       "-conns", "1"] + ([] if proto == "h3" else ["-proto", proto, "-cc", plan["cc"]])
                left = deadline - time.monotonic()
                if left <= 0:
                    print(f"deadline reached before round {round_} {proto}", file=sys.stderr)
                    return 2
                try:
                    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=left)
                except subprocess.TimeoutExpired:
                    print(f"round {round_} {proto}: deadline", file=sys.stderr)
                    return 2
                if cp.returncode:
                    print(f"round {round_} {proto}: exit {cp.returncode}: {cp.stderr[-300:]}", file=sys.stderr)
                    rc = 1
                for r in _records(cp.stdout, proto, round_):
                    log.write(json.dumps(r) + "\n")
                log.flush()
                time.sleep(g.get("between_s", 0.2))
    return rc


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        raise SystemExit(serve(sys.argv[2]))
    if sys.argv[1:2] == ["client"]:
        raise SystemExit(client(sys.argv[2], sys.argv[3]))
    raise SystemExit(__doc__)

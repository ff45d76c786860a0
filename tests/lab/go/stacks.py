"""Go's stacks in the lab's namespaces: tlsload (crypto/tls + net/http, HTTP/1.1 and HTTP/2) and
h3load (quic-go HTTP/3), through the lab's relay (tests/lab/relay.py: delay both ways, no
netem needed), tcpdump at the server at snaplen 256 without key log (issue 32's vantage point).

    python -m tests.lab.go.stacks OUT_DIR [--rtt-ms 200] [--proto h3] [--sizes 1000,175000] [--conns 2]
        [--snaplen 256] [--name NAME]

Writes OUT_DIR/NAME.pcap and NAME.jsonl (the client's log: one line per request; NAME defaults to
go-<proto>). The QUIC fixture of signatures/tests/go_stacks.rs:
    python -m tests.lab.go.stacks signatures/testdata --proto h3 --sizes 1000 --conns 1 \
        --snaplen 1600 --name go-h3-handshake
Item 3's fixtures at snaplen 256 (go-h3-coalesced and go-h3-probe-mid are one connection of a
longer run, cut with `tshark -Y udp.port==PORT -F pcap`), scored against their logs with
`cargo run --release -p tailscope-signatures --example qtruth -- X.pcap X.jsonl`:
    python -m tests.lab.go.stacks signatures/testdata --proto h3 \
        --sizes 1000,175000,1000,2000,1000,1000 --conns 1 --name go-h3-pmtu
go-h3-hello-half-lost is one connection of a two-stack lab run (python -m tests.lab.go.eval, seed 1:
stack0001_loss, a fresh-clone CI's), cut with `tcpdump -w X.pcap "udp port 56545"`; its .jsonl is
that connection's lines of the client's log in the fixtures' fields.
Needs root, tcpdump and Go >= 1.24 (GO=/usr/local/go/bin/go by default; quic-go through the Go
module proxy: tests/lab/go/go.mod).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from ..capture import Capture
from ..proc import Background, python_module, run
from ..topology import CLIENT_NET_V4, CLIENT_NET_V6, SERVER_NET_V4, SERVER_NET_V6, TUN, Topology

HERE = Path(__file__).resolve().parent
PORT = 8443


def build(go: str, program: str, dest: Path) -> Path:
    out = dest / program
    subprocess.run([go, "build", "-o", str(out), f"./{program}"], cwd=HERE, check=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--rtt-ms", type=float, default=200.0)
    ap.add_argument("--proto", choices=("h1", "h2", "h3"), default="h3")
    ap.add_argument("--sizes", default="1000,175000,1000,2000")
    ap.add_argument("--gap", default="50ms")
    ap.add_argument("--conns", type=int, default=2)
    ap.add_argument("--snaplen", type=int, default=256)
    ap.add_argument("--name", help="output name (default go-PROTO)")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    go = os.environ.get("GO", "/usr/local/go/bin/go")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = "h3load" if a.proto == "h3" else "tlsload"
        binary = build(go, program, work)
        half = a.rtt_ms / 2
        relay_cfg = {"tun": TUN, "client_nets": [CLIENT_NET_V4, CLIENT_NET_V6],
                     "server_nets": [SERVER_NET_V4, SERVER_NET_V6], "seed": 1,
                     "delay": {d: {"ms": half, "jitter_ms": 0} for d in ("c2s", "s2c")},
                     "rules": [], "loss": None, "police": None, "bottleneck": None, "max_runtime_s": 600}
        (work / "relay.json").write_text(json.dumps(relay_cfg))
        name = a.name or f"go-{a.proto}"
        with Topology(tag=name) as topo:
            relay = Background(python_module("tests.lab.relay", work / "relay.json", work / "relay.jsonl"),
                               ns=topo.router, name="relay", ready=r"^READY")
            relay.wait_ready(10)
            topo.wait_reachable(4)
            addr = f"{topo.addr('server')}:{PORT}"
            server = Background([binary, "-listen", addr], ns=topo.server, name="server")
            cap = Capture(topo.server, "eth0", out / f"{name}.pcap", snaplen=a.snaplen, bpf=f"port {PORT}").start()
            time.sleep(1.0)
            args = [binary, "-connect", addr, "-sizes", a.sizes, "-gap", a.gap, "-conns", str(a.conns)]
            if a.proto != "h3":
                args += ["-proto", a.proto]
            client = run(args, ns=topo.client, timeout=300)
            (out / f"{name}.jsonl").write_text(client.stdout)
            time.sleep(1.0)
            cap.stop()
            server.stop()
            relay.stop()
        print(f"{name}: {len(client.stdout.splitlines())} requests, {(out / f'{name}.pcap').stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

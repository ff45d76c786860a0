"""Traffic for the capture tests; run inside the namespaces with ``ip netns exec``.

``sink``: UDP sink on 443 and a tiny HTTP server on 80 (server namespace).
``gen``:  numbered UDP datagrams to 443 (each carries ``TSQ:<tag>:<n>:`` so every packet can be
          found again in the landed files), real HTTP/TCP requests to 80, and UDP "noise" to a port
          the capture filter must exclude (client namespace). Prints a JSON summary.
Both stop on their own after --max-seconds / --duration.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time


def sink(args) -> int:
    end = time.monotonic() + args.max_seconds
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((args.bind, 443))
    u.settimeout(0.2)
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    t.bind((args.bind, 80))
    t.listen(64)
    t.settimeout(0.2)

    def udp_loop():
        while time.monotonic() < end:
            try:
                u.recv(2048)
            except socket.timeout:
                pass

    def serve(conn):
        conn.settimeout(2)
        try:
            conn.recv(4096)
            body = b"x" * 2000
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass
        finally:
            conn.close()

    threading.Thread(target=udp_loop, daemon=True).start()
    print("ready", flush=True)
    while time.monotonic() < end:
        try:
            conn, _ = t.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn,), daemon=True).start()
    return 0


def gen(args) -> int:
    stop_at = time.monotonic() + args.duration
    out = {"udp_sent": 0, "tcp_ok": 0, "tcp_failed": 0, "noise_sent": 0, "tag": args.tag}

    def tcp_loop():
        while time.monotonic() < stop_at:
            try:
                with socket.create_connection((args.dst, 80), timeout=2) as s:
                    s.sendall(b"GET / HTTP/1.0\r\nHost: lab\r\n\r\n")
                    while s.recv(4096):
                        pass
                out["tcp_ok"] += 1
            except OSError:
                out["tcp_failed"] += 1
            time.sleep(args.tcp_interval)

    th = threading.Thread(target=tcp_loop, daemon=True)
    th.start()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    interval = 1.0 / args.rate
    n = 0
    t0 = time.monotonic()
    while time.monotonic() < stop_at:
        payload = f"TSQ:{args.tag}:{n}:".encode()
        # random filler makes the capture incompressible (to fill a spool quota quickly)
        payload += (os.urandom(args.size) if args.random else b"." * args.size)[: max(0, args.size - len(payload))]
        u.sendto(payload, (args.dst, 443))
        n += 1
        if n % 10 == 0:
            u.sendto(b"noise", (args.dst, 9999))
            out["noise_sent"] += 1
        delay = t0 + n * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    out["udp_sent"] = n
    th.join(5)
    print(json.dumps(out), flush=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--bind", required=True)
    s.add_argument("--max-seconds", type=float, default=120)
    g = sub.add_parser("gen")
    g.add_argument("--dst", required=True)
    g.add_argument("--tag", required=True)
    g.add_argument("--rate", type=float, default=200)
    g.add_argument("--size", type=int, default=120)
    g.add_argument("--duration", type=float, default=5)
    g.add_argument("--tcp-interval", type=float, default=0.1)
    g.add_argument("--random", action="store_true")
    args = p.parse_args(argv)
    return sink(args) if args.cmd == "sink" else gen(args)


if __name__ == "__main__":
    sys.exit(main())

"""The lab's application: a tiny framed request/response protocol over real
Linux TCP sockets, so every transport behaviour in the capture is the kernel's.

Wire format (both directions): a 16-byte header then a body.
    magic(2) "TQ" request / "TR" response, flags(2)=0, msg id(4),
    body length(4), requested response body length(4, requests only)
Sizes in a plan are whole messages (header included), so "a 20000-byte
response" is exactly 20000 bytes of server payload - what the relay and the
pcap see. Framing is what lets the relay target "the last segment of
response 2" (tracker.py).

    python -m tests.lab.apps server ADDR PORT [CC [LOG.jsonl]]
    python -m tests.lab.apps client PLAN.json LOG.jsonl

The server's LOG gets one `tcp_info` record per connection, read from the kernel (TCP_INFO) when
the client has closed: 5-tuple as the client logs it, and the counters a second truth is made of
(TCP_INFO_FIELDS: retransmissions, timeouts, bytes resent, receiver-limited time). For
diagnosis, TAILSCOPE_LAB_TCP_INFO_POLL=PATH also logs each connection's tcp_info as it changes
(POLL_FIELDS).

A plan's optional `reader` makes the client a slow reader (draws.py "slow reader"):
{"rcvbuf": B, "every_bytes": N, "pause_s": T} sets SO_RCVBUF to B before connect (the kernel
doubles it) and stops reading for T seconds after every N bytes of a response, each pause logged
(`pause` records: t_start_ns, t_end_ns, the response's bytes read so far).

Congestion control is set per socket (TCP_CONGESTION), not per namespace: a
new namespace inherits the host's default (which may be bbr on one machine and
cubic on another), and a non-initial namespace may only choose from the host's
'allowed' list, while a root-owned socket may pick any available algorithm.
So the lab is explicit and reproducible without touching the host.

The client writes its own log (README: client log), one JSON line per
connection attempt, per request and per close; times are CLOCK_REALTIME ns,
the same clock as the relay log and tcpdump's timestamps.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys
import threading
import time

from .tracker import HEADER, HEADER_LEN, MAGIC_REQUEST, MAGIC_RESPONSE

MAX_MESSAGE = 64 * 1024 * 1024


def set_cc(s: socket.socket, cc: str | None) -> str:
    """Select congestion control `cc` on socket `s`; return the one in use."""
    if cc:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()


def _recv_exact(sock: socket.socket, n: int, on_first=None) -> bytes:
    chunks, got = [], 0
    while got < n:
        b = sock.recv(min(1 << 20, n - got))
        if not b:
            raise ConnectionError(f"peer closed after {got} of {n} bytes")
        if got == 0 and on_first:
            on_first()
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


# -- tcp_info -----------------------------------------------------------------

# struct tcp_info (include/uapi/linux/tcp.h): name -> (byte offset, struct format). The offsets are
# the kernel ABI (fields are only ever appended); a kernel older than a field returns fewer bytes,
# and the field is then left out of the record. *_us fields are microseconds.
TCP_INFO_FIELDS = {
    "total_retrans": (100, "I"),        # segments retransmitted over the connection
    "bytes_acked": (120, "Q"),
    "data_segs_out": (156, "I"),
    "busy_time_us": (168, "Q"),         # time with data in flight or queued
    "rwnd_limited_us": (176, "Q"),      # time the peer's receive window stopped sending
    "sndbuf_limited_us": (184, "Q"),
    "bytes_sent": (200, "Q"),
    "bytes_retrans": (208, "Q"),
    "dsack_dups": (216, "I"),
    "total_rto": (240, "H"),            # RTO expirations (Linux 6.7+)
    "total_rto_recoveries": (242, "H"),
    "total_rto_time_ms": (244, "I"),
}
TCP_INFO_LEN = 248


def tcp_info(s: socket.socket, fields: dict = TCP_INFO_FIELDS) -> dict:
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    out = {}
    for name, (off, fmt) in fields.items():
        if off + struct.calcsize(fmt) <= len(raw):
            out[name] = struct.unpack_from("=" + fmt, raw, off)[0]
    return out


# -- server -------------------------------------------------------------------

class _Log:
    def __init__(self, path: str | None):
        self.f = open(path, "w") if path else None
        self.lock = threading.Lock()

    def write(self, rec: dict) -> None:
        if self.f:
            with self.lock:
                self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
                self.f.flush()


def serve(addr: str, port: int, stop: threading.Event, cc: str | None = None, log: _Log | None = None) -> None:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    in_use = set_cc(ls, cc)
    ls.bind((addr, port))
    ls.listen(128)
    ls.settimeout(0.1)           # so the accept loop notices `stop`
    print(f"READY {addr} {port} cc={in_use}", flush=True)
    while not stop.is_set():
        try:
            s, _ = ls.accept()
        except socket.timeout:
            continue
        threading.Thread(target=_serve_conn, args=(s, stop, cc, log), daemon=True).start()
    ls.close()


def _serve_conn(s: socket.socket, stop: threading.Event, cc: str | None, log: _Log | None = None) -> None:
    # NODELAY as in most RPC/HTTP servers: each response leaves as one burst
    # of MSS-sized segments plus its tail, never held back by Nagle.
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    set_cc(s, cc)                # normally inherited from the listener; be sure
    s.settimeout(60)
    _poll_tcp_info(s)
    try:
        while not stop.is_set():
            try:
                hdr = _recv_exact(s, HEADER_LEN)
            except ConnectionError:
                break                                    # client closed: normal end
            magic, _f, mid, body_len, resp_len = HEADER.unpack(hdr)
            if magic != MAGIC_REQUEST or body_len > MAX_MESSAGE or resp_len > MAX_MESSAGE:
                break
            _recv_exact(s, body_len)
            body = resp_len - HEADER_LEN
            # One sendall per response: one burst, PSH on its last segment.
            s.sendall(HEADER.pack(MAGIC_RESPONSE, 0, mid, body, 0) + b"r" * body)
    except OSError:
        pass
    finally:
        if log:
            # the client has closed (or the connection failed): everything the server sent is
            # acknowledged or given up on, so the counters are final for what the capture shows
            try:
                peer, me = s.getpeername()[:2], s.getsockname()[:2]
                log.write({"kind": "tcp_info", "proto": "tcp", "src": peer[0], "sport": peer[1], "dst": me[0],
                           "dport": me[1], "t_ns": time.time_ns(), **tcp_info(s)})
            except OSError:
                pass
        s.close()


# Diagnostic, off by default: TAILSCOPE_LAB_TCP_INFO_POLL=PATH makes the server append, per
# connection, a record each time these tcp_info fields change (polled every 0.5 ms), so the kernel's
# receiver-limited time can be laid against a capture interval by interval (docs/accuracy.md,
# "Receiver-limited time"). The chrono fields move in whole jiffies (4 ms at HZ=250).
POLL_FIELDS = {
    **{k: TCP_INFO_FIELDS[k] for k in ("rwnd_limited_us", "busy_time_us", "bytes_acked", "bytes_sent")},
    "snd_cwnd": (80, "I"), "unacked": (24, "I"), "sacked": (28, "I"), "lost": (32, "I"), "retrans": (36, "I"),
    "snd_wnd": (228, "I"),
}
POLL_ENV = "TAILSCOPE_LAB_TCP_INFO_POLL"


def _poll_tcp_info(s: socket.socket) -> None:
    path = os.environ.get(POLL_ENV)
    if not path:
        return

    def run() -> None:
        last = None
        with open(path, "a") as out:
            try:
                port = s.getpeername()[1]
                while True:
                    now = tcp_info(s, POLL_FIELDS)
                    if now != last:
                        out.write(json.dumps({"sport": port, "t_ns": time.time_ns(), **now}) + "\n")
                        last = now
                    time.sleep(0.0005)
            except OSError:                          # closed: the connection is over
                pass
    threading.Thread(target=run, daemon=True).start()


# -- client -------------------------------------------------------------------

class Client:
    def __init__(self, plan: dict, log_path: str):
        self.plan = plan
        self.family = socket.AF_INET6 if plan.get("family", 4) == 6 else socket.AF_INET
        self.deadline = time.monotonic() + float(plan.get("deadline_s", 30))
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.log = open(log_path, "w")
        self.next_id = 0
        self.failures = 0

    def _write(self, rec: dict) -> None:
        with self.lock:
            self.log.write(json.dumps(rec, separators=(",", ":")) + "\n")
            self.log.flush()

    def _remaining(self) -> float:
        return max(0.01, self.deadline - time.monotonic())

    def _rid(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id - 1

    def run_connection(self, ci: int, spec: dict) -> None:
        server = (self.plan["server"], int(self.plan["port"]))
        s = socket.socket(self.family, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = self.plan.get("reader")
        if reader:
            # before connect: the window scale of the SYN follows the buffer
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(reader["rcvbuf"]))
        cc = set_cc(s, self.plan.get("cc"))
        s.settimeout(self._remaining())
        t_start = time.time_ns()
        try:
            s.connect(server)
        except OSError as e:
            self._write({"kind": "connect", "conn": ci, "ok": False, "error": repr(e),
                         "t_start_ns": t_start, "t_end_ns": time.time_ns(), "dst": server[0], "dport": server[1]})
            with self.lock:
                self.failures += 1
            s.close()
            return
        src, sport = s.getsockname()[:2]
        tuple5 = {"proto": "tcp", "src": src, "sport": sport, "dst": server[0], "dport": server[1]}
        self._write({"kind": "connect", "conn": ci, "ok": True, **tuple5, "cc": cc,
                     "t_start_ns": t_start, "t_end_ns": time.time_ns()})
        try:
            for k, rq in enumerate(spec["requests"]):
                think = float(rq.get("think_s", 0))
                if think > 0:
                    time.sleep(min(think, self._remaining()))
                rid = self._rid()
                req_body = max(0, int(rq["req"]) - HEADER_LEN)
                resp = max(HEADER_LEN, int(rq["resp"]))
                first = {}
                s.settimeout(self._remaining())
                t_send = time.time_ns()
                s.sendall(HEADER.pack(MAGIC_REQUEST, 0, rid, req_body, resp) + b"q" * req_body)
                t_sent = time.time_ns()
                hdr = _recv_exact(s, HEADER_LEN, on_first=lambda: first.setdefault("t", time.time_ns()))
                magic, _f, mid, body_len, _ = HEADER.unpack(hdr)
                if magic != MAGIC_RESPONSE or mid != rid:
                    raise ConnectionError(f"bad response header {hdr!r}")
                if reader:
                    self._read_slowly(s, body_len, reader, {"conn": ci, "index": k, **tuple5})
                else:
                    _recv_exact(s, body_len)
                self._write({"kind": "request", "id": rid, "conn": ci, "index": k, **tuple5,
                             "req_bytes": req_body + HEADER_LEN, "resp_bytes": body_len + HEADER_LEN,
                             "think_s": think, "t_send_ns": t_send, "t_sent_ns": t_sent,
                             "t_first_byte_ns": first.get("t"), "t_last_byte_ns": time.time_ns(),
                             "ok": True})
        except OSError as e:
            with self.lock:
                self.failures += 1
            self._write({"kind": "error", "conn": ci, **tuple5, "error": repr(e), "t_ns": time.time_ns()})
        finally:
            s.close()
            self._write({"kind": "close", "conn": ci, **tuple5, "t_ns": time.time_ns()})

    def _read_slowly(self, s: socket.socket, n: int, reader: dict, where: dict) -> None:
        """Read n bytes, stopping for pause_s after every every_bytes (logged as `pause`)."""
        every, pause = int(reader["every_bytes"]), float(reader["pause_s"])
        got, since = HEADER_LEN, HEADER_LEN          # the header was read already
        while got < n + HEADER_LEN:
            if since >= every:
                t0 = time.time_ns()
                time.sleep(min(pause, self._remaining()))
                self._write({"kind": "pause", **where, "read": got, "t_start_ns": t0, "t_end_ns": time.time_ns()})
                since = 0
            b = s.recv(min(every - since, n + HEADER_LEN - got))
            if not b:
                raise ConnectionError(f"peer closed after {got} of {n + HEADER_LEN} bytes")
            got += len(b)
            since += len(b)

    def run(self) -> int:
        conns = self.plan["connections"]
        if self.plan.get("parallel", False):
            threads = []
            for ci, spec in enumerate(conns):
                t = threading.Thread(target=self._delayed, args=(ci, spec), daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join(self._remaining())
        else:
            for ci, spec in enumerate(conns):
                gap = float(spec.get("start_s", 0))
                if gap > 0:
                    time.sleep(min(gap, self._remaining()))
                self.run_connection(ci, spec)
        self.log.close()
        return 1 if self.failures else 0

    def _delayed(self, ci: int, spec: dict) -> None:
        wait = self.t0 + float(spec.get("start_s", 0)) - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, self._remaining()))
        self.run_connection(ci, spec)


def main(argv: list[str]) -> int:
    if argv[:1] == ["server"] and len(argv) in (3, 4, 5):
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        serve(argv[1], int(argv[2]), stop, argv[3] if len(argv) >= 4 else None,
              _Log(argv[4] if len(argv) == 5 else None))
        return 0
    if argv[:1] == ["client"] and len(argv) == 3:
        with open(argv[1]) as f:
            plan = json.load(f)
        return Client(plan, argv[2]).run()
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

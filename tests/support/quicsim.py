"""A QUIC connection between two real aioquic endpoints in simulated time, captured at the server
(pure sans-IO: no sockets, no root), with the client's SSLKEYLOGFILE and both endpoints' qlogs.

The path has a one-way delay and drops chosen datagrams: client datagrams are dropped before the
capture point (the server never sees them), server datagrams after it (the capture shows them),
as on a server-side capture. The qlogs are the truth tests score against
(tests/lab/quic_keylog_eval.sender_truth reads them the same way as in the lab).
"""
from __future__ import annotations

import heapq
import io
import itertools
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.pcapgen import ipv4, udp, write_pcap

CLIENT = ("198.18.1.2", 50123)
SERVER = ("198.18.2.2", 443)
T0_NS = 1_700_000_000 * 10**9


@dataclass
class SimResult:
    pcap: Path
    keylog: Path
    client_qlog: dict
    server_qlog: dict
    responses: int
    dropped: dict = field(default_factory=dict)      # "c2s"/"s2c" -> datagram indexes dropped


def run(tmp: Path, *, requests: int = 3, response_bytes: int = 60_000, owd_s: float = 0.02,
        drop_c2s: set = frozenset(), drop_s2c: set = frozenset(), cipher: str | None = None,
        log_keys: bool = True, client: tuple[str, int] = CLIENT, t0_ns: int = T0_NS) -> SimResult:
    """One connection, `requests` sequential requests (300 B each, one bidirectional stream each).
    drop_*: 1-based datagram indexes of each direction to lose on the path. client / t0_ns: the
    client's address and the capture's start (several runs then make one capture's traffic)."""
    import types

    import aioquic.quic.logger as qlogger_module

    # qlog events carry the logger's wall clock; the simulation's clock makes them line up with
    # the capture (and an event's place in time is what the truth reads triggers from).
    wall = qlogger_module.time
    clock = {"now": 0.0}
    qlogger_module.time = types.SimpleNamespace(time=lambda: t0_ns / 1e9 + clock["now"])
    try:
        return _run(tmp, requests, response_bytes, owd_s, drop_c2s, drop_s2c, cipher, log_keys, clock, client, t0_ns)
    finally:
        qlogger_module.time = wall


def _run(tmp, requests, response_bytes, owd_s, drop_c2s, drop_s2c, cipher, log_keys, clock, client_addr, t0_ns) -> SimResult:
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.connection import QuicConnection
    from aioquic.quic.events import StreamDataReceived
    from aioquic.quic.logger import QuicLogger
    from aioquic.tls import CipherSuite

    from tests.lab.quic_apps import ALPN, SNI, make_cert

    tmp.mkdir(parents=True, exist_ok=True)
    cert, key = make_cert(tmp)
    keys = io.StringIO()
    cq, sq = QuicLogger(), QuicLogger()
    ccfg = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], server_name=SNI, quic_logger=cq,
                             secrets_log_file=keys if log_keys else None)
    ccfg.load_verify_locations(str(cert))
    if cipher:
        ccfg.cipher_suites = [CipherSuite[cipher]]
    scfg = QuicConfiguration(is_client=False, alpn_protocols=[ALPN], quic_logger=sq)
    scfg.load_cert_chain(str(cert), str(key))
    client = QuicConnection(configuration=ccfg)
    now = 0.0
    client.connect(SERVER, now=now)
    server = None
    frames: list = []
    queue: list = []          # (arrival, seq, to_server, data)
    seq = itertools.count()
    sent = {"c2s": 0, "s2c": 0}
    dropped = {"c2s": [], "s2c": []}
    done = 0
    asked = 0
    got: dict = {}

    def capture(t: float, data: bytes, c2s: bool) -> None:
        src, dst = (client_addr, SERVER) if c2s else (SERVER, client_addr)
        frames.append((t0_ns + int(t * 1e9), ipv4(src[0], dst[0], 17, udp(src[1], dst[1], data))))

    def flush(t: float) -> None:
        for conn, c2s in ((client, True), (server, False)):
            if conn is None:
                continue
            for data, _addr in conn.datagrams_to_send(now=t):
                d = "c2s" if c2s else "s2c"
                sent[d] += 1
                if not c2s:
                    capture(t, data, False)       # the server's own capture: before the path
                if sent[d] in (drop_c2s if c2s else drop_s2c):
                    dropped[d].append(sent[d])
                    continue
                heapq.heappush(queue, (t + owd_s, next(seq), c2s, data))

    def ask() -> None:
        nonlocal asked
        sid = client.get_next_available_stream_id()
        client.send_stream_data(sid, b"q" * 300, end_stream=True)
        asked += 1

    flush(now)
    for _ in range(200_000):
        timers = [(c.get_timer(), c) for c in (client, server) if c is not None and c.get_timer() is not None]
        due = [t for t, _ in timers] + ([queue[0][0]] if queue else [])
        if not due or now > 60:
            break
        nxt = min(due)
        now = max(now, nxt)
        clock["now"] = now
        if queue and queue[0][0] <= now:
            _, _, to_server, data = heapq.heappop(queue)
            if to_server:
                if server is None:
                    server = QuicConnection(configuration=scfg,
                                            original_destination_connection_id=client.original_destination_connection_id)
                capture(now, data, True)
                server.receive_datagram(data, client_addr, now=now)
            else:
                client.receive_datagram(data, SERVER, now=now)
        for t, c in timers:
            if t <= now:
                c.handle_timer(now=now)
                if c.get_timer() == t:
                    # aioquic's loss timer is sent time + delay; at that instant it tests
                    # now - delay >= sent time, which rounding can fail: nothing is lost, the
                    # timer stays due, and the loop spun out its iterations in simulated
                    # milliseconds (2 runs in 1,500, all responses missing). A real clock moves on.
                    now += 1e-6
        for conn in (client, server):
            while conn is not None and (ev := conn.next_event()) is not None:
                if type(ev).__name__ == "HandshakeCompleted" and conn is client and asked == 0:
                    ask()
                if isinstance(ev, StreamDataReceived) and conn is server and ev.end_stream:
                    server.send_stream_data(ev.stream_id, b"r" * response_bytes, end_stream=True)
                if isinstance(ev, StreamDataReceived) and conn is client:
                    got[ev.stream_id] = got.get(ev.stream_id, 0) + len(ev.data)
                    if ev.end_stream:
                        done += 1
                        if asked < requests:
                            ask()
                        else:
                            client.close()
        flush(now)
    frames.sort(key=lambda f: f[0])
    pcap = tmp / "quic.pcap"
    write_pcap(pcap, frames, linktype=101)
    keylog = tmp / "keys.log"
    keylog.write_text(keys.getvalue())
    return SimResult(pcap, keylog, cq.to_dict(), sq.to_dict(), done, dropped)


def stream_datagrams(qlog: dict) -> list[int]:
    """1-based indexes of an endpoint's datagrams that carried STREAM data. aioquic logs a flush's
    packets, then one datagrams_sent per datagram; packets fill datagrams in order (coalesced
    while their lengths fit the datagram's)."""
    out, pending, n = [], [], 0
    for e in qlog["traces"][0]["events"]:
        if e["name"] == "transport:packet_sent":
            pending.append(e["data"])
        elif e["name"] == "transport:datagrams_sent":
            for raw in e["data"].get("raw", []):
                n += 1
                size, stream = 0, False
                while pending and (size == 0 or size + pending[0]["raw"]["length"] <= raw["length"]):
                    pkt = pending.pop(0)
                    size += pkt["raw"]["length"]
                    stream |= any(f.get("frame_type") == "stream" for f in pkt.get("frames", []))
                if stream:
                    out.append(n)
    return out

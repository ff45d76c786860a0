"""The lab's QUIC application: a real QUIC stack (aioquic, from PyPI) and a browser-like client
that falls back to TLS over TCP, so every QUIC behaviour in the capture is a real endpoint's.

    python -m tests.lab.quic_apps server CONFIG.json       # QUIC on UDP PORT + TLS/TCP on TCP PORT
    python -m tests.lab.quic_apps client PLAN.json LOG.jsonl

Both transports carry the TCP lab's framed request/response protocol (apps.py, tracker.HEADER):
over QUIC the client opens one bidirectional stream per request, writes the 16-byte header and the
body, and ends the stream; the server answers on the same stream and ends it. Over TCP the same
messages run inside TLS 1.3. Both use the same self-signed certificate (generated per run by
`make_cert`, trusted by the client), server name SNI and ALPN "tslab", so a passive observer sees
the same server name on both (the view quic_fallback pairs them by it).

The client runs `sessions` one after the other (`gap_s` apart); a session is one page load /
video start: it tries transports by `mode`, and on the connection that won sends its `requests`
one after the other (each {req, resp, think_s}: sizes in bytes, think_s the pause before it; one
bidirectional stream per request over QUIC, one after the other on the TLS connection over TCP;
without `requests`, one request of `req` / `resp` bytes):

* quic_first  QUIC; if the handshake does not complete within `handshake_timeout_s` (default
              1 s) the attempt is abandoned (CONNECTION_CLOSE) and the session falls back to TCP.
* race        QUIC, and TCP `race_delay_s` (default 0.1 s) later without waiting for QUIC's
              outcome; the first handshake to complete carries the request, the other is
              cancelled (a TCP still in SYN_SENT just disappears, the kernel answers its SYN-ACK
              with RST) - as browsers race QUIC against TCP.
* quic_only   QUIC only (no fallback).
* tcp         TLS over TCP only.

`quic_versions` (per session, or for all in the plan; names of VERSIONS) are the versions the client
offers, the first in its Initial; the server's config may restrict its own (Version Negotiation).

With `cache_broken` (as browsers remember "QUIC is broken for this server"): once a QUIC attempt
failed, later quic_first / race sessions go straight to TCP (logged as mode cached_broken).

Client log (JSONL, CLOCK_REALTIME ns like the relay log and the pcap):

| kind | fields |
|---|---|
| session | session, mode (asked), effective (quic_first, race, quic_only, tcp, cached_broken), transport (quic/tcp/null: what carried the response), ok, t_start_ns, t_end_ns |
| quic_attempt | session, proto udp, src sport dst dport, odcid (hex: the Initial keys' seed = tailscope's quic_ocid), t_start_ns, t_end_ns, ok, outcome (handshake_done, timeout, icmp_error (port unreachable: fails at once, as a browser's connected UDP socket does), error (e.g. Version Negotiation without a common version), cancelled = lost the race), alpn, version, qlog_title |
| connect | session, conn, proto tcp, tls, sni, src sport dst dport, cc, t_start_ns, t_tcp_ns (TCP established), t_end_ns (TLS done or failed), ok, error |
| request | id, session, transport, 5-tuple, req_bytes, resp_bytes, t_send_ns, t_first_byte_ns, t_last_byte_ns, ok |
| close | session, transport, 5-tuple, t_ns |

Plus (paths in the plan): an SSLKEYLOGFILE key log of every QUIC and TLS connection, and the
client's qlog (qlog 0.3 JSON, one trace per QUIC attempt, `title` = "session N SRC:PORT"; the
aioquic events packet_sent / datagrams_sent / packet_received...). The server writes its own JSONL
log (quic_handshake, quic_request, tls_accept, tls_request) and its qlog (all its connections).
"""
from __future__ import annotations

import asyncio
import datetime
import json
import signal
import socket
import ssl
import sys
import time
from pathlib import Path

from .apps import set_cc
from .tracker import HEADER, HEADER_LEN, MAGIC_REQUEST, MAGIC_RESPONSE

SNI = "lab.tailscope.test"
ALPN = "tslab"
PORT = 443
MAX_MESSAGE = 64 * 1024 * 1024
VERSIONS = {"v1": 0x00000001, "v2": 0x6B3343CF}   # names for `quic_versions` (client session / server)


def make_cert(directory: str | Path) -> tuple[Path, Path]:
    """A throw-away self-signed ECDSA certificate for SNI (valid from yesterday to tomorrow).
    Returns (cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = Path(directory)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SNI)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SNI)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_p, key_p = d / "cert.pem", d / "key.pem"
    cert_p.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_p.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()))
    return cert_p, key_p


def aioquic_available() -> tuple[bool, str]:
    try:
        import aioquic  # noqa: F401
        import cryptography  # noqa: F401
    except ImportError as e:
        return False, f"needs aioquic and cryptography (pip install aioquic): {e}"
    return True, ""


class JsonlWriter:
    def __init__(self, path: str | Path):
        self.f = open(path, "w")

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def _qlog_doc(traces: list) -> dict:
    return {"qlog_format": "JSON", "qlog_version": "0.3", "traces": traces}


# -- server -------------------------------------------------------------------

async def serve(cfg: dict) -> None:
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.asyncio import serve as quic_serve
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.quic.events import HandshakeCompleted
    from aioquic.quic.logger import QuicLogger

    addr, port = cfg["addr"], int(cfg.get("port", PORT))
    log = JsonlWriter(cfg["log"])
    qlogger = QuicLogger() if cfg.get("qlog") else None
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    async def answer(read_request, write, peer: tuple, transport: str) -> bool:
        """One request/response of the framed protocol; False at the end of the stream."""
        try:
            hdr = await read_request(HEADER_LEN)
        except (asyncio.IncompleteReadError, ConnectionError):
            return False
        magic, _f, mid, body_len, resp_len = HEADER.unpack(hdr)
        if magic != MAGIC_REQUEST or body_len > MAX_MESSAGE or resp_len > MAX_MESSAGE:
            return False
        await read_request(body_len)
        body = max(0, resp_len - HEADER_LEN)
        await write(HEADER.pack(MAGIC_RESPONSE, 0, mid, body, 0) + b"r" * body)
        log.write({"kind": f"{transport}_request", "peer": list(peer[:2]), "id": mid, "resp_bytes": body + HEADER_LEN,
                   "t_ns": time.time_ns()})
        return True

    class ServerProtocol(QuicConnectionProtocol):
        def __init__(self, quic, stream_handler=None):
            super().__init__(quic, stream_handler=lambda r, w: asyncio.ensure_future(self._stream(r, w)))

        def _peer(self) -> tuple:
            paths = getattr(self._quic, "_network_paths", None) or []
            return tuple(paths[0].addr[:2]) if paths else ("?", 0)

        async def _stream(self, reader, writer) -> None:
            async def write(b: bytes) -> None:
                writer.write(b)
                writer.write_eof()
            try:
                await answer(reader.readexactly, write, self._peer(), "quic")
            except Exception as e:   # noqa: BLE001 - a broken stream must not kill the server
                log.write({"kind": "error", "transport": "quic", "peer": list(self._peer()), "error": repr(e),
                           "t_ns": time.time_ns()})

        def quic_event_received(self, event) -> None:
            if isinstance(event, HandshakeCompleted):
                log.write({"kind": "quic_handshake", "peer": list(self._peer()),
                           "odcid": self._quic.original_destination_connection_id.hex(),
                           "alpn": event.alpn_protocol, "t_ns": time.time_ns()})
            super().quic_event_received(event)

    qcfg = QuicConfiguration(is_client=False, alpn_protocols=[ALPN], quic_logger=qlogger,
                             idle_timeout=float(cfg.get("idle_timeout_s", 10)))
    if cfg.get("quic_versions"):
        # versions the server accepts; an Initial of another version gets a Version Negotiation
        qcfg.supported_versions = [VERSIONS[v] for v in cfg["quic_versions"]]
    qcfg.load_cert_chain(cfg["cert"], cfg["key"])
    # quic false: nothing listens on UDP, so the kernel answers ICMP port unreachable
    quic_server = (await quic_serve(addr, port, configuration=qcfg, create_protocol=ServerProtocol)
                   if cfg.get("quic", True) else None)

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cfg["cert"], cfg["key"])
    tls.set_alpn_protocols([ALPN])

    async def handle_tls(reader, writer) -> None:
        peer = writer.get_extra_info("peername")
        log.write({"kind": "tls_accept", "peer": list(peer[:2]), "t_ns": time.time_ns()})

        async def write(b: bytes) -> None:
            writer.write(b)
            await writer.drain()
        try:
            while await answer(reader.readexactly, write, peer, "tls"):
                pass
        except (OSError, ssl.SSLError):
            pass
        finally:
            writer.close()

    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    ls = socket.socket(family, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    in_use = set_cc(ls, cfg.get("cc"))
    ls.bind((addr, port))
    ls.listen(128)
    ls.setblocking(False)
    tls_server = await asyncio.start_server(handle_tls, sock=ls, ssl=tls)
    print(f"READY {addr} {port} cc={in_use} {'quic+' if quic_server else ''}tls alpn={ALPN}", flush=True)
    await stop.wait()
    if quic_server is not None:
        quic_server.close()
    tls_server.close()
    if qlogger is not None:
        Path(cfg["qlog"]).write_text(json.dumps(qlogger.to_dict()))
    log.close()


# -- client -------------------------------------------------------------------

def _requests(spec: dict) -> list[dict]:
    """A session's requests, in order: its `requests`, or the one `req` / `resp` of the spec."""
    rs = spec.get("requests") or [{"req": spec.get("req", 300), "resp": spec.get("resp", 20000)}]
    return [{"req": r.get("req", 300), "resp": r.get("resp", 20000), "think_s": float(r.get("think_s", 0.0))}
            for r in rs]


class _Attempt:
    """One QUIC connection attempt: protocol, transport and its log record."""

    def __init__(self, rec: dict):
        self.rec = rec
        self.proto = None
        self.transport = None
        self.qlogger = None

    @property
    def ok(self) -> bool:
        return bool(self.rec.get("ok"))


class Client:
    def __init__(self, plan: dict, log_path: str):
        self.plan = plan
        self.server = plan["server"]
        self.port = int(plan.get("port", PORT))
        self.family = socket.AF_INET6 if plan.get("family", 4) == 6 else socket.AF_INET
        self.sni = plan.get("sni", SNI)
        self.hs_timeout = float(plan.get("handshake_timeout_s", 1.0))
        self.race_delay = float(plan.get("race_delay_s", 0.1))
        self.cache_broken = bool(plan.get("cache_broken", False))
        self.quic_broken = False
        self.deadline = time.monotonic() + float(plan.get("deadline_s", 30))
        self.log = JsonlWriter(log_path)
        self.keylog = open(plan["keylog"], "a", buffering=1) if plan.get("keylog") else None
        self.traces: list = []
        self.next_id = 0
        self.next_conn = 0
        self.failures = 0
        # the client's own address toward the server (a connected UDP socket sends nothing)
        with socket.socket(self.family, socket.SOCK_DGRAM) as s:
            s.connect((self.server, self.port))
            self.src = s.getsockname()[0]
        self.tls = ssl.create_default_context(cafile=plan["cert"])
        self.tls.set_alpn_protocols([ALPN])
        if plan.get("keylog"):
            self.tls.keylog_filename = plan["keylog"]

    def _remaining(self) -> float:
        return max(0.05, self.deadline - time.monotonic())

    def _tuple(self, proto: str, src: str, sport: int) -> dict:
        return {"proto": proto, "src": src, "sport": sport, "dst": self.server, "dport": self.port}

    # QUIC ---------------------------------------------------------------------
    async def quic_connect(self, si: int, versions: list | None = None) -> _Attempt:
        from aioquic.asyncio.protocol import QuicConnectionProtocol

        class Protocol(QuicConnectionProtocol):
            """Like a browser's connected UDP socket: an ICMP error (port unreachable) ends the
            attempt at once instead of waiting for the handshake timeout."""

            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self.error = asyncio.get_running_loop().create_future()

            def error_received(self, exc) -> None:
                if not self.error.done():
                    self.error.set_result(exc)
        from aioquic.quic.configuration import QuicConfiguration
        from aioquic.quic.connection import QuicConnection
        from aioquic.quic.logger import QuicLogger

        qlogger = QuicLogger()
        cfg = QuicConfiguration(is_client=True, alpn_protocols=[ALPN], server_name=self.sni, quic_logger=qlogger,
                                secrets_log_file=self.keylog, idle_timeout=10.0)
        cfg.load_verify_locations(self.plan["cert"])
        if versions:
            # the first is the Initial's version; after a Version Negotiation the client retries with
            # the first of the others the server offers, or gives up when there is none
            cfg.supported_versions = [VERSIONS[v] for v in versions]
        conn = QuicConnection(configuration=cfg)
        sock = socket.socket(self.family, socket.SOCK_DGRAM)
        sock.bind((self.src, 0))
        sock.connect((self.server, self.port))      # connected: ICMP errors reach error_received
        loop = asyncio.get_running_loop()
        transport, proto = await loop.create_datagram_endpoint(lambda: Protocol(conn), sock=sock)
        src, sport = sock.getsockname()[:2]
        a = _Attempt({"kind": "quic_attempt", "session": si, **self._tuple("udp", src, sport),
                      "odcid": conn.original_destination_connection_id.hex(),
                      "qlog_title": f"session {si} {src}:{sport}", "t_start_ns": time.time_ns()})
        a.proto, a.transport, a.qlogger = proto, transport, qlogger
        proto.connect((self.server, self.port))
        connected = asyncio.ensure_future(proto.wait_connected())
        try:
            done, _ = await asyncio.wait({connected, proto.error}, timeout=min(self.hs_timeout, self._remaining()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if connected in done and connected.exception() is None:
                a.rec.update(ok=True, outcome="handshake_done", alpn=conn.tls.alpn_negotiated,
                             version=f"0x{conn._version:08x}" if getattr(conn, "_version", None) else None)
            elif proto.error.done():
                a.rec.update(ok=False, outcome="icmp_error", error=repr(proto.error.result()))
            elif connected in done:     # terminated, e.g. Version Negotiation without a common version
                a.rec.update(ok=False, outcome="error", error=repr(connected.exception()))
            else:
                a.rec.update(ok=False, outcome="timeout")
        except asyncio.CancelledError:
            a.rec.update(ok=False, outcome="cancelled", t_end_ns=time.time_ns())
            self.quic_close(a)
            raise
        finally:
            if not connected.done():
                connected.cancel()
        a.rec["t_end_ns"] = time.time_ns()
        if not a.ok:
            self.quic_close(a)
        return a

    def quic_close(self, a: _Attempt) -> None:
        """Close (CONNECTION_CLOSE, no draining wait), write the attempt and its qlog trace."""
        if a.proto is None:
            return
        proto, a.proto = a.proto, None
        try:
            proto.close()
        except Exception:   # noqa: BLE001 - already closed
            pass
        timer = getattr(proto, "_timer", None)
        if timer is not None:
            timer.cancel()
        a.transport.close()
        a.rec.setdefault("t_end_ns", time.time_ns())
        self.log.write(a.rec)
        for tr in a.qlogger.to_dict()["traces"]:
            tr["title"] = a.rec["qlog_title"]
            self.traces.append(tr)

    async def quic_request(self, a: _Attempt, si: int, spec: dict) -> bool:
        ok = True
        for r in _requests(spec):
            if r["think_s"]:
                await asyncio.sleep(min(r["think_s"], self._remaining()))
            reader, writer = await a.proto.create_stream()
            rec = self._request_rec(si, "quic", a.rec, r)
            writer.write(self._request_bytes(rec))
            writer.write_eof()
            ok = await self._read_response(reader, rec) and ok
        return ok

    # TCP ----------------------------------------------------------------------
    async def tcp_connect(self, si: int):
        """TLS over TCP; returns (reader, writer, rec) or (None, None, rec) on failure."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(self.family, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cc = set_cc(sock, self.plan.get("cc"))
        sock.bind((self.src, 0))
        sock.setblocking(False)
        src, sport = sock.getsockname()[:2]
        self.next_conn += 1
        rec = {"kind": "connect", "session": si, "conn": self.next_conn - 1, **self._tuple("tcp", src, sport),
               "tls": True, "sni": self.sni, "cc": cc, "t_start_ns": time.time_ns()}
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (self.server, self.port)), self._remaining())
            rec["t_tcp_ns"] = time.time_ns()
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(sock=sock, ssl=self.tls, server_hostname=self.sni), self._remaining())
        except asyncio.CancelledError:
            rec.update(ok=False, error="cancelled", t_end_ns=time.time_ns())
            sock.close()
            self.log.write(rec)
            raise
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as e:
            rec.update(ok=False, error=repr(e), t_end_ns=time.time_ns())
            sock.close()
            self.log.write(rec)
            return None, None, rec
        ssl_obj = writer.get_extra_info("ssl_object")
        rec.update(ok=True, t_end_ns=time.time_ns(), alpn=ssl_obj.selected_alpn_protocol() if ssl_obj else None,
                   tls_version=ssl_obj.version() if ssl_obj else None)
        self.log.write(rec)
        return reader, writer, rec

    async def tcp_request(self, reader, writer, crec: dict, si: int, spec: dict) -> bool:
        ok = True
        for r in _requests(spec):
            if r["think_s"]:
                await asyncio.sleep(min(r["think_s"], self._remaining()))
            rec = self._request_rec(si, "tcp", crec, r)
            writer.write(self._request_bytes(rec))
            await writer.drain()
            ok = await self._read_response(reader, rec) and ok
        return ok

    async def tcp_close(self, writer, crec: dict) -> None:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 1.0)
        except (asyncio.TimeoutError, OSError, ssl.SSLError):
            pass
        self.log.write({"kind": "close", "session": crec["session"], "transport": "tcp",
                        **{k: crec[k] for k in ("proto", "src", "sport", "dst", "dport")}, "t_ns": time.time_ns()})

    # requests -----------------------------------------------------------------
    def _request_rec(self, si: int, transport: str, conn_rec: dict, spec: dict) -> dict:
        self.next_id += 1
        return {"kind": "request", "id": self.next_id - 1, "session": si, "transport": transport,
                **{k: conn_rec[k] for k in ("proto", "src", "sport", "dst", "dport")},
                "req_bytes": max(HEADER_LEN, int(spec.get("req", 300))),
                "resp_bytes": max(HEADER_LEN, int(spec.get("resp", 20000)))}

    @staticmethod
    def _request_bytes(rec: dict) -> bytes:
        body = rec["req_bytes"] - HEADER_LEN
        return HEADER.pack(MAGIC_REQUEST, 0, rec["id"], body, rec["resp_bytes"]) + b"q" * body

    async def _read_response(self, reader, rec: dict) -> bool:
        rec["t_send_ns"] = time.time_ns()
        try:
            async def read() -> None:
                hdr = await reader.readexactly(1)
                rec["t_first_byte_ns"] = time.time_ns()
                hdr += await reader.readexactly(HEADER_LEN - 1)
                magic, _f, mid, body_len, _ = HEADER.unpack(hdr)
                if magic != MAGIC_RESPONSE or mid != rec["id"]:
                    raise ConnectionError(f"bad response header {hdr!r}")
                await reader.readexactly(body_len)
            await asyncio.wait_for(read(), self._remaining())
            rec.update(ok=True, t_last_byte_ns=time.time_ns())
        except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, OSError, ssl.SSLError) as e:
            rec.update(ok=False, error=repr(e), t_last_byte_ns=time.time_ns())
        self.log.write(rec)
        return rec["ok"]

    # sessions -----------------------------------------------------------------
    async def session(self, si: int, spec: dict) -> None:
        mode = spec.get("mode", "quic_first")
        eff = mode
        if mode in ("quic_first", "race") and self.cache_broken and self.quic_broken:
            eff = "cached_broken"
        srec = {"kind": "session", "session": si, "mode": mode, "effective": eff, "t_start_ns": time.time_ns()}
        transport, ok = None, False
        versions = spec.get("quic_versions", self.plan.get("quic_versions"))
        if eff in ("quic_first", "quic_only"):
            a = await self.quic_connect(si, versions)
            if a.ok:
                transport, ok = "quic", await self.quic_request(a, si, spec)
                self.quic_close(a)
            else:
                self.quic_broken = True
                if eff == "quic_first":
                    transport, ok = await self._tcp_session(si, spec)
        elif eff == "race":
            transport, ok = await self._race(si, spec, versions)
        else:   # tcp, cached_broken
            transport, ok = await self._tcp_session(si, spec)
        srec.update(transport=transport, ok=ok, t_end_ns=time.time_ns())
        self.log.write(srec)
        if not ok and eff != "quic_only":
            self.failures += 1

    async def _tcp_session(self, si: int, spec: dict):
        reader, writer, crec = await self.tcp_connect(si)
        if writer is None:
            return None, False
        ok = await self.tcp_request(reader, writer, crec, si, spec)
        await self.tcp_close(writer, crec)
        return "tcp", ok

    async def _race(self, si: int, spec: dict, versions: list | None = None):
        async def delayed_tcp():
            await asyncio.sleep(self.race_delay)
            return await self.tcp_connect(si)
        qt = asyncio.ensure_future(self.quic_connect(si, versions))
        tt = asyncio.ensure_future(delayed_tcp())
        pending, winner = {qt, tt}, None
        while pending and winner is None:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in sorted(done, key=lambda t: t is not qt):       # QUIC first if both finished
                ok = t.result().ok if t is qt else t.result()[1] is not None
                if ok and winner is None:
                    winner = t
        for t in pending:       # the loser, still handshaking
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        q = qt.result() if qt.done() and not qt.cancelled() else None
        tcp = tt.result() if tt.done() and not tt.cancelled() else None
        if q is not None and not q.ok:
            self.quic_broken = True
        if winner is qt:
            if tcp is not None and tcp[1] is not None:      # both completed: drop the TCP one unused
                await self.tcp_close(tcp[1], tcp[2])
            ok = await self.quic_request(q, si, spec)
            self.quic_close(q)
            return "quic", ok
        if q is not None:
            self.quic_close(q)
        if winner is tt:
            reader, writer, crec = tcp
            ok = await self.tcp_request(reader, writer, crec, si, spec)
            await self.tcp_close(writer, crec)
            return "tcp", ok
        return None, False

    async def run(self) -> int:
        gap = float(self.plan.get("gap_s", 0.3))
        for si, spec in enumerate(self.plan["sessions"]):
            if si and time.monotonic() < self.deadline:
                await asyncio.sleep(min(float(spec.get("gap_s", gap)), self._remaining()))
            if time.monotonic() >= self.deadline:
                self.failures += 1
                break
            await self.session(si, spec)
        if self.plan.get("qlog"):
            Path(self.plan["qlog"]).write_text(json.dumps(_qlog_doc(self.traces)))
        self.log.close()
        if self.keylog:
            self.keylog.close()
        return 1 if self.failures else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["server"] and len(argv) == 2:
        asyncio.run(serve(json.loads(Path(argv[1]).read_text())))
        return 0
    if argv[:1] == ["client"] and len(argv) == 3:
        plan = json.loads(Path(argv[1]).read_text())
        return asyncio.run(Client(plan, argv[2]).run())
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

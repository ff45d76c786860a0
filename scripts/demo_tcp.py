"""One TCP connection as a capture at the server sees it, synthesized (for the demo weeks,
scripts/make-demo-week.py; test data, not the pipeline).

A small event-driven model of the two ends and the path between them, enough for tailscope's
detectors to read the packets as they read real ones:

- the client: SYN, then its requests one at a time (each in one segment), the next one a think
  time after the previous response arrived whole; it acknowledges every second segment, a lone one
  after 40 ms (delayed ACK), the last of a response at once, and anything out of order at once
  with SACK blocks (most recent first, RFC 2018), a duplicate with a D-SACK (RFC 2883); FIN after the last response.
- the server: answers each request after its server time; Linux-like sender: IW10, slow start,
  congestion avoidance (Reno growth, Cubic's 0.7 back-off and HyStart's delay exit), SACK loss detection (a hole with 3
  segments SACKed above it, RFC 6675), fast recovery holding cwnd at ssthresh, a tail loss probe
  2 SRTT after the last send (RFC 8985; + 200 ms with one segment out), RTO = SRTT +
  max(4 RTTVAR, 200 ms) (RFC 6298, Linux's floor) with go-back-N and exponential back-off, slow
  start after an idle RTO; TCP timestamps (1 ms clock), window scale 7, MSS 1460.
- the path, after the capture point (so the capture sees every transmission, as at a server):
  a one-way delay of half the connection's RTT each way, an access link whose rate spaces the
  server's bursts (the client's ACKs come back clocked by it), a small random extra delay downstream
  (kept in order: jitter here never reorders), random loss of the server's data segments, and
  optionally a token-bucket policer (drops whatever finds the bucket empty: Flach et al.,
  SIGCOMM 2016) and a deep FIFO queue shared with other users' traffic (delays, never drops).
  A lost SYN-ACK is repeated after the server's and client's 1 s initial RTO.

Packets are Ethernet/IPv4/TCP headers only (a headers-only capture: the captured length stops at
the TCP header, the original length counts the payload), IPv4 header checksums right, TCP
checksums zero (as an offloading server's capture shows them).
"""
from __future__ import annotations

import heapq
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
import pcapgen  # noqa: E402  (the tests' frame helpers: the Internet checksum)

MSS = 1448  # payload per full segment: MSS 1460 less the 12 bytes of the timestamp option
IW = 10  # initial window, segments (RFC 6928, Linux)
MIN_RTO = 0.2  # Linux's floor
INIT_RTO = 1.0  # RFC 6298
DELACK = 0.04  # Linux's delayed-ACK timer for a lone segment
BETA = 0.7  # Cubic's multiplicative decrease
RWND_SEGS = 2048  # the client's receive window (3 MB) never limits
NIC_BPS = 1e9 / 8  # the server's interface: back-to-back segments leave 12 µs apart
WSCALE = 7
SERVER_MAC, CLIENT_MAC = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
SYN, FIN, PSH, ACK = 0x02, 0x01, 0x08, 0x10


class Policer:
    """Token bucket: `rate` bytes/s, `burst` bytes deep, full at the start."""

    def __init__(self, rate: float, burst: int):
        self.rate, self.burst, self.tokens, self.t = rate, burst, float(burst), None
        self.drops = 0

    def passes(self, t: float, size: int) -> bool:
        if self.t is not None:
            self.tokens = min(self.burst, self.tokens + (t - self.t) * self.rate)
        self.t = t
        if self.tokens >= size:
            self.tokens -= size
            return True
        self.drops += 1
        return False


class DeepQueue:
    """A FIFO of `rate` bytes/s and `buf` bytes shared with other users' traffic (a fluid whose
    load, as a fraction of the rate, takes a bounded random walk every `step` s): each packet waits
    for the backlog in front of it, which its own earlier packets join."""

    def __init__(self, rng, rate: float, buf: int, backlog: float, load: float, step: float = 0.05):
        self.rng, self.rate, self.buf, self.backlog, self.load, self.step = rng, rate, buf, backlog, load, step
        self.t = None

    def delay(self, t: float, size: int) -> float:
        if self.t is None:
            self.t = t
        while self.t < t:
            dt = min(self.step, t - self.t)
            self.backlog = min(self.buf, max(0.0, self.backlog + (self.load - 1.0) * self.rate * dt))
            self.t += dt
            self.load = min(1.15, max(0.55, self.load + self.rng.gauss(0, 0.04)))
        self.backlog += size
        return self.backlog / self.rate


class _Seg:
    __slots__ = ("start", "end", "sent", "retx", "sacked", "lost", "out")

    def __init__(self, start, end, t):
        self.start, self.end, self.sent, self.retx = start, end, t, 0
        self.sacked = self.lost = False
        self.out = True  # in flight (counted in pipe)


def synthesize(rng, *, client: bytes, server: bytes, sport: int, dport: int, start: float, rtt: float,
               jitter: float, loss: float, rate: float, queries, policer: Policer | None = None,
               queue: DeepQueue | None = None, synack_lost: bool = False, close_after: float = 1.0):
    """The packets of one connection: [(time_us, captured bytes, original length)] in time order.
    `queries`: [(request bytes <= MSS, server time s, response bytes, client think time s)],
    the think time being the pause before that request (none for the first). `start` is when the
    client's SYN reaches the server (s); `rtt` the path's base round trip (s); `jitter` the mean
    of the exponential extra downstream delay (s); `loss` the chance a server data segment is
    lost downstream; `rate` the access link's (bytes/s), unless `queue` takes its place."""
    out = []
    owd = rtt / 2
    ev = []  # (time, order, kind, arg)
    order = [0]

    def at(t, kind, arg=None):
        order[0] += 1
        heapq.heappush(ev, (t, order[0], kind, arg))

    ids = {"s": rng.randrange(65536), "c": rng.randrange(65536)}
    isn_s, isn_c = rng.getrandbits(32), rng.getrandbits(32)
    ts_s, ts_c = rng.getrandbits(31), rng.getrandbits(31)
    ttl_c = rng.choice((46, 50, 52, 54, 57))

    def emit(t, who, flags, seq, ack, plen=0, opts=b"", win=0):
        ids[who] = (ids[who] + 1) & 0xFFFF
        src, dst, sp, dp, ttl = (server, client, dport, sport, 64) if who == "s" else (client, server, sport, dport, ttl_c)
        tcp_len = 20 + len(opts)
        total = 20 + tcp_len + plen
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, ids[who], 0x4000, ttl, 6, 0, src, dst)
        ip = ip[:10] + struct.pack("!H", pcapgen.checksum(ip)) + ip[12:]
        tcp = struct.pack("!HHIIBBHHH", sp, dp, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (tcp_len // 4) << 4, flags, win, 0, 0)
        mac = (CLIENT_MAC + SERVER_MAC) if who == "s" else (SERVER_MAC + CLIENT_MAC)
        out.append((round(t * 1e6), mac + b"\x08\x00" + ip + tcp + opts, 14 + total))

    def ts_opt(val, ecr):
        return struct.pack("!BBBBII", 1, 1, 8, 10, val & 0xFFFFFFFF, ecr & 0xFFFFFFFF)

    def syn_opts(val, ecr):  # Linux's order: MSS, SACK permitted, timestamps, NOP, window scale
        return struct.pack("!BBHBBBBIIBBBB", 2, 4, 1460, 4, 2, 8, 10, val & 0xFFFFFFFF, ecr & 0xFFFFFFFF, 1, 3, 3, WSCALE)

    # ---- the path ---------------------------------------------------------------------------
    down_last, up_last, link = [0.0], [0.0], [0.0]

    def down(t, size, data: bool):
        """When a server packet sent at t reaches the client, or None if it is lost."""
        if data:
            if policer is not None and not policer.passes(t, size):
                return None
            if rng.random() < loss:
                return None
        if queue is not None:
            q = queue.delay(t, size)
        else:  # the access link: its rate spaces a burst out (ACK clocking); its buffer never fills
            link[0] = max(t, link[0]) + size / rate
            q = link[0] - t
        arr = max(down_last[0], t + owd + q + rng.expovariate(1 / jitter))
        down_last[0] = arr
        return arr

    def up(t):
        arr = max(up_last[0], t + owd + rng.expovariate(4 / jitter))
        up_last[0] = arr
        return arr

    # ---- server state -----------------------------------------------------------------------
    S = {"una": 0, "nxt": 0, "end": 0, "cwnd": float(IW), "ssthresh": 1e9, "state": "open", "recover": 0,
         "srtt": None, "rttvar": 0.0, "rto": INIT_RTO, "backoff": 1, "gen": 0, "tlp_out": False,
         "pipe": 0, "nic": 0.0, "last_send": 0.0, "c_tsval": 0, "c_next": 0,
         "resp_ends": [], "timer": None, "nlost": 0, "min_rtt": 1e9}
    segs: list[_Seg] = []  # the server's segments in sequence order (retransmissions reuse theirs)
    first = [0]  # index of the first segment not cumulatively acknowledged

    def _outstanding():
        return (segs[i] for i in range(first[0], len(segs)))

    def s_tsval(t):
        return ts_s + int(t * 1000)

    def s_send_seg(t, seg: _Seg, retx: bool):
        t = max(t, S["nic"])
        size = 14 + 20 + 32 + (seg.end - seg.start)
        S["nic"] = t + size / NIC_BPS
        flags = ACK | (PSH if seg.end in S["resp_ends"] else 0)
        emit(t, "s", flags, isn_s + 1 + seg.start, isn_c + 1 + S["c_next"], seg.end - seg.start,
             ts_opt(s_tsval(t), S["c_tsval"]), 502)
        seg.sent, seg.out = t, True
        if retx:
            seg.retx += 1
        S["pipe"] += 1
        S["last_send"] = t
        arr = down(t, size, True)
        if arr is not None:
            at(arr, "c_data", (seg.start, seg.end, s_tsval(t)))
        return t

    def arm(t, kind):
        S["gen"] += 1
        if kind is None:
            S["timer"] = None
            return
        if kind == "tlp":
            pto = 2 * S["srtt"]
            if S["pipe"] <= 1:
                pto += 0.2
            when = t + min(max(pto, 0.01), S["rto"])
        else:
            when = t + min(S["rto"] * S["backoff"], 120.0)
        S["timer"] = (when, kind)
        at(when, "s_timer", (S["gen"], kind))

    def rearm(t):
        if S["una"] >= S["nxt"]:
            arm(t, None)
        elif S["state"] == "open" and not S["tlp_out"] and S["srtt"] is not None:
            arm(t, "tlp")
        else:
            arm(t, "rto")

    def try_send(t):
        sent_new = False
        while S["pipe"] < min(S["cwnd"], RWND_SEGS):
            if S["nlost"]:
                lost = next(s for s in _outstanding() if s.lost)
                lost.lost = False
                S["nlost"] -= 1
                t = s_send_seg(t, lost, True)
                continue
            if S["nxt"] < S["end"]:
                resp_end = next(e for e in S["resp_ends"] if e > S["nxt"])
                seg = _Seg(S["nxt"], min(S["nxt"] + MSS, resp_end), t)
                segs.append(seg)
                S["nxt"] = seg.end
                t = s_send_seg(t, seg, False)
                sent_new = True
                continue
            break
        if sent_new or S["timer"] is None:
            rearm(t)

    def rtt_sample(r):
        S["min_rtt"] = min(S["min_rtt"], r)
        # HyStart (Cubic's delay rule): leave slow start once the RTT rises by min_rtt/8 (4-16 ms)
        if S["cwnd"] < S["ssthresh"] and S["cwnd"] >= 16 and \
                r > S["min_rtt"] + min(max(S["min_rtt"] / 8, 0.004), 0.016):
            S["ssthresh"] = S["cwnd"]
        if S["srtt"] is None:
            S["srtt"], S["rttvar"] = r, r / 2
        else:
            S["rttvar"] = 0.75 * S["rttvar"] + 0.25 * abs(S["srtt"] - r)
            S["srtt"] = 0.875 * S["srtt"] + 0.125 * r
        S["rto"] = S["srtt"] + max(4 * S["rttvar"], MIN_RTO)

    def s_ack(t, ack, sacks):
        progress, delivered, sample = ack > S["una"], 0, None
        if progress:
            i = first[0]
            while i < len(segs) and segs[i].end <= ack:
                s = segs[i]
                if s.out:
                    S["pipe"] -= 1
                if s.lost:
                    S["nlost"] -= 1
                if not s.sacked:
                    delivered += 1
                    if s.retx == 0:
                        sample = t - s.sent
                s.out = s.lost = False
                s.sacked = True
                i += 1
            first[0] = i
            S["una"] = ack
        for a, b in sacks:
            for s in _outstanding():
                if s.start >= b:
                    break
                if s.start >= a and s.end <= b and not s.sacked:
                    if s.lost:
                        S["nlost"] -= 1
                    s.sacked, s.lost = True, False
                    if s.out:
                        S["pipe"] -= 1
                        s.out = False
                    delivered += 1
                    if s.retx == 0 and sample is None:
                        sample = t - s.sent
        if sample is not None:
            rtt_sample(sample)
        newly_lost = False
        if sacks:  # a hole with 3 segments SACKed above it is lost (RFC 6675's DupThresh)
            above, latest = 0, -1.0  # SACKed segments above, the latest sent of them
            for i in range(len(segs) - 1, first[0] - 1, -1):
                s = segs[i]
                if s.sacked:
                    above += 1
                    latest = max(latest, s.sent)
                elif above >= 3 and s.out and latest > s.sent:  # sent before data that got through
                    s.out, s.lost = False, True
                    S["pipe"] -= 1
                    S["nlost"] += 1
                    newly_lost = True
        if newly_lost and S["state"] == "open":
            S["state"], S["recover"] = "recovery", S["nxt"]
            S["ssthresh"] = max(2.0, S["cwnd"] * BETA)
            S["cwnd"] = S["ssthresh"]
        if progress:
            S["backoff"], S["tlp_out"] = 1, False
            if S["state"] != "open" and S["una"] >= S["recover"]:
                S["state"] = "open"
            if S["state"] != "recovery":  # slow start (after an RTO too) or congestion avoidance
                S["cwnd"] += delivered if S["cwnd"] < S["ssthresh"] else delivered / S["cwnd"]
            rearm(t)
        try_send(t)

    def s_timer(t, kind):
        if S["una"] >= S["nxt"]:
            return
        if kind == "tlp":  # probe: the highest segment again (no new data is waiting here)
            S["tlp_out"] = True
            if S["nxt"] < S["end"] and S["pipe"] < S["cwnd"]:
                try_send(t)
            else:
                probe = next(s for s in reversed(segs) if not s.sacked)
                if probe.out:
                    S["pipe"] -= 1
                if probe.lost:
                    probe.lost = False
                    S["nlost"] -= 1
                s_send_seg(t, probe, True)
            arm(t, "rto")
            return
        # RTO: every outstanding segment not SACKed is lost; go back N from cwnd 1
        for s in _outstanding():
            if not s.sacked:
                if s.out:
                    S["pipe"] -= 1
                if not s.lost:
                    S["nlost"] += 1
                s.out, s.lost = False, True
        if S["state"] != "loss":
            S["ssthresh"] = max(2.0, S["cwnd"] * BETA)
        S["cwnd"], S["state"], S["recover"] = 1.0, "loss", S["nxt"]
        S["backoff"] *= 2
        S["timer"] = None
        try_send(t)
        arm(t, "rto")

    # ---- client state -----------------------------------------------------------------------
    C = {"rcv": 0, "ooo": [], "unacked": 0, "ts_recent": 0, "gen": 0, "q": 0, "resp_end": None,
         "nxt": 0, "last_sack": None, "done": False, "waiting": False, "dsack": None}

    def c_tsval(t):
        return ts_c + int(t * 1000)

    def c_ack(t, flags=ACK):
        blocks = []
        if C["ooo"]:
            rest = sorted(C["ooo"], reverse=True)
            if C["last_sack"] is not None:
                first_b = next((b for b in rest if b[0] <= C["last_sack"] < b[1]), None)
                if first_b is not None:
                    rest.remove(first_b)
                    rest.insert(0, first_b)
            blocks = rest[:3]
        if C["dsack"] is not None:  # a duplicate arrived: report it first (D-SACK, RFC 2883)
            blocks = [C["dsack"]] + blocks[:2]
            C["dsack"] = None
        opts = struct.pack("!BBBBII", 1, 1, 8, 10, c_tsval(t) & 0xFFFFFFFF, C["ts_recent"] & 0xFFFFFFFF)
        if blocks:
            opts += struct.pack("!BBBB", 1, 1, 5, 2 + 8 * len(blocks)) + b"".join(
                struct.pack("!II", (isn_s + 1 + a) & 0xFFFFFFFF, (isn_s + 1 + b) & 0xFFFFFFFF) for a, b in blocks)
        arr = up(t)
        emit_at_server(arr, flags, C["nxt"], C["rcv"], opts, 0)
        C["unacked"] = 0
        C["gen"] += 1
        return arr, blocks

    def emit_at_server(arr, flags, seq, rcv, opts, plen):
        emit(arr, "c", flags, isn_c + 1 + seq, isn_s + 1 + rcv if flags & ACK else 0, plen, opts, 24576)

    def c_request(t):
        i = C["q"]
        req, server_s, resp, _ = queries[i]
        opts = ts_opt(c_tsval(t), C["ts_recent"])
        arr = up(t)
        emit_at_server(arr, ACK | PSH, C["nxt"], C["rcv"], opts, req)
        C["nxt"] += req
        C["resp_end"] = (C["resp_end"] or 0) + resp
        C["waiting"] = True
        at(arr, "s_req", (C["nxt"], c_tsval(t), server_s, resp))

    def c_ack_and_notify(t):
        arr, blocks = c_ack(t)
        at(arr, "s_ack", (C["rcv"], blocks, c_tsval(t)))

    # ---- the handshake ----------------------------------------------------------------------
    emit(start, "c", SYN, isn_c, 0, 0, syn_opts(c_tsval(start - owd), 0), 64240)
    S["c_tsval"] = c_tsval(start - owd)
    t_sa = start + 2e-5
    emit(t_sa, "s", SYN | ACK, isn_s, isn_c + 1, 0, syn_opts(s_tsval(t_sa), S["c_tsval"]), 65160)
    if synack_lost:  # the client repeats its SYN after 1 s, the server its SYN-ACK
        t_syn2 = start + INIT_RTO + rng.uniform(0, 0.002)
        emit(t_syn2, "c", SYN, isn_c, 0, 0, syn_opts(c_tsval(t_syn2 - owd), 0), 64240)
        S["c_tsval"] = c_tsval(t_syn2 - owd)
        t_sa = t_syn2 + 2e-5
        emit(t_sa, "s", SYN | ACK, isn_s, isn_c + 1, 0, syn_opts(s_tsval(t_sa), S["c_tsval"]), 65160)
    t_c = t_sa + owd + rng.expovariate(1 / jitter)
    C["ts_recent"] = s_tsval(t_sa)
    arr = up(t_c)
    emit_at_server(arr, ACK, 0, 0, ts_opt(c_tsval(t_c), C["ts_recent"]), 0)
    S["c_tsval"] = c_tsval(t_c)
    hs_rtt = arr - t_sa
    c_request(t_c + 3e-5)

    fin_acked = False
    while ev:
        t, _, kind, arg = heapq.heappop(ev)
        if kind == "s_req":
            c_next, tsval, server_s, resp = arg
            S["c_next"], S["c_tsval"] = c_next, tsval
            if S["srtt"] is None:
                rtt_sample(hs_rtt)
            if server_s > DELACK:  # the server's delayed ACK of the request
                emit(t + DELACK, "s", ACK, isn_s + 1 + S["nxt"], isn_c + 1 + c_next, 0,
                     ts_opt(s_tsval(t + DELACK), tsval), 502)
            at(t + server_s, "s_resp", resp)
        elif kind == "s_resp":
            if S["una"] >= S["nxt"] and S["srtt"] is not None and t - S["last_send"] > S["rto"]:
                S["cwnd"] = min(S["cwnd"], float(IW))  # slow start after idle (RFC 5681 §4.1)
            S["end"] += arg
            S["resp_ends"].append(S["end"])
            try_send(t)
        elif kind == "c_data":
            a, b, tsval = arg
            immediate = bool(C["ooo"])
            if a <= C["rcv"]:
                C["ts_recent"] = tsval
            if b <= C["rcv"]:
                immediate = True
                C["dsack"] = (a, b)
            elif a > C["rcv"]:
                C["ooo"] = _merge(C["ooo"] + [(a, b)])
                C["last_sack"] = a
                immediate = True
            else:
                C["rcv"] = b
                while C["ooo"] and C["ooo"][0][0] <= C["rcv"]:
                    C["rcv"] = max(C["rcv"], C["ooo"].pop(0)[1])
                C["unacked"] += 1
            complete = C["waiting"] and C["rcv"] >= C["resp_end"]
            if immediate or complete or C["unacked"] >= 2:
                c_ack_and_notify(t)
            else:
                at(t + DELACK, "c_delack", C["gen"])
            if complete:
                C["waiting"] = False
                C["q"] += 1
                if C["q"] < len(queries):
                    at(t + queries[C["q"]][3], "c_req")
                else:
                    C["done"] = True
                    at(t + close_after, "c_fin")
        elif kind == "c_delack":
            if arg == C["gen"] and C["unacked"]:
                c_ack_and_notify(t)
        elif kind == "c_req":
            c_request(t)
        elif kind == "s_ack":
            ack, blocks, tsval = arg
            S["c_tsval"] = tsval
            s_ack(t, ack, blocks)
        elif kind == "s_timer":
            gen, tk = arg
            if gen == S["gen"]:
                S["timer"] = None
                s_timer(t, tk)
        elif kind == "c_fin":
            opts = ts_opt(c_tsval(t), C["ts_recent"])
            arr = up(t)
            emit_at_server(arr, FIN | ACK, C["nxt"], C["rcv"], opts, 0)
            at(arr, "s_fin", C["nxt"] + 1)
        elif kind == "s_fin":
            emit(t, "s", FIN | ACK, isn_s + 1 + S["nxt"], isn_c + 1 + arg, 0, ts_opt(s_tsval(t), S["c_tsval"]), 502)
            arr = t + owd + rng.expovariate(1 / jitter)
            at(arr, "c_lastack", arg)
        elif kind == "c_lastack":
            arr = up(t)
            emit_at_server(arr, ACK, arg, C["rcv"] + 1, ts_opt(c_tsval(t), C["ts_recent"]), 0)
            fin_acked = True
    assert fin_acked, "a connection ended without its FIN exchange"
    out.sort(key=lambda p: p[0])
    return out


def _merge(blocks):
    blocks = sorted(blocks)
    merged = [list(blocks[0])]
    for a, b in blocks[1:]:
        if a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [tuple(x) for x in merged]

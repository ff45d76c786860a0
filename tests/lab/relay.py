"""The lab's impairment engine: a userspace relay on a TUN device.

Runs inside the router namespace (`python -m tests.lab.relay CONFIG LOG`).
Policy routing (topology.py) hands it every packet between client and server;
it decides per packet - drop, delay, queue, hold back - writes survivors back
into the TUN device, and logs every decision as one JSON line. That log is the
lab's ground truth (schema in README.md); tcpdump at the server only shows the
consequences.

Why userspace instead of netem: netem is not available on every kernel the lab
must run on, and a kernel qdisc cannot aim at "the last segment of response 2"
or say afterwards exactly which packet it dropped and why.
"""
from __future__ import annotations

import fcntl
import heapq
import ipaddress
import json
import os
import random
import select
import signal
import struct
import sys
import time

from .models import Bernoulli, Delay, GilbertElliott, RateQueue, TokenBucket
from .packet import Packet, parse_ip
from .tracker import FlowTable, SegInfo

LOG_SCHEMA_VERSION = 1
TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_READS_PER_WAKEUP = 512      # bound the read loop so releases are never starved


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    ifr = struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI)
    fcntl.ioctl(fd, TUNSETIFF, ifr)
    return fd


class JsonLog:
    def __init__(self, path: str):
        self.f = open(path, "w", buffering=1 << 16)
        self.count = 0

    def write(self, rec: dict) -> None:
        self.f.write(json.dumps({k: v for k, v in rec.items() if v is not None},
                                separators=(",", ":")) + "\n")
        self.count += 1

    def close(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


def _public(rec: dict) -> dict:
    """The record without the relay's private bookkeeping keys (_...)."""
    return {k: v for k, v in rec.items() if not k.startswith("_")}


def _as_set(v):
    if v is None or v == "*":
        return None
    return set(v) if isinstance(v, (list, tuple)) else {v}


class Rule:
    """A targeted impairment from the scenario (see README 'Drop rules')."""

    def __init__(self, index: int, spec: dict, seed: int):
        self.index = index
        self.kind = spec["kind"]
        self.dir = spec.get("dir", {"syn": "c2s", "synack": "s2c"}.get(self.kind, "s2c"))
        self.conn = _as_set(spec.get("conn"))
        self.msg = _as_set(spec.get("msg"))
        # syn/synack: which transmissions (default the first); datagram: which datagrams of the
        # flow in this direction (default all)
        self.nth = _as_set(spec.get("nth", None if self.kind == "datagram" else [1]))
        self.udp_flows = _as_set(spec.get("flow"))        # datagram: UDP flow ordinals (default all)
        self.flow_every = int(spec.get("flow_every", 1))  # datagram: only every n-th UDP flow (0, n, 2n...)
        self.proto = spec.get("proto")                    # reorder: only "tcp" or "udp" (default both)
        self.index_in_msg = _as_set(spec.get("index"))
        self.count = int(spec.get("count", 1))
        self.transmissions = int(spec.get("transmissions", 1))
        self.prob = spec.get("prob")
        self.limit = spec.get("limit")
        self.every = int(spec.get("every", 1))
        self.by_packets = spec.get("by_packets")
        self.by_ms = spec.get("by_ms")
        self.max_hold_ms = float(spec.get("max_hold_ms", 50))
        self.rng = random.Random(seed * 1000 + index)
        self.fired = 0
        self.eligible = 0
        # data ranges this rule dropped, for dropping their retransmissions too
        self.pending: dict[tuple, int] = {}   # (conn, start, end) -> transmissions still to drop

    def _scope(self, direction: str, info: SegInfo) -> bool:
        if direction != self.dir or info.conn is None:
            return False
        if self.conn is not None and info.conn not in self.conn:
            return False
        return True

    def _chance(self) -> bool:
        if self.limit is not None and self.fired >= self.limit:
            return False
        return self.prob is None or self.rng.random() < self.prob

    def match_drop(self, pkt: Packet, direction: str, info: SegInfo, mss: int) -> int | None:
        """Return the transmission number dropped (1 = original), or None."""
        if self.kind == "datagram":
            return self._match_datagram(pkt, direction, info)
        if not pkt.is_tcp or not self._scope(direction, info):
            return None
        if self.kind in ("syn", "synack"):
            want_ack = self.kind == "synack"
            if pkt.syn and pkt.ackf == want_ack and self.nth is not None and info.syn_n in self.nth \
                    and self._chance():
                self.fired += 1
                return info.syn_n
            return None
        if self.kind == "final_ack":
            # the first ACK of the last byte of the selected messages (of the other direction), when
            # it carries nothing else (no data, SYN, FIN or RST): a lost "final ACK"
            if pkt.payload_len == 0 and not (pkt.syn or pkt.fin or pkt.rst) and info.acked_msg is not None \
                    and (self.msg is None or info.acked_msg in self.msg) and self._chance():
                self.fired += 1
                return 1
            return None
        if self.kind not in ("segment", "tail") or pkt.payload_len == 0:
            return None
        start = info.rel_seq - 1
        end = start + pkt.payload_len
        if info.retx:
            # A retransmission of a range we dropped earlier: drop it again
            # while the rule's `transmissions` budget lasts (forces backoff).
            for key, left in self.pending.items():
                c, s, e = key
                if c == info.conn and left > 0 and start <= s and end >= e:
                    self.pending[key] = left - 1
                    return self.transmissions - left + 1
            return None
        if info.msg is None or (self.msg is not None and info.msg not in self.msg):
            return None
        if self.kind == "segment":
            hit = self.index_in_msg is not None and info.seg in self.index_in_msg
        else:   # tail: among the last `count` segments of the message
            hit = info.msg_remaining is not None and info.msg_remaining <= (self.count - 1) * max(mss, 1)
        if hit and self._chance():
            self.fired += 1
            if self.transmissions > 1:
                self.pending[(info.conn, start, end)] = self.transmissions - 1
            return 1
        return None

    def _match_datagram(self, pkt: Packet, direction: str, info: SegInfo) -> int | None:
        """UDP datagram rule: drop datagrams `nth` (1-based, per flow and direction; all if
        omitted) of the UDP flows selected by `flow` / `flow_every`. Returns the datagram number."""
        if pkt.is_tcp or direction != self.dir or info.udp_flow is None:
            return None
        if self.udp_flows is not None and info.udp_flow not in self.udp_flows:
            return None
        if info.udp_flow % max(1, self.flow_every) != 0:
            return None
        if self.nth is not None and info.dgram_n not in self.nth:
            return None
        if not self._chance():
            return None
        self.fired += 1
        return info.dgram_n

    def match_reorder(self, pkt: Packet, direction: str, info: SegInfo) -> bool:
        if self.kind != "reorder" or not self._scope(direction, info):
            return False
        if self.proto is not None and pkt.proto_name != self.proto:
            return False
        if pkt.payload_len == 0 or info.retx:
            return False
        if self.msg is not None and info.msg not in self.msg:
            return False
        self.eligible += 1
        if self.eligible % self.every != 0 or not self._chance():
            return False
        self.fired += 1
        return True


class Relay:
    def __init__(self, cfg: dict, log: JsonLog):
        self.cfg = cfg
        self.log = log
        self.seed = int(cfg.get("seed", 1))
        self.client_nets = [ipaddress.ip_network(n) for n in cfg["client_nets"]]
        self.server_nets = [ipaddress.ip_network(n) for n in cfg["server_nets"]]
        self.protocols = set(cfg.get("impair_protocols", ["tcp", "udp"]))
        self.flows = FlowTable()
        self.rules = [Rule(i, r, self.seed) for i, r in enumerate(cfg.get("rules", []))]
        now = time.monotonic()
        self.delay = {}
        self.loss = {}
        self.police = {}
        self.queue = {}
        for d_i, d in enumerate(("c2s", "s2c")):
            dc = cfg.get("delay", {}).get(d, {})
            self.delay[d] = Delay(dc.get("ms", 0), dc.get("jitter_ms", 0), random.Random(self.seed * 7 + d_i))
            lc = cfg.get("loss")
            if lc and lc.get("dir", "both") in ("both", d):
                rng = random.Random(self.seed * 13 + d_i)
                if lc["model"] == "bernoulli":
                    self.loss[d] = Bernoulli(lc["p"], rng)
                elif lc["model"] == "gilbert":
                    self.loss[d] = GilbertElliott(lc["p"], lc["r"], lc.get("h", 1.0), lc.get("k", 0.0), rng)
                else:
                    raise ValueError(f"unknown loss model {lc['model']}")
            pc = cfg.get("police")
            if pc and pc.get("dir", "s2c") in ("both", d):
                self.police[d] = TokenBucket(pc["rate_kbit"], pc["burst_bytes"], now)
            bc = cfg.get("bottleneck")
            if bc and bc.get("dir", "s2c") in ("both", d):
                self.queue[d] = RateQueue(bc["rate_kbit"], bc["queue_bytes"])
        self.heap: list = []           # (release_mono, tiebreak, raw, rec)
        self.held: list = []           # packets held back by a packet count
        self.last_release = {"c2s": 0.0, "s2c": 0.0, "other": 0.0}
        self.tie = 0
        self.counters: dict[str, int] = {}
        # Per (direction, conn): arrival counter, and the arrival index and
        # payload length of every packet forwarded, so a held packet's
        # 'passed_by' counts exactly the later arrivals that left before it.
        self.rx_count: dict[tuple, int] = {}
        self.forwarded: dict[tuple, list] = {}

    # -- helpers -----------------------------------------------------------
    def _direction(self, pkt: Packet) -> str:
        dst = ipaddress.ip_address(pkt.dst)
        if any(dst in n for n in self.server_nets):
            return "c2s"
        if any(dst in n for n in self.client_nets):
            return "s2c"
        return "other"

    def _count(self, key: str) -> None:
        self.counters[key] = self.counters.get(key, 0) + 1

    @staticmethod
    def _record(pkt: Packet | None, direction: str, info: SegInfo, raw: bytes) -> dict:
        if pkt is None:
            return {"dir": direction, "proto": "unknown", "ip_len": len(raw)}
        rec = {"dir": direction, "proto": pkt.proto_name, "family": pkt.family,
               "src": pkt.src, "sport": pkt.sport, "dst": pkt.dst, "dport": pkt.dport,
               "ip_len": pkt.ip_len, "ip_id": pkt.ip_id, "len": pkt.payload_len}
        if pkt.is_tcp:
            rec.update({"flags": pkt.flag_str, "seq": pkt.seq, "ack": pkt.ack,
                        "tsval": pkt.tsval, "tsecr": pkt.tsecr})
        rec.update(info.as_log())
        return rec

    def _drop(self, rec: dict, reason: str, ts_ns: int | None = None, **extra) -> None:
        rec = _public(rec)
        self.log.write({"ts_ns": ts_ns or rec["rx_ts_ns"], "action": "drop", "reason": reason, **rec, **extra})
        self._count(f"drop:{reason}")

    # -- the per-packet pipeline ---------------------------------------------
    def handle(self, raw: bytes, now: float, rx_ts_ns: int) -> None:
        pkt = parse_ip(raw)
        direction = self._direction(pkt) if pkt else "other"
        info = self.flows.classify(pkt, direction, raw) if pkt else SegInfo()
        rec = self._record(pkt, direction, info, raw)
        rec["rx_ts_ns"] = rx_ts_ns
        key = (direction, info.conn)
        rec["_rx_idx"] = self.rx_count.get(key, 0)
        self.rx_count[key] = rec["_rx_idx"] + 1
        self._count(f"rx:{direction}")
        if direction == "other":
            # Not between client and server (the router's own chatter):
            # not ours to deliver; noted so the log accounts for every read.
            self.log.write({"ts_ns": rx_ts_ns, "action": "ignore", **_public(rec)})
            return
        impair = pkt is not None and direction != "other" and pkt.proto_name in self.protocols

        if impair:
            # 1. targeted rules (the scenario's named events)
            for rule in self.rules:
                tx = rule.match_drop(pkt, direction, info, info.mss)
                if tx is not None:
                    self._drop(rec, "rule", rule=rule.index, rule_kind=rule.kind, transmission=tx)
                    return
            # 2. random / bursty loss
            model = self.loss.get(direction)
            if model is not None:
                lost, extra = model.drop()
                if lost:
                    self._drop(rec, "gilbert_loss" if isinstance(model, GilbertElliott) else "random_loss",
                               **extra)
                    return
            # 3. policer (drops, never delays)
            bucket = self.police.get(direction)
            if bucket is not None:
                ok, tokens = bucket.admit(pkt.ip_len, now)
                rec["police_tokens"] = int(tokens)
                if not ok:
                    self._drop(rec, "policer")
                    return
        # 4. bottleneck queue (serialisation + queueing delay, tail drop)
        depart = now
        q = self.queue.get(direction) if impair else None
        if q is not None:
            ok, depart, backlog = q.enqueue(len(raw), now)
            rec["queue_backlog"] = backlog
            if not ok:
                self._drop(rec, "queue_overflow")
                return
            rec["queue_ms"] = round((depart - now) * 1000, 3)
        # 5. propagation delay + jitter, kept in order per direction
        release = depart
        if direction in self.delay:
            # the drawn propagation delay is logged so the truth can tell queueing (anything the
            # packet waited beyond it: TUN queue, relay backlog, bottleneck) from jitter
            prop = self.delay[direction].sample()
            rec["prop_ms"] = round(prop * 1000, 3)
            release = max(depart + prop, self.last_release[direction])
        # 6. explicit reordering
        if impair:
            for rule in self.rules:
                if rule.match_reorder(pkt, direction, info):
                    rec["rule"] = rule.index
                    rec["rule_kind"] = "reorder"
                    self.log.write({"ts_ns": rx_ts_ns, "action": "hold", **_public(rec),
                                    "by_packets": rule.by_packets, "by_ms": rule.by_ms})
                    self._count("hold")
                    if rule.by_packets:
                        self.held.append({"raw": raw, "rec": rec, "key": key, "left": int(rule.by_packets),
                                          "not_before": release, "deadline": release + rule.max_hold_ms / 1000,
                                          "since": now})
                    else:
                        rec["reordered"] = True
                        rec["held_ms"] = float(rule.by_ms or 0)
                        self._push(release + float(rule.by_ms or 0) / 1000, raw, rec)
                    return
        self.last_release[direction] = release
        self._push(release, raw, rec)

    def _push(self, when: float, raw: bytes, rec: dict) -> None:
        self.tie += 1
        heapq.heappush(self.heap, (when, self.tie, raw, rec))

    # -- output --------------------------------------------------------------
    def _emit(self, fd: int, raw: bytes, rec: dict, now: float, **extra) -> None:
        try:
            os.write(fd, raw)
        except OSError as e:  # would be a lab bug; record it rather than die silently
            self._drop(rec, "tun_write_error", error=str(e))
            return
        ts = time.time_ns()
        done = self.forwarded.setdefault((rec["dir"], rec.get("conn")), [])
        idx = rec.get("_rx_idx", 0)
        if rec.get("reordered"):
            # How many packets of the same connection and direction arrived
            # after this one but left before it: 0 = the hold reordered nothing.
            later = [ln for i, ln in done[-10000:] if i > idx]
            extra["passed_by"] = len(later)
            extra["passed_by_data"] = sum(1 for ln in later if ln)
        done.append((idx, rec.get("len", 0)))
        rec = _public(rec)
        self.log.write({"ts_ns": ts, "action": "forward", **rec,
                        "delay_ms": round((ts - rec["rx_ts_ns"]) / 1e6, 3), **extra})
        self._count("forward")
        if self.held:
            self._tick_held(fd, (rec["dir"], rec.get("conn")), now, idx)

    def _tick_held(self, fd: int, key: tuple, now: float, rx_idx: int) -> None:
        """A packet of connection/direction `key` just left: count it against
        the packets of the same flow held back 'by_packets' - if it arrived
        after them (packets that arrived earlier and were still in the delay
        line when the hold began would otherwise release the held packet in
        its original order)."""
        for h in list(self.held):
            if h["key"] == key and h in self.held and rx_idx > h["rec"].get("_rx_idx", 0):
                h["left"] -= 1
                if h["left"] <= 0 and now >= h["not_before"]:
                    self.held.remove(h)
                    self._emit(fd, h["raw"], {**h["rec"], "reordered": True}, now,
                               held_ms=round((now - h["since"]) * 1000, 3))

    def release_due(self, fd: int) -> None:
        now = time.monotonic()
        while self.heap and self.heap[0][0] <= now:
            _, _, raw, rec = heapq.heappop(self.heap)
            self._emit(fd, raw, rec, now)
        for h in list(self.held):
            if now >= h["deadline"] and h in self.held:
                self.held.remove(h)
                self._emit(fd, h["raw"], {**h["rec"], "reordered": True, "hold_timeout": True}, now,
                           held_ms=round((now - h["since"]) * 1000, 3))

    def next_wakeup(self) -> float:
        times = [self.heap[0][0]] if self.heap else []
        times += [h["deadline"] for h in self.held]
        return min(times) if times else time.monotonic() + 0.05

    def shutdown(self) -> None:
        """Anything still queued when we are told to stop is dropped - and
        logged as such, so the log stays a complete account."""
        now_ns = time.time_ns()
        for _, _, _, rec in sorted(self.heap, key=lambda e: e[:2]):
            self._drop(rec, "shutdown", ts_ns=now_ns)
        for h in self.held:
            self._drop(h["rec"], "shutdown", ts_ns=now_ns)
        self.heap.clear()
        self.held.clear()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.lab.relay CONFIG.json LOG.jsonl", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        cfg = json.load(f)
    log = JsonLog(argv[1])
    stop = {"flag": False}

    def on_signal(_sig, _frm):
        stop["flag"] = True
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    relay = Relay(cfg, log)
    fd = open_tun(cfg["tun"])
    log.write({"ts_ns": time.time_ns(), "action": "start", "schema": LOG_SCHEMA_VERSION,
               "pid": os.getpid(), "config": cfg})
    print(f"READY tun={cfg['tun']}", flush=True)
    max_runtime = float(cfg.get("max_runtime_s", 600))   # hard bound even if nobody stops us
    t_end = time.monotonic() + max_runtime
    while not stop["flag"] and time.monotonic() < t_end:
        timeout = max(0.0, min(relay.next_wakeup(), time.monotonic() + 0.05) - time.monotonic())
        try:
            readable, _, _ = select.select([fd], [], [], timeout)
        except InterruptedError:
            continue
        if readable:
            for _ in range(MAX_READS_PER_WAKEUP):
                try:
                    raw = os.read(fd, 65536)
                except BlockingIOError:
                    break
                relay.handle(raw, time.monotonic(), time.time_ns())
        relay.release_due(fd)
    relay.shutdown()
    log.write({"ts_ns": time.time_ns(), "action": "stop", "counters": relay.counters,
               "connections": relay.flows.count,
               "rules_fired": [r.fired for r in relay.rules],
               "reason": "signal" if stop["flag"] else "max_runtime"})
    log.close()
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

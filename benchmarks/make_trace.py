#!/usr/bin/env python3
"""Build a large benchmark trace from the lab's sample captures.

The trace is many interleaved copies of ``samples/*.pcap``: every copy of every sample (an
"instance") gets its own client address and a random start time inside the trace's span, and the
packets of all instances are merged in time order, so thousands of connections overlap the way
they would on a busy server's interface.

- Client addresses (IPv4 198.18.1.0/24, IPv6 fd00:7473:1::/64 in the lab) are rewritten; each
  (instance, original client address) pair gets a unique number n >= 1 and becomes
  10.(n>>16).(n>>8).(n&255), or fd00:7473:1::<n as the last 32 bits> for IPv6. Servers keep their
  addresses, as on a real server-side capture. The addresses exist only inside the file.
- IPv4 header checksums and TCP/UDP/ICMPv6 checksums are updated incrementally (RFC 1624), so a
  checksum that was right stays right (headers-only captures cannot be recomputed from scratch;
  server-side captures also carry offloaded, partial checksums, which stay as they were).
- Timestamps: instance start = first timestamp of the earliest sample + uniform[0, span); the
  packets of an instance keep their original spacing. span = packets / --rate.
- Output: classic pcap, microsecond timestamps, Ethernet, the samples' snaplen. Packets that are
  not IPv4/IPv6 (or not from the lab's client prefixes) are copied unchanged.
- Deterministic for a given --seed and set of samples; streamed (memory is the samples plus one
  small iterator per instance); a few µs per packet in pure Python.

With ``--window N [N ...]`` the trace is synthetic instead: back-to-back long bulk downloads, each
with N segments in flight (a server-side capture of a 1.16 Gbit/s sender on a path whose RTT is N
x 10 µs, 1% of first transmissions lost after the capture, SACK; see ``window_connection``), for
the cost of the per-ACK work against the window (benchmarks/run.py --trace window, --sweep).

A JSON sidecar ``<out>.json`` records the parameters and counts; benchmarks/run.py uses it to
decide whether a trace can be reused.

    python benchmarks/make_trace.py --packets 1000000 --out benchmarks/out/trace-1000000.pcap
"""
from __future__ import annotations

import argparse
import bisect
import collections
import hashlib
import heapq
import ipaddress
import json
import math
import os
import random
import struct
import sys
import time
from itertools import repeat
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_SAMPLES = HERE.parent / "samples"
DEFAULT_SEED = 20240601
DEFAULT_RATE = 10_000  # average packets per second of trace time

CLIENT_V4 = ipaddress.ip_network("198.18.1.0/24")
CLIENT_V6 = ipaddress.ip_network("fd00:7473:1::/64")

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1


class Packet:
    """One packet of a sample, with where its client address(es) and checksums sit."""

    __slots__ = ("ts_us", "data", "orig_len", "addrs", "ipck", "l4ck")

    def __init__(self, ts_us, data, orig_len, addrs, ipck, l4ck):
        self.ts_us = ts_us  # microseconds since the sample's first packet
        self.data = data  # bytes, as captured
        self.orig_len = orig_len
        self.addrs = addrs  # tuple of (offset, length, original client address bytes)
        self.ipck = ipck  # offset of the IPv4 header checksum, or -1
        self.l4ck = l4ck  # offset of the TCP/UDP/ICMPv6 checksum, or -1


def read_pcap(path: Path):
    """(linktype, snaplen, [(ts_us, data, orig_len), ...]) of a classic pcap file."""
    with open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 24:
        raise ValueError(f"{path}: not a pcap file (too short)")
    magic_le = struct.unpack_from("<I", raw)[0]
    if magic_le in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
        endian = "<"
    elif struct.unpack_from(">I", raw)[0] in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
        endian = ">"
    else:
        raise ValueError(f"{path}: not a classic pcap file (pcapng is not supported here)")
    magic, _vmaj, _vmin, _tz, _sig, snaplen, linktype = struct.unpack_from(endian + "IHHiIII", raw)
    nano = magic == PCAP_MAGIC_NS
    rec = struct.Struct(endian + "IIII")
    packets = []
    off = 24
    while off + 16 <= len(raw):
        sec, frac, incl, orig = rec.unpack_from(raw, off)
        off += 16
        if off + incl > len(raw):
            break  # truncated last record
        ts_us = sec * 1_000_000 + (frac // 1000 if nano else frac)
        packets.append((ts_us, raw[off : off + incl], orig))
        off += incl
    return linktype & 0xFFFF, snaplen, packets


def locate(data: bytes):
    """Find the client address(es) and checksum offsets in an Ethernet frame."""
    addrs = []
    ipck = l4ck = -1
    n = len(data)
    if n < 14:
        return (), ipck, l4ck
    off = 12
    etype = (data[off] << 8) | data[off + 1]
    off += 2
    while etype in (0x8100, 0x88A8) and off + 4 <= n:  # VLAN tags
        etype = (data[off + 2] << 8) | data[off + 3]
        off += 4
    if etype == 0x0800 and off + 20 <= n and data[off] >> 4 == 4:
        ihl = (data[off] & 0x0F) * 4
        proto = data[off + 9]
        frag = ((data[off + 6] & 0x1F) << 8) | data[off + 7]
        for a in (off + 12, off + 16):
            if ipaddress.IPv4Address(data[a : a + 4]) in CLIENT_V4:
                addrs.append((a, 4, bytes(data[a : a + 4])))
        if not addrs:
            return (), -1, -1
        ipck = off + 10
        l4 = off + ihl
        if frag == 0:
            if proto == 6 and l4 + 18 <= n:
                l4ck = l4 + 16
            elif proto == 17 and l4 + 8 <= n and (data[l4 + 6] or data[l4 + 7]):
                l4ck = l4 + 6
    elif etype == 0x86DD and off + 40 <= n:
        nh = data[off + 6]
        for a in (off + 8, off + 24):
            if ipaddress.IPv6Address(data[a : a + 16]) in CLIENT_V6:
                addrs.append((a, 16, bytes(data[a : a + 16])))
        if not addrs:
            return (), -1, -1
        l4 = off + 40
        if nh == 6 and l4 + 18 <= n:
            l4ck = l4 + 16
        elif nh == 17 and l4 + 8 <= n:
            l4ck = l4 + 6
        elif nh == 58 and l4 + 4 <= n:
            l4ck = l4 + 2
    return tuple(addrs), ipck, l4ck


def load_samples(sample_dir: Path, names: list[str] | None):
    paths = sorted(sample_dir.glob("*.pcap"))
    if names:
        wanted = set(names)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise SystemExit(f"make_trace: no such sample(s) in {sample_dir}: {', '.join(sorted(missing))}")
    if not paths:
        raise SystemExit(f"make_trace: no *.pcap in {sample_dir}")
    samples = []
    snaplen = 0
    for p in paths:
        linktype, snap, raw = read_pcap(p)
        if linktype != LINKTYPE_ETHERNET:
            print(f"make_trace: skipping {p.name}: linktype {linktype} is not Ethernet", file=sys.stderr)
            continue
        if not raw:
            continue
        snaplen = max(snaplen, snap)
        t0 = raw[0][0]
        pkts = []
        clients = set()
        for ts, data, orig in raw:
            addrs, ipck, l4ck = locate(data)
            clients.update(a[2] for a in addrs)
            pkts.append(Packet(ts - t0, data, orig, addrs, ipck, l4ck))
        pkts.sort(key=lambda q: q.ts_us)  # stable; a capture's own reordering is kept otherwise
        samples.append(
            {
                "name": p.stem,
                "first_ts_us": t0,
                "packets": pkts,
                "clients": sorted(clients),
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            }
        )
    return samples, snaplen or 65535


def fold(x: int) -> int:
    while x >> 16:
        x = (x & 0xFFFF) + (x >> 16)
    return x


def csum_delta(old: bytes, new: bytes) -> int:
    """One's-complement sum of ~old + new over 16-bit words (RFC 1624 eqn. 3)."""
    s = 0
    for i in range(0, len(old), 2):
        s += (~((old[i] << 8) | old[i + 1])) & 0xFFFF
        s += (new[i] << 8) | new[i + 1]
    return fold(s)


def new_client(orig: bytes, n: int) -> bytes:
    if len(orig) == 4:
        return bytes((10, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF))
    return orig[:12] + struct.pack(">I", n)


def build(
    out: Path,
    packets: int,
    seed: int = DEFAULT_SEED,
    rate: float = DEFAULT_RATE,
    sample_dir: Path = DEFAULT_SAMPLES,
    names: list[str] | None = None,
    quiet: bool = False,
) -> dict:
    t_start = time.perf_counter()
    samples, snaplen = load_samples(sample_dir, names)
    per_copy = sum(len(s["packets"]) for s in samples)
    copies = max(1, math.ceil(packets / per_copy))
    span_us = max(1, int(copies * per_copy / rate * 1e6))
    base_us = min(s["first_ts_us"] for s in samples)
    rng = random.Random(seed)
    sample_times = [[p.ts_us for p in s["packets"]] for s in samples]

    # Instances: (copy, sample). Each gets a start offset and its client addresses.
    inst_sample = []  # instance -> sample index
    inst_rewrite = []  # instance -> {orig addr: (new addr, checksum delta)}
    iters = []
    n = 0
    for c in range(copies):
        for si, s in enumerate(samples):
            start = base_us + rng.randrange(span_us)
            rw = {}
            for orig in s["clients"]:
                n += 1
                if n >= 1 << 24:
                    raise SystemExit("make_trace: too many instances for the 10.0.0.0/8 client pool")
                new = new_client(orig, n)
                rw[orig] = (new, csum_delta(orig, new))
            inst = len(inst_sample)
            inst_sample.append(si)
            inst_rewrite.append(rw)
            times = sample_times[si]  # shared by all copies of the sample: lazy per instance
            iters.append(zip(map(start.__add__, times), repeat(inst), range(len(times))))

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    rec = struct.Struct("<IIII")
    pack = rec.pack
    written = 0
    nbytes = 24
    first_ts = last_ts = None
    sample_pkts = [s["packets"] for s in samples]
    with open(tmp, "wb", buffering=1 << 20) as fh:
        fh.write(struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        chunk = []
        append = chunk.append
        for ts, inst, j in heapq.merge(*iters):
            p = sample_pkts[inst_sample[inst]][j]
            data = p.data
            if p.addrs:
                rw = inst_rewrite[inst]
                b = bytearray(data)
                delta = 0
                for off, ln, orig in p.addrs:
                    new, d = rw[orig]
                    b[off : off + ln] = new
                    delta += d
                for ck in (p.ipck, p.l4ck):
                    if ck >= 0:
                        c = ((~((b[ck] << 8) | b[ck + 1])) & 0xFFFF) + delta
                        c = (c & 0xFFFF) + (c >> 16)
                        c = (c & 0xFFFF) + (c >> 16)
                        c = (c & 0xFFFF) + (c >> 16)
                        c = ~c & 0xFFFF
                        b[ck] = c >> 8
                        b[ck + 1] = c & 0xFF
                data = bytes(b)
            append(pack(ts // 1_000_000, ts % 1_000_000, len(data), p.orig_len))
            append(data)
            written += 1
            nbytes += 16 + len(data)
            if first_ts is None:
                first_ts = ts
            last_ts = ts
            if len(chunk) >= 16384:
                fh.write(b"".join(chunk))
                chunk.clear()
        fh.write(b"".join(chunk))
    os.replace(tmp, out)
    elapsed = time.perf_counter() - t_start
    meta = {
        "trace": out.name,
        "packets": written,
        "bytes": nbytes,
        "requested_packets": packets,
        "copies": copies,
        "instances": len(inst_sample),
        "client_addresses": n,
        "seed": seed,
        "rate_pps": rate,
        "span_s": round(span_us / 1e6, 3),
        "first_ts_us": first_ts,
        "last_ts_us": last_ts,
        "snaplen": snaplen,
        "samples": [
            {"name": s["name"], "packets": len(s["packets"]), "sha256": s["sha256"]} for s in samples
        ],
        "build_seconds": round(elapsed, 2),
        "generator": "benchmarks/make_trace.py",
    }
    Path(str(out) + ".json").write_text(json.dumps(meta, indent=1) + "\n")
    if not quiet:
        print(
            f"make_trace: {out}: {written:,} packets ({nbytes / 2**20:.1f} MiB), {copies} copies x "
            f"{len(samples)} samples = {len(inst_sample):,} instances over {span_us / 1e6:.1f} s, "
            f"built in {elapsed:.1f} s ({written / elapsed:,.0f} packets/s)",
            file=sys.stderr,
        )
    return meta


# ---------------------------------------------------------------------------------------------
# --window: long transfers with many segments in flight (synthetic, no sample)

WINDOW_GAP_US = 10  # one 1448-byte segment every 10 µs: 1.16 Gbit/s
WINDOW_MSS = 1448
WINDOW_LOSS = 0.01
WINDOW_SERVER = bytes([198, 18, 2, 2])
WINDOW_SNAPLEN = 128


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _frame(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, payload_len: int,
           options: bytes = b"", window: int = 65535) -> tuple[bytes, int]:
    """Ethernet + IPv4 + TCP with correct checksums; the payload (zeros) is cut by the snaplen but
    counted in the lengths. Zeros add nothing to the TCP checksum, so it is exact."""
    thl = 20 + len(options)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, (thl // 4) << 4, flags, window, 0, 0) + options
    tot = 20 + thl + payload_len
    pseudo = src + dst + struct.pack("!BBH", 0, 6, thl + payload_len)
    tcp = tcp[:16] + struct.pack("!H", _csum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, tot, 0, 0x4000, 64, 6, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    eth = b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00"
    data = eth + ip + tcp + bytes(payload_len)
    return data[:WINDOW_SNAPLEN], len(data)


def _sack_option(blocks) -> bytes:
    if not blocks:
        return b""
    return b"\x01\x01" + bytes([5, 2 + 8 * len(blocks)]) + b"".join(
        struct.pack("!II", l & 0xFFFFFFFF, r & 0xFFFFFFFF) for l, r in blocks)


def window_connection(emit, n: int, t0: int, window: int, segments: int, rng: random.Random, loss: float) -> int:
    """One server-side capture of a bulk download with `window` segments in flight: the server
    sends a segment every WINDOW_GAP_US µs on a path whose RTT is window x that gap; a share
    `loss` of first transmissions is lost after the capture; the receiver ACKs every second
    segment in order and every segment while a hole is open, with up to 3 SACK blocks (the one
    the arrival extended first); the sender resends a lost segment an RTT and three segments
    after it left (as SACK's dupthresh would), and resends are not lost. Returns the end time."""
    client = bytes([10, (n >> 16) & 255, (n >> 8) & 255, n & 255])
    cport, sport = 20000 + n % 40000, 443
    gap, mss = WINDOW_GAP_US, WINDOW_MSS
    rtt = window * gap
    half = rtt // 2
    ciss, siss = rng.getrandbits(32), rng.getrandbits(32)
    syn_opts = struct.pack("!BBH", 2, 4, mss) + b"\x01\x03\x03\x09" + b"\x01\x01\x04\x02"  # MSS, NOP+wscale 9 (33 MB), NOP NOP SACK-ok
    t = t0
    emit(t, *_frame(client, WINDOW_SERVER, cport, sport, ciss, 0, 0x02, 0, syn_opts))
    emit(t + 5, *_frame(WINDOW_SERVER, client, sport, cport, siss, ciss + 1, 0x12, 0, syn_opts))
    t += 5 + rtt
    emit(t, *_frame(client, WINDOW_SERVER, cport, sport, ciss + 1, siss + 1, 0x10, 0))
    emit(t + 1, *_frame(client, WINDOW_SERVER, cport, sport, ciss + 1, siss + 1, 0x18, 100))
    cseq = ciss + 101
    t += 2
    acks = collections.deque()  # (capture time, frame, orig_len), in time order
    retx = collections.deque()  # (due time, segment index)
    lost = set()
    # Receiver: next expected segment index and the received ranges above it [l, r) (indexes).
    rcv_nxt, ranges, pending = 0, [], 0
    sent = k = 0
    base = siss + 1

    def ack_frame(at, blocks):
        opt = _sack_option([(base + l * mss, base + r * mss) for l, r in blocks])
        acks.append((at,) + _frame(client, WINDOW_SERVER, cport, sport, cseq, base + rcv_nxt * mss, 0x10, 0, opt, 65535))

    while True:
        now = t + k * gap
        while acks and acks[0][0] <= now:
            emit(*acks.popleft())
        if retx and retx[0][0] <= now:
            i, resent = retx.popleft()[1], True
        elif sent < segments:
            i, resent = sent, False
            sent += 1
        elif acks or retx:
            k += 1
            continue
        else:
            break
        emit(now, *_frame(WINDOW_SERVER, client, sport, cport, base + i * mss, cseq, 0x10, mss))
        k += 1
        if not resent and rng.random() < loss:
            retx.append((now + rtt + 3 * gap, i))
            continue
        # The receiver gets segment i at now + rtt/2; its ACK reaches the capture at now + rtt.
        at = now + rtt
        if i == rcv_nxt:
            rcv_nxt += 1
            if ranges and ranges[0][0] == rcv_nxt:
                rcv_nxt = ranges.pop(0)[1]
            if ranges or resent:
                ack_frame(at, ranges[-3:][::-1])
                pending = 0
            else:
                pending += 1
                if pending == 2:
                    ack_frame(at, [])
                    pending = 0
            continue
        j = bisect.bisect_left(ranges, [i + 1])
        if j and ranges[j - 1][1] == i:
            ranges[j - 1][1] = i + 1
            j -= 1
        elif j < len(ranges) and ranges[j][0] == i + 1:
            ranges[j][0] = i
        else:
            ranges.insert(j, [i, i + 1])
        if j + 1 < len(ranges) and ranges[j][1] == ranges[j + 1][0]:
            ranges[j][1] = ranges.pop(j + 1)[1]
        first = ranges[j]
        others = [r for r in ranges[-3:][::-1] if r is not first][:2]
        ack_frame(at, [first] + others)
    end = base + segments * mss
    now = t + k * gap
    emit(now, *_frame(WINDOW_SERVER, client, sport, cport, end, cseq, 0x11, 0))
    emit(now + rtt, *_frame(client, WINDOW_SERVER, cport, sport, cseq, end + 1, 0x11, 0))
    emit(now + rtt + 5, *_frame(WINDOW_SERVER, client, sport, cport, end + 1, cseq + 1, 0x10, 0))
    return now + rtt + 5


def build_window(out: Path, packets: int, windows: list[int], seed: int = DEFAULT_SEED, loss: float = WINDOW_LOSS,
                 quiet: bool = False) -> dict:
    """A trace of back-to-back long transfers (`window_connection`), cycling through `windows`
    (segments in flight); each lasts 50 windows (at least 500 segments)."""
    t_start = time.perf_counter()
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    pack = struct.Struct("<IIII").pack
    stats = {"packets": 0, "bytes": 24}
    t0 = 1_700_000_000 * 1_000_000
    with open(tmp, "wb", buffering=1 << 20) as fh:
        fh.write(struct.pack("<IHHiIII", PCAP_MAGIC_US, 2, 4, 0, 0, WINDOW_SNAPLEN, LINKTYPE_ETHERNET))

        def emit(ts, data, orig_len):
            fh.write(pack(ts // 1_000_000, ts % 1_000_000, len(data), orig_len))
            fh.write(data)
            stats["packets"] += 1
            stats["bytes"] += 16 + len(data)

        n = t = 0
        while stats["packets"] < packets:
            w = windows[n % len(windows)]
            n += 1
            # About 1.55 packets per segment (data, ACKs, resends).
            segs = max(500, min(50 * w, int((packets - stats["packets"]) / 1.55) + 1))
            t = window_connection(emit, n, t0 + t, w, segs, rng, loss) - t0 + 1000
    os.replace(tmp, out)
    elapsed = time.perf_counter() - t_start
    meta = {
        "trace": out.name,
        "packets": stats["packets"],
        "bytes": stats["bytes"],
        "requested_packets": packets,
        "windows": windows,
        "connections": n,
        "loss": loss,
        "seed": seed,
        "rate_pps": None,
        "span_s": round(t / 1e6, 3),
        "samples": [],
        "build_seconds": round(elapsed, 2),
        "generator": "benchmarks/make_trace.py --window",
    }
    Path(str(out) + ".json").write_text(json.dumps(meta, indent=1) + "\n")
    if not quiet:
        print(f"make_trace: {out}: {stats['packets']:,} packets, {n} transfers with {windows} segments in flight, "
              f"built in {elapsed:.1f} s", file=sys.stderr)
    return meta


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000, help="at least this many packets (whole copies; default 1000000)")
    ap.add_argument("--out", type=Path, default=None, help="output pcap (default benchmarks/out/trace-<packets>.pcap)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    ap.add_argument("--rate", type=float, default=DEFAULT_RATE, help=f"average packets per second of trace time: sets the span and so how many connections overlap (default {DEFAULT_RATE})")
    ap.add_argument("--samples", type=Path, default=DEFAULT_SAMPLES, help="directory of sample captures (default samples/)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="use only these samples (file stems)")
    ap.add_argument("--window", type=int, nargs="+", metavar="SEGMENTS",
                    help="instead of the samples: back-to-back long transfers with this many segments in flight "
                         "(1%% loss, SACK; cycling through the values given)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.packets <= 0 or args.rate <= 0:
        ap.error("--packets and --rate must be positive")
    if args.window:
        out = args.out or HERE / "out" / f"trace-window-{'-'.join(map(str, args.window))}-{args.packets}.pcap"
        build_window(out, args.packets, args.window, seed=args.seed, quiet=args.quiet)
        return 0
    out = args.out or HERE / "out" / f"trace-{args.packets}.pcap"
    build(out, args.packets, seed=args.seed, rate=args.rate, sample_dir=args.samples, names=args.only, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())

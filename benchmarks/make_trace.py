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

A JSON sidecar ``<out>.json`` records the parameters and counts; benchmarks/run.py uses it to
decide whether a trace can be reused.

    python benchmarks/make_trace.py --packets 1000000 --out benchmarks/out/trace-1000000.pcap
"""
from __future__ import annotations

import argparse
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packets", type=int, default=1_000_000, help="at least this many packets (whole copies; default 1000000)")
    ap.add_argument("--out", type=Path, default=None, help="output pcap (default benchmarks/out/trace-<packets>.pcap)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help=f"random seed (default {DEFAULT_SEED})")
    ap.add_argument("--rate", type=float, default=DEFAULT_RATE, help=f"average packets per second of trace time: sets the span and so how many connections overlap (default {DEFAULT_RATE})")
    ap.add_argument("--samples", type=Path, default=DEFAULT_SAMPLES, help="directory of sample captures (default samples/)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="use only these samples (file stems)")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.packets <= 0 or args.rate <= 0:
        ap.error("--packets and --rate must be positive")
    out = args.out or HERE / "out" / f"trace-{args.packets}.pcap"
    build(out, args.packets, seed=args.seed, rate=args.rate, sample_dir=args.samples, names=args.only, quiet=args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())

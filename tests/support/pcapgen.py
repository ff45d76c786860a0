"""Write small synthetic captures (timestamps are integer nanoseconds) for format and link-layer tests (pure stdlib).

Frames are built from plain bytes so each test states exactly what is on the wire.
"""
from __future__ import annotations

import ipaddress
import struct
from pathlib import Path


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def tcp(sport: int, dport: int, seq: int, ack: int = 0, flags: int = 0x02, window: int = 65535,
        options: bytes = b"", payload: bytes = b"") -> bytes:
    options += b"\x01" * (-len(options) % 4)
    off = (20 + len(options)) // 4
    hdr = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, window, 0, 0)
    return hdr + options + payload


def udp(sport: int, dport: int, payload: bytes = b"") -> bytes:
    return struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload


def ipv4(src: str, dst: str, proto: int, l4: bytes, ident: int = 1, ttl: int = 64) -> bytes:
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident, 0x4000, ttl, proto, 0,
                      ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return hdr + l4


def ipv6(src: str, dst: str, next_header: int, l4: bytes, hop_limit: int = 64) -> bytes:
    return struct.pack("!IHBB16s16s", 6 << 28, len(l4), next_header, hop_limit,
                       ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed) + l4


def ethernet(payload: bytes, ethertype: int = 0x0800, tags: tuple[tuple[int, int], ...] = ()) -> bytes:
    """tags: (tpid, vid) pairs outermost first, e.g. ((0x88a8, 10), (0x8100, 20)) for QinQ."""
    out = b"\x02\0\0\0\0\x01" + b"\x02\0\0\0\0\x02"
    for tpid, vid in tags:
        out += struct.pack("!HH", tpid, vid)
    return out + struct.pack("!H", ethertype) + payload


def write_pcap(path: Path, frames: list[tuple[int, bytes]], linktype: int = 1, nanosecond: bool = False,
               big_endian: bool = False, snaplen: int = 262144, orig_lens: list[int] | None = None) -> Path:
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = bytearray(struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
    div = 1 if nanosecond else 1000
    for i, (ts_ns, data) in enumerate(frames):
        sec, frac = divmod(ts_ns, 10**9)
        frac //= div
        orig = orig_lens[i] if orig_lens else len(data)
        out += struct.pack(e + "IIII", sec, frac, len(data), orig) + data
    path.write_bytes(bytes(out))
    return path


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def pcapng_section() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def pcapng_idb(linktype: int, tsresol: int | None = None, snaplen: int = 0) -> bytes:
    opts = b""
    if tsresol is not None:
        opts = struct.pack("<HH", 9, 1) + bytes([tsresol]) + b"\0\0\0" + struct.pack("<HH", 0, 0)
    return _block(1, struct.pack("<HHI", linktype, 0, snaplen) + opts)


def pcapng_epb(if_id: int, ticks: int, data: bytes, orig_len: int | None = None) -> bytes:
    return _block(6, struct.pack("<IIIII", if_id, ticks >> 32, ticks & 0xFFFFFFFF, len(data),
                                 orig_len if orig_len is not None else len(data)) + data)


def pcapng_spb(data: bytes) -> bytes:
    return _block(3, struct.pack("<I", len(data)) + data)

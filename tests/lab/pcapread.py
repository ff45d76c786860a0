"""A minimal pcap reader for the lab's own checks (classic pcap, micro or
nano timestamps, Ethernet). Independent of tailscope's parsers on purpose:
the lab must not validate itself with the code it is meant to measure."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from .packet import Packet, parse_ethernet

_MAGIC = {0xA1B2C3D4: ("<", 1000), 0xD4C3B2A1: (">", 1000),      # microseconds
          0xA1B23C4D: ("<", 1), 0x4D3CB2A1: (">", 1)}            # nanoseconds
LINKTYPE_ETHERNET = 1


@dataclass
class Frame:
    ts_ns: int
    orig_len: int
    pkt: Packet | None


def read_pcap(path: str | Path) -> list[Frame]:
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap (too short)")
    magic = struct.unpack("<I", data[:4])[0]
    if magic not in _MAGIC:
        raise ValueError(f"{path}: unsupported pcap magic {magic:#x}")
    endian, ns_per_unit = _MAGIC[magic]
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: link type {linktype}, lab captures are Ethernet")
    out, off = [], 24
    rec = struct.Struct(endian + "IIII")
    while off + 16 <= len(data):
        sec, frac, incl, orig = rec.unpack_from(data, off)
        off += 16
        frame = data[off:off + incl]
        off += incl
        out.append(Frame(sec * 1_000_000_000 + frac * ns_per_unit, orig, parse_ethernet(frame)))
    return out


def tcp_connections(frames: list[Frame]) -> dict[tuple, list[Frame]]:
    """Group TCP frames by connection: key = (client ip, client port, server ip,
    server port), where the client is whoever sent the first SYN."""
    conns: dict[tuple, list[Frame]] = {}
    for f in frames:
        p = f.pkt
        if p is None or not p.is_tcp:
            continue
        fwd, rev = (p.src, p.sport, p.dst, p.dport), (p.dst, p.dport, p.src, p.sport)
        if fwd in conns:
            conns[fwd].append(f)
        elif rev in conns:
            conns[rev].append(f)
        elif p.syn and not p.ackf:
            conns[fwd] = [f]
    return conns

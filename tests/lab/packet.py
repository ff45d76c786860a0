"""Decode the IP/TCP/UDP headers the lab cares about.

Shared by the relay (which sees raw IP packets from a TUN device) and by
pcapread (which sees Ethernet frames from tcpdump). Deliberately independent
of tailscope's own parsers: the lab is the yardstick, so it must not reuse the
code it is measuring.
"""
from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

PROTO_TCP = 6
PROTO_UDP = 17

# TCP flag bits, in the order tcpdump/Wireshark spell them.
_FLAG_BITS = [(0x02, "S"), (0x01, "F"), (0x04, "R"), (0x08, "P"), (0x10, "A"),
              (0x20, "U"), (0x40, "E"), (0x80, "C")]


@dataclass
class Packet:
    """One decoded IP packet. `payload_len` is the transport payload length
    computed from the IP header, so it is right even for truncated captures."""
    family: int            # 4 or 6
    src: str
    dst: str
    proto: int             # IP protocol number (after IPv6 extension headers)
    ip_len: int            # whole IP packet length per the header
    ip_id: int | None      # IPv4 identification; None for IPv6
    ttl: int
    sport: int | None = None
    dport: int | None = None
    seq: int | None = None
    ack: int | None = None
    flags: int = 0
    window: int | None = None
    payload_len: int = 0
    payload_off: int = 0   # offset of the transport payload inside the IP packet
    tsval: int | None = None
    tsecr: int | None = None
    mss: int | None = None
    sack: list | None = None

    @property
    def flag_str(self) -> str:
        return "".join(ch for bit, ch in _FLAG_BITS if self.flags & bit)

    @property
    def is_tcp(self) -> bool:
        return self.proto == PROTO_TCP

    @property
    def syn(self) -> bool:
        return bool(self.flags & 0x02)

    @property
    def ackf(self) -> bool:
        return bool(self.flags & 0x10)

    @property
    def fin(self) -> bool:
        return bool(self.flags & 0x01)

    @property
    def rst(self) -> bool:
        return bool(self.flags & 0x04)

    @property
    def proto_name(self) -> str:
        return {PROTO_TCP: "tcp", PROTO_UDP: "udp", 1: "icmp", 58: "icmp6"}.get(self.proto, str(self.proto))


def _tcp_options(buf: bytes, pkt: Packet) -> None:
    i = 0
    n = len(buf)
    while i < n:
        kind = buf[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= n:
            break
        ln = buf[i + 1]
        if ln < 2 or i + ln > n:
            break
        body = buf[i + 2:i + ln]
        if kind == 2 and ln == 4:
            pkt.mss = struct.unpack("!H", body)[0]
        elif kind == 8 and ln == 10:
            pkt.tsval, pkt.tsecr = struct.unpack("!II", body)
        elif kind == 5 and (ln - 2) % 8 == 0:
            pkt.sack = [list(struct.unpack("!II", body[j:j + 8])) for j in range(0, ln - 2, 8)]
        i += ln


def parse_ip(buf: bytes) -> Packet | None:
    """Decode an IP packet (as read from a TUN device with IFF_NO_PI).
    Returns None for anything that is not IPv4/IPv6 or is too short."""
    if len(buf) < 1:
        return None
    ver = buf[0] >> 4
    if ver == 4:
        if len(buf) < 20:
            return None
        ihl = (buf[0] & 0x0F) * 4
        total, ip_id = struct.unpack("!HH", buf[2:6])
        ttl, proto = buf[8], buf[9]
        pkt = Packet(4, str(ipaddress.IPv4Address(buf[12:16])), str(ipaddress.IPv4Address(buf[16:20])),
                     proto, total, ip_id, ttl)
        off = ihl
        end = total
    elif ver == 6:
        if len(buf) < 40:
            return None
        plen = struct.unpack("!H", buf[4:6])[0]
        nxt, hop = buf[6], buf[7]
        pkt = Packet(6, str(ipaddress.IPv6Address(buf[8:24])), str(ipaddress.IPv6Address(buf[24:40])),
                     nxt, 40 + plen, None, hop)
        off = 40
        end = 40 + plen
        # Walk the common extension headers (hop-by-hop, routing, dest opts);
        # the lab never sends them, but be correct if the kernel adds one.
        while nxt in (0, 43, 60) and off + 2 <= len(buf):
            nxt = buf[off]
            off += (buf[off + 1] + 1) * 8
        pkt.proto = nxt
    else:
        return None
    if pkt.proto == PROTO_TCP and off + 20 <= len(buf):
        sport, dport, seq, ack, offflags, win = struct.unpack("!HHIIHH", buf[off:off + 16])
        doff = (offflags >> 12) * 4
        pkt.sport, pkt.dport, pkt.seq, pkt.ack = sport, dport, seq, ack
        pkt.flags = offflags & 0x1FF
        pkt.window = win
        _tcp_options(buf[off + 20:min(off + doff, len(buf))], pkt)
        pkt.payload_off = off + doff
        pkt.payload_len = max(0, end - off - doff)
    elif pkt.proto == PROTO_UDP and off + 8 <= len(buf):
        sport, dport, ulen = struct.unpack("!HHH", buf[off:off + 6])
        pkt.sport, pkt.dport = sport, dport
        pkt.payload_off = off + 8
        pkt.payload_len = max(0, ulen - 8)
    return pkt


def parse_ethernet(frame: bytes) -> Packet | None:
    """Decode an Ethernet II frame (optionally one 802.1Q tag) down to IP."""
    if len(frame) < 14:
        return None
    etype = struct.unpack("!H", frame[12:14])[0]
    off = 14
    if etype == 0x8100 and len(frame) >= 18:
        etype = struct.unpack("!H", frame[16:18])[0]
        off = 18
    if etype not in (0x0800, 0x86DD):
        return None
    return parse_ip(frame[off:])

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


def pcap_header(linktype: int = 1, nanosecond: bool = False, big_endian: bool = False, snaplen: int = 262144) -> bytes:
    """The 24-byte file header of a legacy pcap."""
    e = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    return struct.pack(e + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(ts_ns: int, data: bytes, orig_len: int | None = None, caplen: int | None = None,
                nanosecond: bool = False, big_endian: bool = False) -> bytes:
    """One record; ``caplen`` may lie about ``len(data)`` (hostile files)."""
    e = ">" if big_endian else "<"
    sec, frac = divmod(ts_ns, 10**9)
    frac //= 1 if nanosecond else 1000
    return struct.pack(e + "IIII", sec, frac, len(data) if caplen is None else caplen,
                       len(data) if orig_len is None else orig_len) + data


def pcap_bytes(frames: list[tuple[int, bytes]], linktype: int = 1, nanosecond: bool = False,
               big_endian: bool = False, snaplen: int = 262144, orig_lens: list[int] | None = None) -> bytes:
    out = bytearray(pcap_header(linktype, nanosecond, big_endian, snaplen))
    for i, (ts_ns, data) in enumerate(frames):
        out += pcap_record(ts_ns, data, orig_lens[i] if orig_lens else None, None, nanosecond, big_endian)
    return bytes(out)


def write_pcap(path: Path, frames: list[tuple[int, bytes]], linktype: int = 1, nanosecond: bool = False,
               big_endian: bool = False, snaplen: int = 262144, orig_lens: list[int] | None = None) -> Path:
    path.write_bytes(pcap_bytes(frames, linktype, nanosecond, big_endian, snaplen, orig_lens))
    return path


def _block(btype: int, body: bytes, big_endian: bool = False, total_len: int | None = None) -> bytes:
    """A pcapng block; ``total_len`` may lie about its length (hostile files)."""
    e = ">" if big_endian else "<"
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body)
    claimed = n if total_len is None else total_len
    return struct.pack(e + "II", btype, claimed) + body + struct.pack(e + "I", claimed)


pcapng_block = _block


def pcapng_section(big_endian: bool = False) -> bytes:
    e = ">" if big_endian else "<"
    return _block(0x0A0D0D0A, struct.pack(e + "IHHq", 0x1A2B3C4D, 1, 0, -1), big_endian)


def pcapng_idb(linktype: int, tsresol: int | None = None, snaplen: int = 0, big_endian: bool = False) -> bytes:
    e = ">" if big_endian else "<"
    opts = b""
    if tsresol is not None:
        opts = struct.pack(e + "HH", 9, 1) + bytes([tsresol]) + b"\0\0\0" + struct.pack(e + "HH", 0, 0)
    return _block(1, struct.pack(e + "HHI", linktype, 0, snaplen) + opts, big_endian)


def pcapng_epb(if_id: int, ticks: int, data: bytes, orig_len: int | None = None, big_endian: bool = False,
               caplen: int | None = None) -> bytes:
    """Enhanced Packet Block; ``caplen`` may lie about ``len(data)``."""
    e = ">" if big_endian else "<"
    return _block(6, struct.pack(e + "IIIII", if_id, ticks >> 32, ticks & 0xFFFFFFFF,
                                 len(data) if caplen is None else caplen,
                                 orig_len if orig_len is not None else len(data)) + data, big_endian)


def pcapng_spb(data: bytes, big_endian: bool = False) -> bytes:
    e = ">" if big_endian else "<"
    return _block(3, struct.pack(e + "I", len(data)) + data, big_endian)


def pcapng_isb(if_id: int = 0, big_endian: bool = False) -> bytes:
    """Interface Statistics Block with no options."""
    e = ">" if big_endian else "<"
    return _block(5, struct.pack(e + "III", if_id, 0, 0), big_endian)


def pcapng_nrb(big_endian: bool = False) -> bytes:
    """Name Resolution Block: one IPv4 record, then the end-of-records record."""
    e = ">" if big_endian else "<"
    rec = bytes([198, 18, 0, 1]) + b"host.example\0"
    rec += b"\0" * (-len(rec) % 4)
    return _block(4, struct.pack(e + "HH", 1, len(bytes([198, 18, 0, 1]) + b"host.example\0")) + rec
                  + struct.pack(e + "HH", 0, 0), big_endian)


# --- large generated traces (streamed to disk; stdlib only) ---------------------------------

def _ip_tcp_template(proto_len: int = 40) -> bytearray:
    """A 20-byte IPv4 + 20-byte TCP header; fields are patched per packet."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, proto_len, 0, 0x4000, 64, 6, 0, b"\0" * 4, b"\0" * 4)
    return bytearray(ip + b"\0" * 20)


def write_syn_flood(path: Path, flows: int, start_ns: int = 1_700_000_000 * 10**9, pps: int = 100_000,
                    server: str = "198.18.0.2", port: int = 443) -> Path:
    """One SYN from each of ``flows`` distinct clients (10.x.y.z, port 1024-65535) to one server:
    ``flows`` concurrent half-open TCP flows. Raw IPv4 link type, 56 bytes per packet,
    ``pps`` packets per second. About 1 s per million packets."""
    dst = ipaddress.IPv4Address(server).packed
    hdr = _ip_tcp_template()
    hdr[16:20] = dst
    struct.pack_into("!HIIBBH", hdr, 22, port, 0, 0, 5 << 4, 0x02, 65535)
    rec = struct.Struct("<IIII")
    step_ns = 10**9 // pps
    with open(path, "wb", buffering=1 << 20) as fh:
        fh.write(pcap_header(linktype=101, snaplen=96))
        chunk = []
        for i in range(flows):
            ts = start_ns + i * step_ns
            n = i + 1
            # client address 10.<n bits 23..16>.<15..8>.<7..0> plus a port from the top bits
            hdr[12:16] = bytes((10, (n >> 16) & 0xFF, (n >> 8) & 0xFF, n & 0xFF))
            struct.pack_into("!HI", hdr, 20, 1024 + (n >> 24) * 7919 % 64000, n)  # sport, seq
            chunk.append(rec.pack(ts // 10**9, (ts % 10**9) // 1000, 40, 40) + bytes(hdr))
            if len(chunk) >= 65536:
                fh.write(b"".join(chunk))
                chunk.clear()
        fh.write(b"".join(chunk))
    return path


def write_bulk_flow(path: Path, payload_bytes: int, mss: int = 1460, start_ns: int = 1_700_000_000 * 10**9,
                    gbps: float = 1.0, ack_every: int = 2) -> Path:
    """One TCP connection carrying ``payload_bytes`` from server to client: handshake, full-size
    segments (only their 40 header bytes captured: IP total length says 40 + mss), a client ACK
    every ``ack_every`` segments, FIN both ways. Raw IPv4, 56 bytes per packet on disk."""
    c, s = ipaddress.IPv4Address("198.18.0.1").packed, ipaddress.IPv4Address("198.18.0.2").packed
    rec = struct.Struct("<IIII")
    seg_ns = int(mss * 8 / gbps)  # serialisation time of one segment
    isn_c, isn_s = 1000, 5_000_000

    def pkt(ts: int, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int,
            plen: int = 0, ipid: int = 0) -> bytes:
        h = struct.pack("!BBHHHBBH4s4sHHIIBBHHH", 0x45, 0, 40 + plen, ipid & 0xFFFF, 0x4000, 64, 6, 0, src, dst,
                        sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, 65535, 0, 0)
        return rec.pack(ts // 10**9, (ts % 10**9) // 1000, 40, 40 + plen) + h

    with open(path, "wb", buffering=1 << 20) as fh:
        fh.write(pcap_header(linktype=101, snaplen=96))
        t = start_ns
        fh.write(pkt(t, c, s, 40000, 443, isn_c, 0, 0x02))
        fh.write(pkt(t + 1_000_000, s, c, 443, 40000, isn_s, isn_c + 1, 0x12))
        fh.write(pkt(t + 2_000_000, c, s, 40000, 443, isn_c + 1, isn_s + 1, 0x10))
        t += 3_000_000
        seq = isn_s + 1
        segments = (payload_bytes + mss - 1) // mss
        chunk = []
        for i in range(segments):
            plen = min(mss, payload_bytes - i * mss)
            chunk.append(pkt(t, s, c, 443, 40000, seq, isn_c + 1, 0x10, plen, ipid=i))
            seq += plen
            t += seg_ns
            if (i + 1) % ack_every == 0 or i == segments - 1:
                # the client's ACK arrives one RTT-ish (0.5 ms) after the segment it acknowledges
                chunk.append(pkt(t + 500_000, c, s, 40000, 443, isn_c + 1, seq, 0x10))
            if len(chunk) >= 65536:
                fh.write(b"".join(chunk))
                chunk.clear()
        fh.write(b"".join(chunk))
        t += 1_000_000
        fh.write(pkt(t, s, c, 443, 40000, seq, isn_c + 1, 0x11))
        fh.write(pkt(t + 500_000, c, s, 40000, 443, isn_c + 1, seq + 1, 0x11))
        fh.write(pkt(t + 1_000_000, s, c, 443, 40000, seq + 1, isn_c + 2, 0x10))
    return path


def write_chatty_flow(path: Path, exchanges: int, start_ns: int = 1_700_000_000 * 10**9, request: int = 200,
                      response: int = 1200, ack_delay_ns: int = 1_000_000) -> Path:
    """One long-lived TCP connection carrying ``exchanges`` request/response pairs (a keep-alive
    HTTP/1.1 or RPC connection): client request, server response 1 ms later, the client's ACK
    ``ack_delay_ns`` after that (the RTT a server-side capture measures), the next request 1 ms
    after the ACK."""
    c, s = ipaddress.IPv4Address("198.18.0.1").packed, ipaddress.IPv4Address("198.18.0.2").packed
    rec = struct.Struct("<IIII")
    hdr = struct.Struct("!BBHHHBBH4s4sHHIIBBHHH")

    def pkt(ts: int, src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, plen: int = 0) -> bytes:
        return rec.pack(ts // 10**9, (ts % 10**9) // 1000, 40, 40 + plen) + hdr.pack(
            0x45, 0, 40 + plen, 0, 0x4000, 64, 6, 0, src, dst, sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
            5 << 4, flags, 65535, 0, 0)

    with open(path, "wb", buffering=1 << 20) as fh:
        fh.write(pcap_header(linktype=101, snaplen=96))
        t, cs, ss = start_ns, 1000, 5_000_000
        fh.write(pkt(t, c, s, 40000, 80, cs, 0, 0x02))
        fh.write(pkt(t + 1_000_000, s, c, 80, 40000, ss, cs + 1, 0x12))
        cs, ss = cs + 1, ss + 1
        fh.write(pkt(t + 2_000_000, c, s, 40000, 80, cs, ss, 0x10))
        t += 3_000_000
        chunk = []
        for _ in range(exchanges):
            chunk.append(pkt(t, c, s, 40000, 80, cs, ss, 0x18, request))
            cs += request
            chunk.append(pkt(t + 1_000_000, s, c, 80, 40000, ss, cs, 0x18, response))
            ss += response
            chunk.append(pkt(t + 1_000_000 + ack_delay_ns, c, s, 40000, 80, cs, ss, 0x10))
            t += 2_000_000 + ack_delay_ns
            if len(chunk) >= 65536:
                fh.write(b"".join(chunk))
                chunk.clear()
        fh.write(b"".join(chunk))
        fh.write(pkt(t, c, s, 40000, 80, cs, ss, 0x11))
        fh.write(pkt(t + 1_000_000, s, c, 80, 40000, ss, cs + 1, 0x11))
        fh.write(pkt(t + 2_000_000, c, s, 40000, 80, cs + 1, ss + 1, 0x10))
    return path

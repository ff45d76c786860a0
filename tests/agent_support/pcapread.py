"""Minimal streaming reader for classic libpcap files (what tcpdump -w writes), for the tests.

The agent's own copy of each file is native (parsers/src/finish.rs); the tests read what it wrote
back with this second, independent reader (records, torn tail) so that a bug shared by the writer
and the checker cannot hide. Only the 16-byte record headers are decoded.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator

MAGIC_US = 0xA1B2C3D4
MAGIC_NS = 0xA1B23C4D
GLOBAL_HEADER_LEN = 24
RECORD_HEADER_LEN = 16


class PcapError(ValueError):
    pass


@dataclass
class PcapHeader:
    raw: bytes
    endian: str  # "<" or ">"
    nanos: bool
    snaplen: int
    linktype: int


@dataclass
class Record:
    ts_ns: int
    caplen: int
    wirelen: int
    header: bytes
    data: bytes

    def key(self) -> tuple[int, int, int, str]:
        """Identity of a captured packet: two captures of the same frame share timestamp and bytes."""
        return (self.ts_ns, self.caplen, self.wirelen, hashlib.blake2b(self.data, digest_size=8).hexdigest())


def parse_global_header(raw: bytes) -> PcapHeader:
    if len(raw) < GLOBAL_HEADER_LEN:
        raise PcapError("file shorter than a pcap header")
    for endian in ("<", ">"):
        (magic,) = struct.unpack(endian + "I", raw[:4])
        if magic in (MAGIC_US, MAGIC_NS):
            _vmaj, _vmin, _tz, _sig, snaplen, linktype = struct.unpack(endian + "HHiIII", raw[4:24])
            return PcapHeader(raw[:GLOBAL_HEADER_LEN], endian, magic == MAGIC_NS, snaplen, linktype & 0x0FFFFFFF)
    raise PcapError("not a classic pcap file (bad magic)")


class PcapReader:
    """Iterate records; ``truncated_tail`` is set if the file ends inside a record."""

    CHUNK = 1 << 20

    def __init__(self, f: BinaryIO):
        self.f = f
        self.header = parse_global_header(f.read(GLOBAL_HEADER_LEN))
        self.truncated_tail = 0
        self._rec = struct.Struct(self.header.endian + "IIII")

    def __iter__(self) -> Iterator[Record]:
        buf = b""
        pos = 0
        unpack = self._rec.unpack_from
        mult = 1 if self.header.nanos else 1000
        while True:
            if len(buf) - pos < RECORD_HEADER_LEN:
                more = self.f.read(self.CHUNK)
                buf = buf[pos:] + more
                pos = 0
                if len(buf) < RECORD_HEADER_LEN:
                    self.truncated_tail = len(buf)
                    return
            sec, frac, caplen, wirelen = unpack(buf, pos)
            end = pos + RECORD_HEADER_LEN + caplen
            if caplen > 0x4000000:  # 64 MiB: garbage, not a record (libpcap's own sanity bound)
                raise PcapError(f"implausible record length {caplen}")
            while end > len(buf):
                more = self.f.read(max(self.CHUNK, end - len(buf)))
                if not more:
                    self.truncated_tail = len(buf) - pos
                    return
                buf = buf[pos:] + more
                end -= pos
                pos = 0
            yield Record(sec * 1_000_000_000 + frac * mult, caplen, wirelen,
                         buf[pos:pos + RECORD_HEADER_LEN], buf[pos + RECORD_HEADER_LEN:end])
            pos = end


def count_packets(path: str) -> int:
    """Packets in a pcap file, plain or compressed (.gz/.zst) -- used by status tools and tests."""
    with open_maybe_compressed(path) as f:
        return sum(1 for _ in PcapReader(f))


def open_maybe_compressed(path: str) -> BinaryIO:
    if path.endswith(".gz"):
        import gzip

        return gzip.open(path, "rb")  # type: ignore[return-value]
    if path.endswith(".zst"):
        import zstandard

        return zstandard.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")

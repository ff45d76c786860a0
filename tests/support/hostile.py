"""Hostile capture files, generated, each with what tailscope must make of it.

Every file is either read completely (its odd parts counted as skips) or ends in a clear per-file
error naming the byte offset; none may crash, hang or allocate without bound. Used by
test_hostile_files.py (one `tailscope analyze` run over all of them) and test_accounting.py.
"""
from __future__ import annotations

import gzip
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path

from support import pcapgen

T0 = 1_700_000_000 * 10**9  # 2023-11-14, in ns
MS = 10**6


@dataclass
class Expect:
    """What the run manifest must say about one file."""

    status: str  # ok | partial | failed
    frames: int
    decoded: int
    skipped: dict[str, int] = field(default_factory=dict)
    error_kind: str | None = None
    # The error message must contain this (offsets are checked through it).
    error_has: str | None = None
    ts_backwards: int = 0


def frames(n: int = 4, start: int = 0) -> list[bytes]:
    """A TCP handshake and data, client 198.18.0.1:40000 → server 198.18.0.2:443."""
    c, s = "198.18.0.1", "198.18.0.2"
    segs = [
        pcapgen.ipv4(c, s, 6, pcapgen.tcp(40000 + start, 443, 1000, 0, flags=0x02)),
        pcapgen.ipv4(s, c, 6, pcapgen.tcp(443, 40000 + start, 5000, 1001, flags=0x12)),
        pcapgen.ipv4(c, s, 6, pcapgen.tcp(40000 + start, 443, 1001, 5001, flags=0x10)),
        pcapgen.ipv4(c, s, 6, pcapgen.tcp(40000 + start, 443, 1001, 5001, flags=0x18, payload=b"GET / HTTP/1.1\r\n\r\n")),
    ]
    out = [pcapgen.ethernet(p) for p in segs]
    while len(out) < n:
        out.append(out[-1])
    return out[:n]


def _pcap(fr: list[bytes], **kw) -> bytes:
    return pcapgen.pcap_bytes([(T0 + i * MS, f) for i, f in enumerate(fr)], **kw)


def _ng(blocks: list[bytes], big_endian: bool = False) -> bytes:
    return pcapgen.pcapng_section(big_endian) + b"".join(blocks)


def _epbs(fr: list[bytes], big_endian: bool = False, first: int = 0) -> list[bytes]:
    # Default resolution: microseconds.
    return [pcapgen.pcapng_epb(0, T0 // 1000 + (first + i) * 1000, f, big_endian=big_endian) for i, f in enumerate(fr)]


def _zstd(data: bytes) -> bytes:
    """A standard zstd frame (pyarrow's codec is libzstd's ZSTD_compress)."""
    import pyarrow as pa

    return pa.compress(data, codec="zstd", asbytes=True)


def build(directory: Path) -> dict[str, Expect]:
    """Write every hostile file into ``directory``; returns {file name: expectation}.
    File names carry no digits, so no two are taken for one rotation set."""
    directory.mkdir(parents=True, exist_ok=True)
    f4 = frames(4)
    out: dict[str, tuple[bytes, Expect]] = {}

    # --- a record or block claims more bytes than the file holds ----------------------------
    pcap = _pcap(f4[:3])
    at = len(pcap)
    pcap += pcapgen.pcap_record(T0 + 3 * MS, f4[3], caplen=1000)  # 1000 claimed, ~70 present
    out["claims-past-end.pcap"] = (pcap, Expect("partial", 3, 3, error_kind="truncated", error_has=f"byte {at}"))
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:3]))
    at = len(ng)
    ng += pcapgen.pcapng_block(6, struct.pack("<IIIII", 0, 0, 0, len(f4[3]), len(f4[3])) + f4[3], total_len=4096)
    out["claims-past-end.pcapng"] = (ng, Expect("partial", 3, 3, error_kind="truncated", error_has=f"byte {at}"))
    # ... an EPB whose captured length exceeds its own block: pcap-parser refuses the block.
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:2]))
    at = len(ng)
    ng += pcapgen.pcapng_epb(0, T0 // 1000, f4[2], caplen=4000) + b"".join(_epbs(f4[3:]))
    out["caplen-past-block.pcapng"] = (ng, Expect("partial", 2, 2, error_kind="corrupt", error_has=f"byte {at}: the block's contents run past its length"))

    # --- zero-length records and blocks -------------------------------------------------------
    pcap = _pcap(f4[:2]) + pcapgen.pcap_record(T0 + 2 * MS, b"", orig_len=60) + b"".join(
        pcapgen.pcap_record(T0 + (3 + i) * MS, f) for i, f in enumerate(f4[2:])
    )
    out["zero-length-record.pcap"] = (pcap, Expect("ok", 5, 4, {"empty_frame": 1}))
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:2]) + [pcapgen.pcapng_epb(0, T0 // 1000 + 2000, b"", orig_len=60)]
             + _epbs(f4[2:], first=3))
    out["zero-length-packet.pcapng"] = (ng, Expect("ok", 5, 4, {"empty_frame": 1}))
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:2]))
    at = len(ng)
    ng += struct.pack("<II", 6, 0) + b"\0" * 64 + b"".join(_epbs(f4[2:]))
    out["zero-length-block.pcapng"] = (ng, Expect("partial", 2, 2, error_kind="corrupt", error_has=f"byte {at}: block length 0"))
    # A Process Information Block claiming 10 bytes (fuzz regression: pcap-parser underflowed).
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:1]))
    at = len(ng)
    ng += struct.pack("<II", 0x80000001, 10) + b"\0" * 64
    out["short-process-info-block.pcapng"] = (ng, Expect("partial", 1, 1, error_kind="corrupt", error_has=f"byte {at}: block length 10"))

    # --- giant records and blocks -------------------------------------------------------------
    pcap = _pcap(f4[:2])
    at = len(pcap)
    pcap += pcapgen.pcap_record(T0 + 2 * MS, f4[2], caplen=0xFFFFFFF0) + b"\0" * 256
    out["giant-record.pcap"] = (pcap, Expect("partial", 2, 2, error_has=f"byte {at}"))
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:2]))
    at = len(ng)
    ng += struct.pack("<II", 6, 0xFFFFFFF0) + b"\0" * 256
    out["giant-block.pcapng"] = (ng, Expect("partial", 2, 2, error_has=f"byte {at}"))
    # 200 MiB claimed, the file ends well before: never allocated.
    ng = _ng([pcapgen.pcapng_idb(1)] + _epbs(f4[:2]))
    at = len(ng)
    ng += struct.pack("<II", 6, 200 << 20) + b"\0" * 256
    out["big-block.pcapng"] = (ng, Expect("partial", 2, 2, error_has=f"byte {at}"))

    # --- snaplen 0 and 2^32-1 -----------------------------------------------------------------
    for name, snap in (("zero", 0), ("max", 0xFFFFFFFF)):
        out[f"snaplen-{name}.pcap"] = (_pcap(f4, snaplen=snap), Expect("ok", 4, 4))
        # pcapng: EPBs, and Simple Packet Blocks (whose length the snaplen bounds).
        ng = _ng([pcapgen.pcapng_idb(1, snaplen=snap)] + _epbs(f4[:2]) + [pcapgen.pcapng_spb(f) for f in f4[2:]])
        out[f"snaplen-{name}.pcapng"] = (ng, Expect("ok", 4, 4))

    # --- timestamps going backwards ----------------------------------------------------------
    fr = frames(4)
    # ts of frame i: T0 + order[i] ms → one step back (3 → 1); frame 4 (2 ms) is later than the
    # frame before it, though still earlier than the latest seen
    order = [0, 3, 1, 2]
    out["time-backwards.pcap"] = (pcapgen.pcap_bytes([(T0 + order[i] * MS, f) for i, f in enumerate(fr)]), Expect("ok", 4, 4, ts_backwards=1))
    # pcapng: one jump back by a day, and a timestamp of 0 (1970)
    ng = _ng([pcapgen.pcapng_idb(1)] + [
        pcapgen.pcapng_epb(0, T0 // 1000, fr[0]),
        pcapgen.pcapng_epb(0, T0 // 1000 - 86_400 * 10**6, fr[1]),
        pcapgen.pcapng_epb(0, 0, fr[2]),
        pcapgen.pcapng_epb(0, T0 // 1000 + 1000, fr[3]),
    ])
    out["time-backwards.pcapng"] = (ng, Expect("ok", 4, 4, ts_backwards=2))

    # --- unknown block types, link types and interfaces --------------------------------------
    unknown = [
        pcapgen.pcapng_block(0x0BAD0BAD, b"\x01\x02\x03\x04" * 3),  # unknown type
        pcapgen.pcapng_block(0x00000BAD, b"\0\0\0\0" + b"custom"),  # custom block
        pcapgen.pcapng_block(0x80001234, b""),  # local-use type, empty body
        pcapgen.pcapng_nrb(),
        pcapgen.pcapng_isb(0),
    ]
    epbs = _epbs(f4)
    ng = _ng([pcapgen.pcapng_idb(1), unknown[0], epbs[0], unknown[1], epbs[1], unknown[2], epbs[2], unknown[3], epbs[3], unknown[4]])
    out["unknown-blocks.pcapng"] = (ng, Expect("ok", 4, 4))
    ng = _ng([pcapgen.pcapng_idb(1, big_endian=True), pcapgen.pcapng_block(0x0BAD0BAD, b"\0" * 8, big_endian=True)]
             + _epbs(f4, big_endian=True) + [pcapgen.pcapng_isb(0, big_endian=True)], big_endian=True)
    out["unknown-blocks-big-endian.pcapng"] = (ng, Expect("ok", 4, 4))
    # A link type nobody decodes: every frame counted as a skip.
    out["unknown-linktype.pcap"] = (_pcap(f4, linktype=147), Expect("ok", 4, 0, {"unsupported_link_type": 4}))
    # Packets on an interface that was never described, and before any interface.
    ng = _ng([pcapgen.pcapng_epb(0, T0 // 1000, f4[0]), pcapgen.pcapng_idb(1)] + _epbs(f4[1:3])
             + [pcapgen.pcapng_epb(7, T0 // 1000 + 5000, f4[3])])
    out["undescribed-interface.pcapng"] = (ng, Expect("ok", 4, 2, {"unsupported_link_type": 2}))

    # --- junk after a good start ---------------------------------------------------------------
    pcap = _pcap(f4[:2])
    at = len(pcap)
    out["trailing-partial-header.pcap"] = (pcap + b"\x01\x02\x03", Expect("partial", 2, 2, error_kind="truncated", error_has=f"byte {at}"))

    # --- compressed streams cut or damaged --------------------------------------------------------
    # Incompressible payloads, so the damage lies well past the reader's first 4 KiB.
    rnd = random.Random(7)
    c, s = "198.18.0.1", "198.18.0.2"
    noisy = [pcapgen.ethernet(pcapgen.ipv4(c, s, 17, pcapgen.udp(5000, 5001, rnd.randbytes(200)))) for _ in range(2000)]
    whole = _pcap(noisy)
    gz = gzip.compress(whole, mtime=0)
    out["cut-gzip.pcap.gz"] = (gz[: len(gz) * 2 // 3], Expect("partial", -1, -1, error_kind="io", error_has="deflate"))
    zs = _zstd(whole)
    out["cut-zstd.pcap.zst"] = (zs[: len(zs) * 2 // 3], Expect("partial", -1, -1, error_kind="io"))

    expectations = {}
    for name, (data, exp) in out.items():
        (directory / name).write_bytes(data)
        expectations[name] = exp
    return expectations


def every_block_kind(big_endian: bool = False) -> bytes:
    """A small pcapng with one of every block kind we meet, for the all-prefixes loop."""
    f4 = frames(4)
    return _ng([
        pcapgen.pcapng_idb(1, tsresol=9, big_endian=big_endian),
        pcapgen.pcapng_epb(0, T0, f4[0], big_endian=big_endian),
        pcapgen.pcapng_block(0x0BAD0BAD, b"\0" * 8, big_endian=big_endian),
        pcapgen.pcapng_spb(f4[1], big_endian=big_endian),
        pcapgen.pcapng_nrb(big_endian=big_endian),
        pcapgen.pcapng_idb(101, big_endian=big_endian),
        pcapgen.pcapng_epb(1, T0 // 1000 + 5, f4[2][14:], big_endian=big_endian),
        pcapgen.pcapng_isb(0, big_endian=big_endian),
        pcapgen.pcapng_epb(0, T0 + 9 * MS, f4[3], big_endian=big_endian),
    ], big_endian=big_endian)

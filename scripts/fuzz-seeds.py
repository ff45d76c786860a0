#!/usr/bin/env python3
"""Build seed corpora for the fuzz targets (fuzz/) from the test corpus, into a directory outside
the repository. Seeds are derived at run time and never committed.

  scripts/fuzz-seeds.py OUT_DIR [--corpus DIR]

writes OUT_DIR/<target>/<sha1> for each target:

  capture_reader, flow_session  every corpus capture of at most 64 KiB whole, and the first
                                records (up to 64 KiB, cut at a record boundary) of larger ones
  decode_frame                  single frames: [link type selector, snaplen cut, frame bytes]
  quic_datagram                 UDP payloads of the QUIC captures (raw mode), and sealed-mode
                                inputs carrying a CRYPTO frame with a real ClientHello (taken from
                                the TLS-over-TCP captures) so the decryptor's happy path is a seed

The corpus is $TAILSCOPE_CORPUS or the repository's tests/corpus (as the tests use).
Standard library only.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import struct
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_CAPTURE_SEED = 64 * 1024
MAX_FRAME_SEED = 1600
FRAMES_PER_FILE = 40
DATAGRAMS_PER_FILE = 50
# Must match LINKTYPES in fuzz/fuzz_targets/decode_frame.rs.
DECODE_LINKTYPES = [0, 1, 9, 50, 51, 101, 108, 113, 228, 229, 276, 147, 0xFFFFFFFF]
# Must match SEAL_VERSIONS in fuzz/fuzz_targets/quic_datagram.rs (index 0 = v1, 1 = v2, ...).
SEAL_VERSION_COUNT = 9


def corpus_dir(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("TAILSCOPE_CORPUS")
    return Path(env) if env else REPO / "tests" / "corpus"


def records(data: bytes):
    """(linktype, frame bytes, end offset of the record) for each packet record; stops quietly at
    anything it does not understand (seeds need not be complete)."""
    if len(data) < 24:
        return
    magic = data[:4]
    if magic == b"\x0a\x0d\x0d\x0a":
        yield from _pcapng_records(data)
        return
    for e in ("<", ">"):
        m = struct.unpack(e + "I", magic)[0]
        if m in (0xA1B2C3D4, 0xA1B23C4D):
            break
    else:
        return
    linktype = struct.unpack_from(e + "I", data, 20)[0] & 0x0FFFFFFF
    pos = 24
    while pos + 16 <= len(data):
        caplen = struct.unpack_from(e + "I", data, pos + 8)[0]
        end = pos + 16 + caplen
        if end > len(data):
            return
        yield linktype, data[pos + 16 : end], end
        pos = end


def _pcapng_records(data: bytes):
    pos = 0
    e = "<"
    linktypes: list[int] = []
    while pos + 12 <= len(data):
        btype = struct.unpack_from(e + "I", data, pos)[0]
        if btype == 0x0A0D0D0A:
            bom = data[pos + 8 : pos + 12]
            e = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
            linktypes = []
        blen = struct.unpack_from(e + "I", data, pos + 4)[0]
        if blen < 12 or pos + blen > len(data):
            return
        body = data[pos + 8 : pos + blen - 4]
        end = pos + blen
        if btype == 1 and len(body) >= 2:
            linktypes.append(struct.unpack_from(e + "H", body, 0)[0])
        elif btype == 6 and len(body) >= 20:
            if_id, _hi, _lo, caplen, _orig = struct.unpack_from(e + "IIIII", body, 0)
            lt = linktypes[if_id] if if_id < len(linktypes) else 0xFFFFFFFF
            yield lt, body[20 : 20 + caplen], end
        elif btype == 3 and len(body) >= 4:
            lt = linktypes[0] if linktypes else 0xFFFFFFFF
            yield lt, body[4:], end
        else:
            yield None, b"", end
        pos = end


def _l3(linktype: int, f: bytes) -> bytes | None:
    if linktype == 1:
        if len(f) < 14:
            return None
        et, rest = struct.unpack_from("!H", f, 12)[0], f[14:]
        while et in (0x8100, 0x88A8) and len(rest) >= 4:
            et, rest = struct.unpack_from("!H", rest, 2)[0], rest[4:]
        return rest if et in (0x0800, 0x86DD) else None
    if linktype in (101, 228, 229):
        return f
    if linktype == 113:
        return f[16:] if len(f) >= 16 else None
    if linktype == 276:
        return f[20:] if len(f) >= 20 else None
    if linktype in (0, 108):
        return f[4:] if len(f) >= 4 else None
    return None


def l4(linktype: int, f: bytes):
    """(proto, src port, dst port, payload) of a plain IPv4/IPv6 TCP or UDP frame."""
    ip = _l3(linktype, f)
    if not ip:
        return None
    v = ip[0] >> 4
    if v == 4 and len(ip) >= 20:
        ihl = (ip[0] & 0x0F) * 4
        proto = ip[9]
        total = struct.unpack_from("!H", ip, 2)[0] or len(ip)
        seg = ip[ihl:total]
    elif v == 6 and len(ip) >= 40:
        proto = ip[6]
        seg = ip[40 : 40 + (struct.unpack_from("!H", ip, 4)[0] or len(ip))]
    else:
        return None
    if proto == 17 and len(seg) >= 8:
        sp, dp = struct.unpack_from("!HH", seg, 0)
        return 17, sp, dp, seg[8:]
    if proto == 6 and len(seg) >= 20:
        sp, dp = struct.unpack_from("!HH", seg, 0)
        off = (seg[12] >> 4) * 4
        return 6, sp, dp, seg[off:]
    return None


def varint(n: int) -> bytes:
    if n < 64:
        return bytes([n])
    if n < 16384:
        return struct.pack("!H", 0x4000 | n)
    return struct.pack("!I", 0x80000000 | n)


class Seeds:
    def __init__(self, out: Path):
        self.out = out
        self.count: dict[str, int] = {}

    def add(self, target: str, data: bytes) -> None:
        d = self.out / target
        d.mkdir(parents=True, exist_ok=True)
        p = d / hashlib.sha1(data).hexdigest()
        if not p.exists():
            p.write_bytes(data)
            self.count[target] = self.count.get(target, 0) + 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--corpus", help="corpus directory (default: $TAILSCOPE_CORPUS or tests/corpus)")
    args = ap.parse_args()
    pcaps = corpus_dir(args.corpus) / "pcaps"
    if not pcaps.is_dir():
        print(f"fuzz-seeds: corpus not found at {pcaps} (set TAILSCOPE_CORPUS)", file=sys.stderr)
        return 1
    seeds = Seeds(args.out)
    hellos: list[bytes] = []
    for path in sorted(pcaps.iterdir()):
        data = path.read_bytes()
        if not data:
            continue
        if len(data) <= MAX_CAPTURE_SEED:
            head = data
        else:
            cut = 0
            for _lt, _f, end in records(data):
                if end > MAX_CAPTURE_SEED:
                    break
                cut = end
            head = data[: cut or MAX_CAPTURE_SEED]
        seeds.add("capture_reader", head)
        seeds.add("flow_session", head)
        quic_file = "quic" in path.name or "http3" in path.name or "chromium" in path.name or "firefox" in path.name
        frames = datagrams = 0
        for lt, f, _end in records(data):
            if lt is None:
                continue
            if frames < FRAMES_PER_FILE and lt in DECODE_LINKTYPES:
                seeds.add("decode_frame", bytes([DECODE_LINKTYPES.index(lt), 0]) + f[:MAX_FRAME_SEED])
                frames += 1
            seg = l4(lt, f)
            if seg is None:
                continue
            proto, sp, dp, payload = seg
            if proto == 17 and payload and (quic_file or 443 in (sp, dp)) and datagrams < DATAGRAMS_PER_FILE:
                datagrams += 1
                from_client = 0x40 if dp in (443, 4433) else 0
                seeds.add("quic_datagram", bytes([from_client | 8]) + payload)
            # A TLS record carrying a ClientHello: the handshake message for sealed QUIC seeds.
            if proto == 6 and len(payload) > 9 and payload[0] == 0x16 and payload[5] == 1 and len(hellos) < 8:
                hellos.append(payload[5:])
    dcid = bytes(range(0x83, 0x8B))  # 8 bytes
    for i, hello in enumerate(hellos or [b"\x01\x00\x00\x00"]):
        crypto = b"\x06" + varint(0) + varint(len(hello)) + hello
        for v in range(SEAL_VERSION_COUNT):
            flags = 0x04 | (i % 4)  # client, pn_len 1..4
            seeds.add("quic_datagram", bytes([0x80, v, len(dcid), flags]) + struct.pack("!I", i) + dcid + crypto)
    # An ACK and a CONNECTION_CLOSE from the server side.
    ack = b"\x02" + varint(5) + varint(0) + varint(1) + varint(2) + varint(0) + varint(1)
    close = b"\x1c" + varint(0x0A) + varint(0x06) + varint(5) + b"hello"
    seeds.add("quic_datagram", bytes([0x80, 0, 8, 0x01]) + b"\0\0\0\x01" + dcid + ack + close)
    for target in ("capture_reader", "decode_frame", "quic_datagram", "flow_session"):
        print(f"{target}: {seeds.count.get(target, 0)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())

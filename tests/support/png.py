"""A small PNG reader for screenshot checks (8-bit RGB/RGBA/grey, non-interlaced: what Chromium
writes), without Pillow. Rows filtered None/Up/Sub are undone with whole-row integer arithmetic
(bytewise addition without carries, "SWAR"); Average and Paeth rows byte by byte."""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Image:
    width: int
    height: int
    channels: int
    rows: list[bytes]  # unfiltered scanlines, width * channels bytes each

    def pixel(self, x: int, y: int) -> tuple[int, ...]:
        i = x * self.channels
        return tuple(self.rows[y][i : i + self.channels])


def _add_rows(a: bytes, b: bytes) -> bytes:
    """(a + b) mod 256, byte by byte, as two big integers."""
    n = len(a)
    lo, hi = int.from_bytes(b"\x7f" * n, "big"), int.from_bytes(b"\x80" * n, "big")
    x, y = int.from_bytes(a, "big"), int.from_bytes(b, "big")
    return (((x & lo) + (y & lo)) ^ ((x ^ y) & hi)).to_bytes(n, "big")


def _undo_sub(raw: bytes, bpp: int) -> bytes:
    """recon[i] = raw[i] + recon[i - bpp]: a prefix sum per channel, by doubling."""
    out, shift = raw, bpp
    while shift < len(raw):
        out = _add_rows(out, bytes(shift) + out[: len(out) - shift])
        shift *= 2
    return out


def _undo_slow(kind: int, raw: bytes, prev: bytes, bpp: int) -> bytes:
    out = bytearray(len(raw))
    for i, r in enumerate(raw):
        a = out[i - bpp] if i >= bpp else 0
        b = prev[i]
        if kind == 3:
            out[i] = (r + ((a + b) >> 1)) & 0xFF
        else:
            c = prev[i - bpp] if i >= bpp else 0
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            out[i] = (r + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
    return bytes(out)


def read_png(data: bytes) -> Image:
    if not data.startswith(SIGNATURE):
        raise ValueError("not a PNG file")
    pos, header, idat = 8, None, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + n
    if header is None:
        raise ValueError("PNG without IHDR")
    width, height, depth, color, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"unsupported PNG (bit depth {depth}, color type {color}, interlace {interlace})")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, prev = [], bytes(stride)
    for y in range(height):
        off = y * (stride + 1)
        kind, line = raw[off], raw[off + 1 : off + 1 + stride]
        if kind == 0:
            cur = line
        elif kind == 1:
            cur = _undo_sub(line, channels)
        elif kind == 2:
            cur = _add_rows(line, prev)
        elif kind in (3, 4):
            cur = _undo_slow(kind, line, prev, channels)
        else:
            raise ValueError(f"bad PNG filter {kind} on row {y}")
        rows.append(cur)
        prev = cur
    return Image(width, height, channels, rows)

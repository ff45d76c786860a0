"""Google QUIC Q035-Q043: no IETF long header, a public header naming the version and a CHLO in
the clear. The packets are built as the gQUIC wire specification lays them out (big-endian
stream fields from Q039, little-endian before)."""
from __future__ import annotations

import struct

import pytest

from conftest import read_table
from support import corpus, pcapgen
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def chlo_packet(version: bytes, tags: list[tuple[bytes, bytes]], pn: int = 1) -> bytes:
    big = int(version[1:]) >= 39
    msg = b"CHLO" + struct.pack("<HH", len(tags), 0)
    end = 0
    for tag, value in tags:
        end += len(value)
        msg += tag + struct.pack("<I", end)
    msg += b"".join(v for _, v in tags)
    # flags: version present, 8-byte CID, 1-byte packet number; CID; version; packet number
    p = bytes([0x09]) + (0x1122334455667788).to_bytes(8, "big") + version + bytes([pn])
    p += b"\xaa" * 12                      # null encryption's message hash
    p += bytes([0x80 | 0x20, 1])           # STREAM, data length present, stream 1, offset 0
    p += struct.pack(">H" if big else "<H", len(msg)) + msg
    return p.ljust(1350, b"\0")            # PADDING to the end, as Chrome pads its CHLO


def server_packet() -> bytes:
    # flags: 8-byte CID, 1-byte packet number (no version: the server agreed)
    return bytes([0x08]) + (0x1122334455667788).to_bytes(8, "big") + bytes([1]) + b"\x5a" * 60


@pytest.mark.parametrize("version", [b"Q035", b"Q039", b"Q043"])
def test_gquic_version_and_sni(tmp_path, version):
    c, s = ("198.18.0.1", 50000), ("198.18.0.2", 443)
    frames = [
        (10**9, pcapgen.ethernet(pcapgen.ipv4(c[0], s[0], 17, pcapgen.udp(c[1], s[1], chlo_packet(
            version, [(b"PAD\0", b"\0" * 40), (b"SNI\0", b"www.example.com"), (b"VER\0", version)]))))),
        (10**9 + 30 * 10**6, pcapgen.ethernet(pcapgen.ipv4(s[0], c[0], 17, pcapgen.udp(s[1], c[1], server_packet())))),
        (10**9 + 60 * 10**6, pcapgen.ethernet(pcapgen.ipv4(c[0], s[0], 17, pcapgen.udp(c[1], s[1], chlo_packet(
            version, [(b"VER\0", version)], pn=2))))),
    ]
    f = pcapgen.write_pcap(tmp_path / "g.pcap", frames)
    run = analyze([str(f)], tmp_path / "out", AnalyzeOptions(progress=False), argv=[])
    (fl,) = read_table(run.out, "flows")
    assert (fl["protocol"], fl["quic_version"], fl["sni"]) == ("quic", f"gquic-{version.decode()}", "www.example.com")
    # None of the IETF signatures are read from these headers (no spin bit, no handshake states).
    assert not fl["signatures"]


def test_gquic_q035_public_captures(tmp_path):
    """nDPI's YouTube capture (corpus; nDPI's wechat.pcap shows the same on three more flows): Chrome's Q035 CHLOs carry public flags 0x0d,
    both connection-ID bits set for an 8-byte ID (Chromium's old coding), which was taken for a
    diversification nonce: the flows stayed `udp` with no version or SNI. Every gQUIC flow tshark
    names is now quic with its version and the CHLO's SNI, as tshark reads them."""
    pcaps = [str(corpus.pcap_path("youtube_quic.pcap"))]
    run = analyze(pcaps, tmp_path / "out", AnalyzeOptions(progress=False), argv=[])
    got = sorted((f["client_port"], f["protocol"], f["quic_version"], f["sni"])
                 for f in read_table(run.out, "flows") if f["server_port"] == 443 and f["protocol"] != "tcp")
    assert got == [
        (53859, "quic", "gquic-Q035", "googleads.g.doubleclick.net"),
        (54997, "quic", "gquic-Q035", "pagead2.googlesyndication.com"),
        (56074, "quic", "gquic-Q035", "yt3.ggpht.com"),
    ]

"""Capture formats and link layers: compression, timestamp resolutions, byte orders, pcapng
sections/interfaces/simple packets, and every supported link type, on frames built here."""
from __future__ import annotations

import gzip
import shutil

import pytest
import zstandard

from conftest import read_table
from support import corpus, pcapgen
from tailscope.jobs.run.local import AnalyzeOptions, analyze

OPTS = AnalyzeOptions(progress=False)


def _syn(src="198.18.0.1", dst="198.18.0.2", sport=40000, dport=443, seq=1000):
    mss_ws_sack_ts = b"\x02\x04\x05\xb4" + b"\x03\x03\x07" + b"\x04\x02" + b"\x08\x0a\x00\x00\x00\x01\x00\x00\x00\x00"
    return pcapgen.ipv4(src, dst, 6, pcapgen.tcp(sport, dport, seq, flags=0x02, options=mss_ws_sack_ts))


def _packets(tmp_path, files, **kw):
    run = analyze([str(f) for f in files], tmp_path / "out", OPTS, argv=[])
    return run, read_table(run.out, "packets"), read_table(run.out, "flows")


def test_gzip_and_zstd_equal_plain(tmp_path):
    src = corpus.pcap_path("tls1.2.pcap")
    raw = src.read_bytes()
    gz = tmp_path / "a.pcap.gz"
    gz.write_bytes(gzip.compress(raw))
    zs = tmp_path / "b.pcap.zst"
    zs.write_bytes(zstandard.ZstdCompressor().compress(raw))
    plain = tmp_path / "c.pcap"
    shutil.copy(src, plain)
    results = {}
    for f in (plain, gz, zs):
        run, packets, _ = _packets(tmp_path / f"run-{f.name}", [f])
        assert run.files[0].compression == {"c.pcap": "none", "a.pcap.gz": "gzip", "b.pcap.zst": "zstd"}[f.name]
        results[f.name] = [(p["frame"], p["ts"], p["seq"], p["payload_len"]) for p in sorted(packets, key=lambda p: p["frame"])]
    assert results["c.pcap"] == results["a.pcap.gz"] == results["b.pcap.zst"]
    assert len(results["c.pcap"]) == corpus.manifest_row("tls1.2.pcap")["packets"]


@pytest.mark.parametrize("nanosecond", [False, True])
@pytest.mark.parametrize("big_endian", [False, True])
def test_pcap_resolutions_and_byte_orders(tmp_path, nanosecond, big_endian):
    ts = 1_700_000_000_123_456_000
    f = pcapgen.write_pcap(tmp_path / "t.pcap", [(ts, pcapgen.ethernet(_syn()))], nanosecond=nanosecond, big_endian=big_endian)
    run, packets, flows = _packets(tmp_path, [f])
    assert run.files[0].status == "ok"
    (p,) = packets
    assert p["ts"] == 1_700_000_000_123_456_000
    assert (p["seq"], p["flags"], p["rel_seq"]) == (1000, 0x02, 0)
    (fl,) = flows
    assert (fl["client_ip"], fl["client_port"], fl["server_port"], fl["role_source"]) == ("198.18.0.1", 40000, 443, "syn")
    assert (fl["c2s_mss"], fl["c2s_wscale"]) == (1460, 7)


def test_pcapng_sections_interfaces_resolutions_and_simple_packets(tmp_path):
    syn = _syn()
    synack = pcapgen.ipv4("198.18.0.2", "198.18.0.1", 6, pcapgen.tcp(443, 40000, 5000, 1001, flags=0x12))
    data = (
        pcapgen.pcapng_section()
        + pcapgen.pcapng_idb(1, tsresol=9)  # Ethernet, nanoseconds
        + pcapgen.pcapng_idb(101, tsresol=0x80 | 10)  # raw IP, 1/1024 s
        + pcapgen.pcapng_epb(0, 1_700_000_000_000_000_001, pcapgen.ethernet(syn))
        + pcapgen.pcapng_epb(1, 1_700_000_000 * 1024 + 512, synack)
        # A second section redefines interface 0 as raw IP with microseconds.
        + pcapgen.pcapng_section()
        + pcapgen.pcapng_idb(101)
        + pcapgen.pcapng_epb(0, 1_700_000_001_000_000, pcapgen.ipv4("198.18.0.1", "198.18.0.2", 6, pcapgen.tcp(40000, 443, 1001, 5001, flags=0x10)))
        + pcapgen.pcapng_spb(pcapgen.ipv4("198.18.0.1", "198.18.0.2", 6, pcapgen.tcp(40000, 443, 1001, 5001, flags=0x18, payload=b"hello")))
    )
    f = tmp_path / "t.pcapng"
    f.write_bytes(data)
    run, packets, flows = _packets(tmp_path, [f])
    assert run.files[0].format == "pcapng" and run.files[0].frames == 4 and run.files[0].decoded == 4
    ts = [p["ts"] for p in sorted(packets, key=lambda p: p["frame"])]
    assert ts[0] == 1_700_000_000_000_000_001
    assert ts[1] == 1_700_000_000_500_000_000
    assert ts[2] == 1_700_000_001_000_000_000
    assert ts[3] == ts[2]  # a Simple Packet Block has no timestamp: it keeps the previous one
    (fl,) = flows
    assert (fl["c2s_packets"], fl["s2c_packets"], fl["c2s_payload_bytes"]) == (3, 1, 5)


def _l3_v4():
    return _syn()


def _l3_v6():
    return pcapgen.ipv6("fd00::1", "fd00::2", 6, pcapgen.tcp(40000, 443, 1000, flags=0x02))


LINK_CASES = {
    "ethernet": (1, lambda: pcapgen.ethernet(_l3_v4())),
    "ethernet-ipv6": (1, lambda: pcapgen.ethernet(_l3_v6(), ethertype=0x86DD)),
    "802.1q": (1, lambda: pcapgen.ethernet(_l3_v4(), tags=((0x8100, 7),))),
    "qinq": (1, lambda: pcapgen.ethernet(_l3_v4(), tags=((0x88A8, 10), (0x8100, 20)))),
    "pppoe": (1, lambda: pcapgen.ethernet(b"\x11\x00\x00\x01" + (2 + len(_l3_v4())).to_bytes(2, "big") + b"\x00\x21" + _l3_v4(), ethertype=0x8864)),
    "mpls": (1, lambda: pcapgen.ethernet(b"\x00\x01\x01\x40" + _l3_v4(), ethertype=0x8847)),
    "raw-101": (101, _l3_v4),
    "raw-228": (228, _l3_v4),
    "raw-229": (229, _l3_v6),
    "null-le": (0, lambda: b"\x02\x00\x00\x00" + _l3_v4()),
    "loop": (108, lambda: b"\x00\x00\x00\x02" + _l3_v4()),
    "ppp": (9, lambda: b"\xff\x03\x00\x21" + _l3_v4()),
    "sll": (113, lambda: b"\x00\x00\x00\x01\x00\x06" + b"\x02\x00\x00\x00\x00\x01\x00\x00" + b"\x08\x00" + _l3_v4()),
    "sll2": (276, lambda: b"\x08\x00\x00\x00" + b"\x00\x00\x00\x02" + b"\x00\x01\x00\x06" + b"\x02\x00\x00\x00\x00\x01\x00\x00" + _l3_v4()),
    "vxlan": (1, lambda: pcapgen.ethernet(pcapgen.ipv4("198.51.100.1", "198.51.100.2", 17, pcapgen.udp(50000, 4789, b"\x08\0\0\0\0\0\x01\0" + pcapgen.ethernet(_l3_v4()))))),
    "gre": (1, lambda: pcapgen.ethernet(pcapgen.ipv4("198.51.100.1", "198.51.100.2", 47, b"\x00\x00\x08\x00" + _l3_v4()))),
    "6in4": (1, lambda: pcapgen.ethernet(pcapgen.ipv4("198.51.100.1", "198.51.100.2", 41, _l3_v6()))),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_link_types(tmp_path, case):
    linktype, build = LINK_CASES[case]
    f = pcapgen.write_pcap(tmp_path / "t.pcap", [(10**9, build())], linktype=linktype)
    run, packets, flows = _packets(tmp_path, [f])
    assert run.files[0].decoded == 1, run.files[0].skipped
    (p,) = packets
    assert (p["seq"], p["flags"]) == (1000, 0x02)
    (fl,) = flows
    assert (fl["client_port"], fl["server_port"]) == (40000, 443)
    assert fl["encap"] == {"vxlan": "vxlan", "gre": "gre", "6in4": "6in4"}.get(case)


def test_unsupported_link_type_is_counted(tmp_path):
    f = pcapgen.write_pcap(tmp_path / "t.pcap", [(10**9, b"\x00" * 40), (2 * 10**9, b"\x00" * 40)], linktype=127)
    run = analyze([str(f)], tmp_path / "out", OPTS, argv=[])
    r = run.files[0]
    assert r.status == "ok" and r.frames == 2 and r.decoded == 0
    assert r.skipped == {"unsupported_link_type": 2}


def test_snaplen_cut_payload_keeps_header_lengths(tmp_path):
    """A segment cut by the snaplen keeps its header fields; its payload length comes from IP."""
    seg = pcapgen.ipv4("198.18.0.1", "198.18.0.2", 6, pcapgen.tcp(40000, 443, 1000, 1, flags=0x18, payload=b"x" * 1000))
    frame = pcapgen.ethernet(seg)
    f = pcapgen.write_pcap(tmp_path / "t.pcap", [(10**9, frame[:96])], snaplen=96, orig_lens=[len(frame)])
    run, packets, flows = _packets(tmp_path, [f])
    (p,) = packets
    assert p["payload_len"] == 1000 and p["wire_len"] == len(frame)
    assert flows[0]["c2s_payload_bytes"] == 1000 and flows[0]["c2s_ip_bytes"] == len(seg)

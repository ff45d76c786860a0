"""Tests of the peer-output parsers (tests/support) over the whole corpus.

These check invariants that hold between independent sources (MANIFEST.tsv, the capture files'
own record headers, tshark's CSV vs. its conversation tables, tcptrace's summary vs. its
connections, baselines.tsv vs. the Zeek files), so a parser bug shows up as a failure. Where an
invariant does not hold for a capture, the exception is listed with the reason, and the test
also checks that the exception is still needed.
"""
from __future__ import annotations

import struct
from collections import Counter

import pytest

from support import corpus, peers

PCAPS = corpus.pcap_names()
CLASSIC_PCAPS = [r["file"] for r in corpus.manifest() if r["file_format"].startswith("pcap ")]
ZEEK_ROWS = peers.zeek_baselines()


def _classic_pcap_records(name: str) -> list[tuple[int, int]]:
    """(timestamp ns, original length) per record of a little-endian microsecond pcap."""
    data = corpus.pcap_path(name).read_bytes()
    assert struct.unpack_from("<I", data)[0] == 0xA1B2C3D4, "expected LE/usec pcap"
    records, off = [], 24
    while off + 16 <= len(data):
        sec, usec, incl, orig = struct.unpack_from("<IIII", data, off)
        records.append((sec * 10**9 + usec * 1000, orig))
        off += 16 + incl
    return records


def _inner_addr(row: dict, end: str) -> str | None:
    """Innermost address of a tshark row (the TCP/UDP conversation uses it for TCP)."""
    addrs = row[f"ipv6.{end}"] or row[f"ip.{end}"]
    return addrs[-1] if addrs else None


# --------------------------------------------------------------------------------- corpus


def test_manifest_matches_pcaps_dir():
    rows = corpus.manifest()
    assert len(rows) == len({r["file"] for r in rows}) == len(list((corpus.corpus_dir() / "pcaps").iterdir()))
    for r in rows:
        assert isinstance(r["packets"], int) and isinstance(r["has_zeek_baseline"], bool)
        assert corpus.pcap_path(r["file"]).stat().st_size == r["bytes"]


def test_missing_corpus_raises_with_path(monkeypatch, tmp_path):
    monkeypatch.setenv(corpus.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(corpus.CorpusMissingError, match="nowhere"):
        corpus.corpus_dir()


# --------------------------------------------------------------------------------- tshark CSV


@pytest.mark.parametrize("pcap", PCAPS)
def test_tshark_packets_one_row_per_frame(pcap):
    rows = peers.tshark_packets(pcap)
    assert len(rows) == corpus.manifest_row(pcap)["packets"]
    assert [r["frame.number"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        assert isinstance(r["frame.time_epoch"], int)
        assert all(isinstance(r[f], bool) for f in peers.TSHARK_FLAGS)
        assert all(isinstance(r[f], list) for f in peers.TSHARK_MULTI)
        assert (r["tcp.srcport"] is None) == (r["tcp.dstport"] is None) == (r["tcp.stream"] is None)
        if any(r[f] for f in peers.TSHARK_FLAGS) or r["tcp.analysis.ack_rtt"] is not None:
            assert r["tcp.stream"] is not None
        if r["tcp.analysis.ack_rtt"] is not None:
            assert r["tcp.analysis.ack_rtt"] >= 0


@pytest.mark.parametrize("pcap", CLASSIC_PCAPS)
def test_tshark_times_equal_pcap_record_times(pcap):
    """Exact ns parsing of frame.time_epoch, checked against the capture's own record headers."""
    times = [r["frame.time_epoch"] for r in peers.tshark_packets(pcap)]
    assert times == [t for t, _ in _classic_pcap_records(pcap)]


def test_tshark_decode_as_quic_extra_file():
    plain = peers.tshark_packets("quicdoq.pcap")
    quic = peers.tshark_packets("quicdoq.pcap", decode_as_quic=True)
    assert len(plain) == len(quic)
    assert not any(r["quic.version"] for r in plain)
    assert any(r["quic.version"] for r in quic)
    with pytest.raises(FileNotFoundError):
        peers.tshark_packets("get.pcap", decode_as_quic=True)


# --------------------------------------------------------------------------------- tshark conv


@pytest.mark.parametrize("pcap", PCAPS)
def test_tshark_conversation_totals(pcap):
    conv = peers.tshark_conversations(pcap)
    rows = peers.tshark_packets(pcap)
    n_packets = corpus.manifest_row(pcap)["packets"]
    # A frame with both TCP and UDP ports (VXLAN, Teredo) may be counted in both tables.
    both = sum(r["tcp.srcport"] is not None and r["udp.srcport"] is not None for r in rows)
    per_proto = {p: sum(c.frames_total for c in conv[p]) for p in conv}
    assert per_proto["tcp"] <= n_packets and per_proto["udp"] <= n_packets
    assert per_proto["tcp"] + per_proto["udp"] <= n_packets + both
    for proto, convs in conv.items():
        assert len({c.key for c in convs}) == len(convs), "duplicate conversation"
        for c in convs:
            assert c.proto == proto
            assert c.frames_total == c.frames_a_to_b + c.frames_b_to_a
            for b in (c.bytes_a_to_b, c.bytes_b_to_a, c.bytes_total):
                # format_size(): exact below 10,000 bytes, truncated kB/MB/... from there on.
                assert b.exact == (b.value < 10_000) and b.exact == (b.unit == 1)
            lo = max(c.bytes_total.value, c.bytes_a_to_b.value + c.bytes_b_to_a.value)
            hi = min(c.bytes_total.upper, c.bytes_a_to_b.upper + c.bytes_b_to_a.upper - 1)
            assert lo < hi, "direction bytes do not add up to the total"


# tshark CSV rows vs. conversation table rows, where they legitimately differ.
CONV_CSV_MISMATCH = {
    ("quic_interop_V.pcapng", "udp"): "ICMP errors quote UDP packets; the CSV row has the quoted ports",
    ("6in4tunnel.pcap", "tcp"): "an ICMPv6 error quotes a TCP segment; the CSV row has its ports",
    ("vxlan-encapsulated-http.pcap", "udp"): "UDP conversation is keyed on the outer IPv4 addresses",
    ("Teredo.pcap", "udp"): "UDP conversations are keyed on the outer IPv4 addresses",
    ("reasm_crash_anon.pcapng", "tcp"): "2 malformed frames carry the ports but are not counted",
    ("truncated-header.pcap", "tcp"): "frame 1 (truncated TCP header) is not counted; A is frame 2's source",
}


@pytest.mark.parametrize("pcap", PCAPS)
def test_tshark_conversation_directions_match_csv(pcap):
    """'->' is A to B, '<-' is B to A, A is the first sender; bytes are on-wire frame lengths."""
    rows = peers.tshark_packets(pcap)
    lengths = [orig for _, orig in _classic_pcap_records(pcap)] if pcap in CLASSIC_PCAPS else None
    conv = peers.tshark_conversations(pcap)
    for proto in ("tcp", "udp"):
        frames, nbytes, first = Counter(), Counter(), {}
        for r in rows:
            if r[f"{proto}.srcport"] is None:
                continue
            t = (_inner_addr(r, "src"), r[f"{proto}.srcport"], _inner_addr(r, "dst"), r[f"{proto}.dstport"])
            frames[t] += 1
            nbytes[t] += lengths[r["frame.number"] - 1] if lengths else 0
            first.setdefault(peers.endpoint_key(*t), t[:2])
        problems = []
        for c in conv[proto]:
            ab, ba = (c.addr_a, c.port_a, c.addr_b, c.port_b), (c.addr_b, c.port_b, c.addr_a, c.port_a)
            if (frames[ab], frames[ba]) != (c.frames_a_to_b, c.frames_b_to_a):
                problems.append(f"{c.key}: frames {frames[ab]}/{frames[ba]} in CSV")
            if first.get(c.key) != (c.addr_a, c.port_a):
                problems.append(f"{c.key}: first sender {first.get(c.key)} is not A")
            if lengths and not (c.bytes_a_to_b.contains(nbytes[ab]) and c.bytes_b_to_a.contains(nbytes[ba])):
                problems.append(f"{c.key}: bytes {nbytes[ab]}/{nbytes[ba]} outside {c.bytes_a_to_b}/{c.bytes_b_to_a}")
        if (pcap, proto) in CONV_CSV_MISMATCH:
            assert problems, f"listed exception no longer needed: {CONV_CSV_MISMATCH[pcap, proto]}"
        else:
            assert not problems


# --------------------------------------------------------------------------------- tcptrace

# The stats the brief lists, as normalised keys; each must be present in both directions.
TCPTRACE_REQUIRED = """
total_packets ack_pkts_sent pure_acks_sent sack_pkts_sent dsack_pkts_sent max_sack_blks_ack
unique_bytes_sent actual_data_pkts actual_data_bytes rexmt_data_pkts rexmt_data_bytes
zwnd_probe_pkts zwnd_probe_bytes outoforder_pkts pushed_data_pkts syn_pkts_sent fin_pkts_sent
urgent_data_pkts urgent_data_bytes mss_requested max_segm_size min_segm_size avg_segm_size
max_win_adv min_win_adv zero_win_adv avg_win_adv initial_window_bytes initial_window_pkts
ttl_stream_length missed_data truncated_data truncated_packets data_xmit_time_s idletime_max_ms
throughput_bytes_per_s rtt_samples rtt_min_ms rtt_max_ms rtt_avg_ms rtt_stdev_ms rtt_from_3whs_ms
rtt_full_sz_smpls rtt_full_sz_min_ms rtt_full_sz_max_ms rtt_full_sz_avg_ms rtt_full_sz_stdev_ms
post_loss_acks segs_cum_acked duplicate_acks triple_dupacks max_retrans min_retr_time_ms
max_retr_time_ms avg_retr_time_ms sdv_retr_time_ms
""".split()
# Printed only when an option was seen in the SYNs, or for some connections.
TCPTRACE_OPTIONAL = """
req_1323_ws req_1323_ts adv_wind_scale req_sack sacks_sent resets_sent hardware_dups
ambiguous_acks rtt_min_last_ms rtt_max_last_ms rtt_avg_last_ms rtt_sdv_last_ms
""".split()
# tcptrace reads bogus ports from packets with some IPv6 extension headers (corpus README).
TCPTRACE_BOGUS_PORTS = {"ipv6-http-atomic-frag.pcap"}


def _tcptrace_not_run() -> set[str]:
    path = corpus.peers_dir() / "tcptrace" / "CONVERTED.tsv"
    lines = path.read_text().splitlines()[1:]
    return {line.split("\t")[0] for line in lines if "not converted" in line}


@pytest.mark.parametrize("pcap", PCAPS)
def test_tcptrace_summary_and_connections(pcap):
    out = peers.tcptrace_output(pcap)
    if pcap in _tcptrace_not_run():
        assert out.error and out.packets_seen is None and not out.connections
        return
    assert out.error is None
    assert out.packets_seen <= corpus.manifest_row(pcap)["packets"]
    assert out.tcp_packets_traced <= out.packets_seen
    # Holds for every file in this corpus, including multi-connection ones.
    assert out.tcp_packets_traced == sum(c.total_packets for c in out.connections)
    assert (out.connections_traced or 0) == len(out.connections)
    assert [c.index for c in out.connections] == list(range(1, len(out.connections) + 1))
    for c in out.connections:
        assert c.filename == f"pcaps/{pcap}"
        assert c.total_packets == c.a2b["total_packets"] + c.b2a["total_packets"]
        # elapsed is printed up to 1 us short of last - first (tcptrace's own rounding).
        assert 0 <= (c.last_packet_ns - c.first_packet_ns) - c.elapsed_ns <= 1000
        assert c.complete == (c.syns is None) and not (c.complete and c.reset)
        for stats in (c.a2b, c.b2a):
            assert set(TCPTRACE_REQUIRED) <= set(stats) <= set(TCPTRACE_REQUIRED + TCPTRACE_OPTIONAL)
            for k, v in stats.items():
                assert v is None or isinstance(v, (int, float)), (k, v)
            assert stats["syn_pkts_sent"] + stats["fin_pkts_sent"] <= stats["total_packets"]
            # Not rexmt <= actual: reassembly.pcap b->a has 0 actual and 3 rexmt data pkts.
            assert stats["actual_data_pkts"] + stats["pure_acks_sent"] <= stats["total_packets"]
            assert stats["rexmt_data_pkts"] <= stats["total_packets"]
        assert set(c.a2b) == set(c.b2a)


@pytest.mark.parametrize("pcap", PCAPS)
def test_tcptrace_connections_are_tshark_tcp_conversations(pcap):
    """Endpoints (incl. IPv6 repair) and first/last packet times (UTC) agree with tshark."""
    conns = peers.tcptrace_connections(pcap)
    tcp_keys = {c.key for c in peers.tshark_conversations(pcap)["tcp"]}
    times = {r["frame.time_epoch"] for r in peers.tshark_packets(pcap)}
    unknown = [c.key for c in conns if c.key not in tcp_keys]
    assert bool(unknown) == (pcap in TCPTRACE_BOGUS_PORTS), unknown
    for c in conns:
        assert c.first_packet_ns in times and c.last_packet_ns in times


# --------------------------------------------------------------------------------- Zeek


def _zeek_id(row: dict) -> str:
    return f"{row['pcap']}/{row['test']}/{row['file']}"


def test_zeek_baselines_index_matches_files():
    listed = {_zeek_id(r) for r in ZEEK_ROWS}
    root = corpus.peers_dir() / "zeek"
    on_disk = {
        str(p.relative_to(root)) for p in root.glob("*/*/*")
        if p.name.split(".")[0] in ("conn", "quic", "ssl") and p.name.split(".")[1] == "log"
    }
    assert listed == on_disk
    with_baseline = {r["file"] for r in corpus.manifest() if r["has_zeek_baseline"]}
    assert with_baseline == {r["pcap"] for r in ZEEK_ROWS}


@pytest.mark.parametrize("row", ZEEK_ROWS, ids=_zeek_id)
def test_zeek_baseline_parses_with_its_columns(row):
    (z,) = [z for z in peers.zeek_logs(row["pcap"], row["log"]) if z.test == row["test"] and z.file == row["file"]]
    requested = peers.zeek_requested_columns(row["columns"])
    assert z.full == (requested is None)
    if requested is not None:
        assert z.columns == requested
    assert z.header == ("zeek" if z.full and not row["columns"].startswith("-m") else
                        "names" if row["columns"].startswith("-m") else "none")
    assert set(z.columns) == set(z.types) | set(z.missing_columns), "column without a type"
    assert z.rows, "empty baseline"
    assert len(set(z.columns)) == len(z.columns)
    for r in z.rows:
        assert list(r) == z.columns
        for col in z.missing_columns:
            assert r[col] is None
        if "uid" in r:
            assert r["uid"].startswith("C")
        for col, t in z.types.items():
            v = r[col]
            if t == "time":
                assert v is None or isinstance(v, float) or v == peers.CANONIFIED_TS
            elif t in ("count", "port", "int"):
                assert v is None or isinstance(v, int)
            elif t == "bool":
                assert v is None or isinstance(v, bool)
            elif t.startswith(("set[", "vector[")):
                assert v is None or isinstance(v, list)


def test_zeek_missing_columns_are_the_nonexistent_service_name():
    missing = {(z.file, tuple(z.missing_columns)) for p in {r["pcap"] for r in ZEEK_ROWS}
               for z in peers.zeek_logs(p, None) if z.missing_columns}
    assert missing and all(cols == ("service_name",) and f.startswith("quic.log") for f, cols in missing)


def test_zeek_full_conn_logs():
    readme_list = {
        "get.pcap", "wikipedia.pcap", "pppoe-over-qinq.pcap", "vxlan-encapsulated-http.pcap",
        "Teredo.pcap", "miss_end_data.pcap", "http-on-irc-port-missing-syn.pcapng",
        "pcapng-multi-interface.pcapng", "retry.pcap",
    }
    have = {p for p in PCAPS if peers.zeek_conn_full(p) is not None}
    assert have == readme_list
    conn_types = peers.zeek_column_types("conn")
    for pcap in have:
        rows = peers.zeek_conn_full(pcap)
        assert rows and all(list(r) == list(rows[0]) for r in rows)
        assert {"uid", "id.orig_h", "id.resp_p", "proto", "history", "orig_pkts"} <= set(rows[0])
        assert set(rows[0]) <= set(conn_types)


# Zeek connections tshark does not show as TCP/UDP conversations.
ZEEK_NOT_IN_TSHARK = {
    # Teredo on UDP 3797 <-> 83.170.1.38:32900 is not decapsulated by tshark (it stays UDP), so
    # Zeek's inner HTTP connection (tunnel_parents set) has no tshark TCP conversation.
    "Teredo.pcap": {(("2001:0:4137:9e50:8000:f12a:b9c8:2815", 1286), ("2001:4860:0:2001::68", 80))},
}


@pytest.mark.parametrize("pcap", sorted({r["pcap"] for r in ZEEK_ROWS if r["log"] == "conn"}))
def test_zeek_full_conn_endpoints_are_tshark_conversations(pcap):
    rows = peers.zeek_conn_full(pcap)
    if rows is None:
        return
    conv = peers.tshark_conversations(pcap)
    keys = {p: {c.key for c in conv[p]} for p in conv}
    unmatched = {
        key for r in rows if r["proto"] in keys
        and (key := peers.endpoint_key(r["id.orig_h"], r["id.orig_p"], r["id.resp_h"], r["id.resp_p"]))
        not in keys[r["proto"]]
    }
    assert unmatched == ZEEK_NOT_IN_TSHARK.get(pcap, set())

"""Flows across file rotation: a connection split over two files of one capture is one flow."""
from __future__ import annotations

import struct

from conftest import read_table
from support import corpus
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def split_pcap(src, dst_a, dst_b, at: int):
    """Write the first `at` records of a classic little-endian pcap to dst_a, the rest to dst_b."""
    data = src.read_bytes()
    header, pos, records = data[:24], 24, []
    while pos < len(data):
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        records.append(data[pos : pos + 16 + caplen])
        pos += 16 + caplen
    dst_a.write_bytes(header + b"".join(records[:at]))
    dst_b.write_bytes(header + b"".join(records[at:]))
    return len(records)


def _flows(run):
    return sorted(
        (f["client_ip"], f["client_port"], f["server_ip"], f["server_port"], f["c2s_packets"], f["s2c_packets"], f["c2s_bytes"], f["s2c_bytes"])
        for f in read_table(run.out, "flows")
    )


def test_connection_spanning_two_files_is_one_flow(tmp_path):
    src = corpus.pcap_path("1000-requests-one-dropped-response.pcap")
    whole = analyze([str(src)], tmp_path / "whole", AnalyzeOptions(progress=False))
    rot = tmp_path / "rotated"
    rot.mkdir()
    n = split_pcap(src, rot / "cap-000.pcap", rot / "cap-001.pcap", 2000)
    assert n == 4102
    split = analyze([str(rot)], tmp_path / "split", AnalyzeOptions(progress=False))
    assert [r.status for r in split.files] == ["ok", "ok"]
    assert _flows(split) == _flows(whole)
    flows = read_table(split.out, "flows")
    assert any(f["first_file"].endswith("cap-000.pcap") and f["last_file"].endswith("cap-001.pcap") for f in flows)
    # Every packet row of the split run points at a flow of that run.
    ids = {f["flow_id"] for f in flows}
    assert {p["flow_id"] for p in read_table(split.out, "packets")} <= ids


def test_files_named_in_any_order_are_read_in_time_order(tmp_path):
    src = corpus.pcap_path("1000-requests-one-dropped-response.pcap")
    rot = tmp_path / "r"
    rot.mkdir()
    split_pcap(src, rot / "b-late-name-first.pcap", rot / "a-early-name-second.pcap", 2000)
    run = analyze([str(rot / "a-early-name-second.pcap"), str(rot / "b-late-name-first.pcap")], tmp_path / "o", AnalyzeOptions(progress=False, capture_id="site1/eth0"))
    whole = analyze([str(src)], tmp_path / "w", AnalyzeOptions(progress=False))
    assert _flows(run) == _flows(whole)
    assert {f["capture_id"] for f in read_table(run.out, "flows")} == {"site1/eth0"}


def test_overlapping_captures_stay_apart(tmp_path):
    """get.pcap and handshake-reorder.pcap hold the same connection at the same time (one is a
    reordered copy): two captures of one moment are never merged into one flow."""
    run = analyze([str(corpus.pcap_path("get.pcap")), str(corpus.pcap_path("handshake-reorder.pcap"))], tmp_path / "o", AnalyzeOptions(progress=False))
    flows = read_table(run.out, "flows")
    assert len(flows) == 2
    assert len({f["capture_id"] for f in flows}) == 2
    assert all(f["c2s_packets"] + f["s2c_packets"] == 14 for f in flows)


def test_unrelated_files_in_one_directory_are_separate_captures(tmp_path):
    import shutil

    d = tmp_path / "d"
    d.mkdir()
    for n in ("get.pcap", "tls1.2.pcap"):
        shutil.copy(corpus.pcap_path(n), d / n)
    run = analyze([str(d)], tmp_path / "o", AnalyzeOptions(progress=False))
    assert {r.capture_id for r in run.files} == {"d/get.pcap", "d/tls1.2.pcap"}

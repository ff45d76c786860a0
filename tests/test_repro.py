"""The minimal reproductions in ``tests/repro`` (bundled, as the corpus): each test states
the right answer the repro's README gives and tshark agrees with.
"""
from __future__ import annotations


import pytest

from conftest import read_table
from support.corpus import repro_dir
from tailscope.jobs.run.local import AnalyzeOptions, analyze

def _run(tmp_path, name):
    path = repro_dir() / name
    if not path.is_file():
        raise FileNotFoundError(f"repro capture not found: {path} (the repros are required, as the corpus)")
    run = analyze([str(path)], tmp_path / "out", AnalyzeOptions(progress=False), argv=[])
    return run, read_table(run.out, "packets"), read_table(run.out, "flows")


def test_gre_outer_fragment_inner_length_from_the_inner_headers(tmp_path):
    """Frames 1 and 3 are first fragments of GRE datagrams (the second fragments, 2 and 4, are
    skipped as ip_fragment). The inner segments carry 1,900 bytes each (inner IP length 1,940;
    tshark after reassembly: Seq=1 Len=1900, Seq=1901 Len=1900, then the client's ACK 3801),
    of which 1,422 bytes of TCP payload are in the first fragment. The README's 2,920 is a slip
    of that file: tshark and the packet's own headers say 1,900."""
    run, packets, flows = _run(tmp_path, "gre_outer_fragment.pcap")
    assert run.files[0].skipped == {"ip_fragment": 2}
    by_frame = {p["frame"]: p for p in packets}
    assert [by_frame[f]["payload_len"] for f in (1, 3, 5)] == [1900, 1900, 0]
    assert all(by_frame[f]["encap"] == "gre" for f in (1, 3, 5))
    for p in packets:
        assert not {"lost_segment", "ack_lost_segment", "retransmission"} & set(p["tag_names"]), p
    (fl,) = flows
    assert fl["s2c_payload_bytes"] == 3800


def test_bare_rst_lifts_no_sequence_mark(tmp_path):
    """Frame 3 is the client's RST answering the server's stale ACK (frame 2) with that ACK's
    number, 900000 (RFC 9293 §3.10.7.1); the client then repeats its SYN (frame 4) and the new
    handshake carries a 100-byte request (frame 7) and a FIN (frame 11) from 1001: first
    transmissions. tshark agrees (it starts a new conversation at frame 5 and tags neither)."""
    run, packets, flows = _run(tmp_path, "rst_moves_mark.pcap")
    by_frame = {p["frame"]: p for p in packets}
    for f in (7, 11):
        tags = set(by_frame[f]["tag_names"])
        assert not {"retransmission", "retx_rto", "retx_fast", "spurious_retransmission"} & tags, (f, tags)
        assert by_frame[f]["retx_delay_ns"] is None, f
    # The one retransmission is the repeated SYN (frame 4), after its timer.
    assert {"syn_retransmission", "retx_rto"} <= set(by_frame[4]["tag_names"])
    assert sum(fl["retx_rto"] for fl in flows) == 1
    assert sum(fl["c2s_retx_packets"] for fl in flows) == 0
    # So the exchange is a query: the 100-byte request and the 200-byte response (frame 9).
    (q,) = read_table(run.out, "queries")
    assert (q["query_index"], q["request_bytes"], q["response_bytes"]) == (0, 100, 200)
    assert not q["request_retransmitted"]


def test_one_sided_window_scale_means_unscaled(tmp_path):
    """The client's SYN offers window scale 7, the server's SYN-ACK none: neither side scales
    (RFC 7323 §2.2). Frame 7 (9921+80) fills the client's 3,000-byte window acknowledged at 7001
    (tshark: [TCP Window Full]); the server then had the whole window in flight until the ACK
    of frame 8, which also closed the window."""
    run, packets, flows = _run(tmp_path, "window_full_noscale.pcap")
    by_frame = {p["frame"]: p for p in packets}
    assert "window_full" in by_frame[7]["tag_names"]
    assert [f for f, p in by_frame.items() if "window_full" in p["tag_names"]] == [7]
    assert by_frame[5]["window"] == 65535 and by_frame[5]["window_scaled"]
    assert by_frame[4]["window"] == 3000
    (fl,) = flows
    assert fl["rwnd_limited_ns"] > 0


def test_ack_sooner_than_a_round_trip_after_a_fast_retransmit_answered_the_original(tmp_path):
    """Frame 19 is the server's fast retransmit of segment 2 (after three duplicate ACKs); the
    client's ACK of the whole response (frame 24) reaches the capture 29.5 ms after it, on a
    200 ms path, with no D-SACK (no SACK) and no timestamp echo: it answered the held original,
    so the resend was spurious (issue 29 item 6; the README's row)."""
    run, packets, flows = _run(tmp_path, "held_original_fast_retx.pcap")
    by_frame = {p["frame"]: p for p in packets}
    assert by_frame[19]["retx_cause"] == "spurious", by_frame[19]
    (fl,) = flows
    assert (fl["retx_fast"], fl["retx_spurious"], fl["s2c_reordered"]) == (0, 1, 1)

"""The minimal reproductions in ``../shared/repro`` (read in place, as the corpus): each test states
the right answer the repro's README gives and tshark agrees with.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import read_table
from support.corpus import REPO_ROOT
from tailscope.jobs.local import AnalyzeOptions, analyze

REPRO = REPO_ROOT.parent / "shared" / "repro"


def _run(tmp_path, name):
    path = REPRO / name
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

"""Acceptance 1 of the foundation: every corpus capture is read without a crash, every frame is
accounted for, and timestamps are exactly what the capture says (tshark's frame.time_epoch)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from support import corpus, peers

NAMES = corpus.pcap_names()


def test_every_corpus_file_is_read(corpus_run):
    reports = {r.path.split("/")[-1]: r for r in corpus_run.files}
    assert sorted(reports) == sorted(NAMES)
    for name in NAMES:
        r = reports[name]
        assert r.status == "ok", (name, r.error)
        assert r.frames == corpus.manifest_row(name)["packets"], name
        assert r.decoded + sum(r.skipped.values()) == r.frames, name


def test_totals_balance(corpus_run):
    t = corpus_run.manifest["totals"]
    assert t["frames"] == sum(row["packets"] for row in corpus.manifest())
    assert t["frames"] == t["decoded"] + t["skipped"]
    assert t["skipped"] == sum(t["skipped_by_reason"].values())
    assert t["rows"]["packets"] == t["decoded"]


@pytest.mark.parametrize("name", NAMES)
def test_packet_rows_match_tshark_frames_and_times(name, corpus_packets):
    """Each decoded packet carries its frame number and the capture's exact timestamp."""
    theirs = {r["frame.number"]: r for r in peers.tshark_packets(name)}
    ours = corpus_packets.get(name, [])
    assert len({p["frame"] for p in ours}) == len(ours)
    for p in ours:
        assert p["frame"] in theirs, (name, p["frame"])
        assert p["ts"] == theirs[p["frame"]]["frame.time_epoch"], (name, p["frame"])


# Frames tshark decodes as TCP/UDP that we skip, with the reason (frame numbers from tshark).
EXPECTED_SKIPS = {
    # "Bogus TCP header length (0, must be at least 20)": no payload boundary can be trusted.
    ("reasm_crash_anon.pcapng", 95): "malformed_tcp_header",
}


@pytest.mark.parametrize("name", NAMES)
def test_tcp_udp_frames_agree_with_tshark(name, corpus_packets):
    """A frame tshark shows with TCP or UDP ports is one we decode, except the listed skips and
    ICMP errors (tshark fills ports from the quoted packet inside an ICMP error; those frames
    are ICMP, which we skip as not_tcp_udp)."""
    rows = peers.tshark_packets(name)
    ours = {p["frame"] for p in corpus_packets.get(name, [])}
    for r in rows:
        has_ports = r["tcp.srcport"] is not None or r["udp.srcport"] is not None
        n = r["frame.number"]
        if not has_ports or n in ours:
            continue
        if (name, n) in EXPECTED_SKIPS:
            continue
        icmp = subprocess.run(
            ["tshark", "-r", str(corpus.pcap_path(name)), "-Y", f"frame.number=={n} && (icmp || icmpv6)", "-T", "fields", "-e", "frame.number"],
            capture_output=True, text=True, timeout=60,
        ).stdout.strip()
        assert icmp == str(n), f"{name} frame {n}: tshark decodes TCP/UDP, we skipped it"


def test_cli_prints_skip_reasons_per_file(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "tailscope", "analyze", str(corpus.corpus_dir() / "pcaps"), "--out", str(tmp_path / "ds"), "--no-checksums"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for name in NAMES:
        assert any(name[-40:] in line for line in lines), name
    # wikipedia.pcap has 10 non-IP frames (ARP and others): the reason is named on its line.
    wiki = next(line for line in lines if "wikipedia.pcap" in line)
    assert "not_ip=10" in wiki
    assert "frames =" in lines[-1] and "decoded" in lines[-1]

"""`tailscope plot`: a TCP flow's time-sequence graph and RTT plot, as PNG and SVG."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.jobs.analytics.plot import PlotError, load_flow

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plot") / "ds"
    assert tailscope("analyze", SAMPLES / "policing.pcap", "--out", out, "-q").returncode == 0
    return out


def retransmitting_flow(dataset) -> int:
    r = tailscope("conn", dataset, "--where", "retx > 0", "-c", "flow_id", "-f", "csv")
    return int(r.stdout.splitlines()[1])


def test_png_and_svg(dataset, tmp_path):
    flow = retransmitting_flow(dataset)
    png, svg = tmp_path / "f.png", tmp_path / "f.svg"
    assert tailscope("plot", dataset, "--flow", flow, "-o", png).returncode == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert tailscope("plot", dataset, "--flow", flow, "-o", svg).returncode == 0
    text = svg.read_text()
    # the legend names what is drawn: retransmissions by cause, ACK, window, SACK, RTT
    for label in ("retransmission: fast_retransmit", "ACK + receive window", "SACK blocks", "RTT of server data"):
        assert label in text, label
    # one time-sequence graph per direction that sent data (the client's request bytes too)
    assert "s2c: relative sequence number" in text and "c2s: relative sequence number" in text


def test_the_flow_loaded_is_the_flows_packets(dataset):
    flow = retransmitting_flow(dataset)
    f = load_flow(dataset, flow)
    assert f.rows and any(r["retx_cause"] for r in f.rows) and any(r["sack"] for r in f.rows)
    with pytest.raises(PlotError, match="no flow 12345"):
        load_flow(dataset, 12345)


def test_bad_requests_say_why(dataset, tmp_path):
    r = tailscope("plot", dataset, "--flow", "12345", "-o", tmp_path / "x.png")
    assert r.returncode == 2 and "no flow 12345" in r.stderr
    r = tailscope("plot", dataset, "--flow", "1", "-o", tmp_path / "x.pdf")
    assert r.returncode == 2 and ".png or .svg" in r.stderr

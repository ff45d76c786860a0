"""`tailscope plot`: a TCP flow's time-sequence graph and RTT plot, as PNG, SVG and HTML (issue 30:
the y-axis on the data, retransmissions marked R by cause, timeout gaps labelled, one direction by
default, a zoomable self-contained HTML page)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.jobs.analytics.plot import PlotError, figure, load_flow

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
    for label in ("R retransmission: fast_retransmit", "ACK + receive window", "SACK blocks", "RTT of server data"):
        assert label in text, label
    # one direction, as --help says: the one that sent more (the server's response here)
    assert "s2c: relative sequence number" in text and "c2s: relative sequence number" not in text
    assert tailscope("plot", dataset, "--flow", flow, "--direction", "c2s", "-o", svg).returncode == 0
    text = svg.read_text()
    assert "c2s: relative sequence number" in text and "s2c: relative sequence number" not in text


def test_y_axis_spans_the_data(dataset):
    f = load_flow(dataset, retransmitting_flow(dataset))
    top = max(r["rel_seq"] + r["payload_len"] for r in f.rows if r["direction"] == "s2c" and r["payload_len"])
    window = max(r["rel_ack"] + r["window"] for r in f.rows if r["direction"] == "c2s" and r["rel_ack"] is not None)
    assert window > 1.1 * top, "the premise: the window line reaches far above the data"
    fig = figure(f)
    low, high = fig.axes[0].get_ylim()
    assert top <= high <= 1.05 * top and -0.05 * top <= low <= 0


def marks(fig) -> dict[str, int]:
    """The R markers drawn, by cause (their gid), as points."""
    return {c.get_gid().removeprefix("retx-"): len(c.get_offsets()) for c in fig.axes[0].collections
            if (c.get_gid() or "").startswith("retx-")}


def test_every_retransmission_is_marked_by_cause(dataset):
    f = load_flow(dataset, retransmitting_flow(dataset))
    expected = {}
    for r in f.rows:
        if r["direction"] == "s2c" and r["payload_len"] and r["retx_cause"]:
            expected[r["retx_cause"]] = expected.get(r["retx_cause"], 0) + 1
    assert expected and marks(figure(f)) == expected


@pytest.fixture(scope="module")
def rto_dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plot") / "rto"
    assert tailscope("analyze", SAMPLES / "tail_loss.pcap", "--out", out, "-q").returncode == 0
    return out


def test_timeout_gaps_are_labelled(rto_dataset, tmp_path):
    r = tailscope("conn", rto_dataset, "--where", "retx_rto > 0", "-c", "flow_id", "-f", "csv")
    (flow,) = map(int, r.stdout.splitlines()[1:])
    f = load_flow(rto_dataset, flow)
    # the sample's premise: two tail losses, each resent by the RTO after ~250 ms of silence
    rows = f.rows
    silences = [(rows[i]["ts_ns"] - rows[i - 1]["ts_ns"]) / 1e9 for i, r in enumerate(rows) if r["retx_cause"] == "rto"]
    assert len(silences) == 2 and all(0.2 < s < 0.3 for s in silences)
    fig = figure(f)
    labels = sorted(t.get_text() for t in fig.axes[0].texts)
    assert labels == ["RTO 0.25 s", "RTO 0.25 s"]
    assert marks(fig) == {"rto": 2}


def test_html_zooms_without_network(dataset, tmp_path):
    page = tmp_path / "f.html"
    r = tailscope("plot", dataset, "--flow", retransmitting_flow(dataset), "-o", page)
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "R retransmission: fast_retransmit" in text
    assert "addEventListener(\"wheel\"" in text and "viewBox" in text
    # self-contained: nothing fetched (the only URLs are the SVG namespaces)
    for fetch in ("<script src", "<link", "@import", "url(http", "href=\"http"):
        assert fetch not in text, fetch


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
    assert r.returncode == 2 and ".png, .svg or .html" in r.stderr

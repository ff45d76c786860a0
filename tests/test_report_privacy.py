"""The report names a flow's client by its network (/24, /48) unless --show-clients (issue 19)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=300)


def test_report_masks_clients_unless_asked(tmp_path):
    ds = tmp_path / "ds"
    assert tailscope("analyze", SAMPLES / "mobile_mixed.pcap", SAMPLES / "clean_ipv6.pcap", "--out", ds, "-q").returncode == 0
    clients = {c for c in pq.read_table(ds / "flows", columns=["client_ip"]).column("client_ip").to_pylist() if c}
    assert clients
    masked = tailscope("report", ds, "--out", tmp_path / "masked", "--top", "50")
    assert masked.returncode == 0, masked.stderr
    text = "".join(p.read_text() for p in (tmp_path / "masked").iterdir() if p.suffix in (".html", ".md", ".geojson"))
    assert "client network" in text
    assert not [c for c in clients if c in text]
    shown = tailscope("report", ds, "--out", tmp_path / "shown", "--top", "50", "--show-clients")
    assert shown.returncode == 0, shown.stderr
    html = "".join(p.read_text() for p in (tmp_path / "shown").iterdir() if p.suffix == ".html")
    assert [c for c in clients if c in html]

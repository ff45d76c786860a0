"""`analyze --filter/--since/--until`: the packets tcpdump -r FILE EXPR shows, the frames left out
counted as skipped (filtered, outside_time_window), a bad expression a usage error (issue 17)."""
from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import sys

import pytest

from support import corpus
from tailscope.jobs.run.local import AnalyzeOptions, SelectionError, analyze

CASES = [
    ("wikipedia.pcap", "tcp port 80"),
    ("wikipedia.pcap", "udp and not port 5353"),
    ("wikipedia.pcap", "host 141.142.220.118 and (tcp[tcpflags] & tcp-syn != 0)"),
    ("http-vlan-0.pcap", "vlan and tcp[tcpflags] & tcp-push != 0"),
    ("ipv6-http-atomic-frag.pcap", "ip6 and src port 80"),
    ("get.pcap", "tcp[tcpflags] & tcp-fin != 0"),
]


def tcpdump_count(pcap, expr) -> int:
    r = subprocess.run(["tcpdump", "-n", "-r", str(pcap), expr], capture_output=True, text=True, check=True)
    return len(r.stdout.splitlines())


@pytest.mark.skipif(not shutil.which("tcpdump"), reason="tcpdump (scripts/install-lab-deps.sh)")
@pytest.mark.parametrize("name, expr", CASES)
def test_filter_keeps_what_tcpdump_shows(name, expr, tmp_path):
    pcap = corpus.pcap_path(name)
    run = analyze([str(pcap)], tmp_path / "ds", AnalyzeOptions(progress=False, bpf_filter=expr))
    f = run.files[0]
    want = tcpdump_count(pcap, expr)
    assert 0 < want < f.frames, "the expression must keep some frames and drop some"
    assert f.decoded == want
    assert f.skipped.get("filtered", 0) == f.frames - want
    assert f.frames == f.decoded + sum(f.skipped.values())


def test_time_window(tmp_path):
    pcap = corpus.pcap_path("wikipedia.pcap")
    whole = analyze([str(pcap)], tmp_path / "all", AnalyzeOptions(progress=False)).files[0]
    first, last = whole.first_ts_ns, whole.last_ts_ns
    mid = first + (last - first) // 2
    a = analyze([str(pcap)], tmp_path / "a", AnalyzeOptions(progress=False, until_ns=mid)).files[0]
    b = analyze([str(pcap)], tmp_path / "b", AnalyzeOptions(progress=False, since_ns=mid)).files[0]
    assert a.decoded + b.decoded == whole.decoded and a.decoded > 0 and b.decoded > 0
    assert a.frames == whole.frames == a.decoded + sum(a.skipped.values()) and a.skipped["outside_time_window"] > 0


def test_cli_parses_times_and_rejects_bad_expressions(tmp_path):
    pcap = corpus.pcap_path("wikipedia.pcap")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(pcap), "--out", str(tmp_path / "ds"),
                               "-q", *args], capture_output=True, text=True)

    start = dt.datetime(2011, 3, 18, 19, 6, 8, tzinfo=dt.timezone.utc)  # within the capture
    assert cli("--since", start.isoformat()).returncode == 0
    for bad in (["--filter", "tcp port"], ["--since", "yesterday"], ["--since", "2011-03-19", "--until", "2011-03-18"]):
        r = cli(*bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (bad, r.stderr)
    with pytest.raises(SelectionError, match="syntax error"):
        analyze([str(pcap)], tmp_path / "x", AnalyzeOptions(progress=False, bpf_filter="port port"))

"""Bounded memory on generated worst cases, through `tailscope analyze` in a child process whose
own peak RSS is measured (os.wait4 from a small intermediate process, so the child does not
inherit pytest's high-water mark; benchmarks/README.md, "How peak RSS is measured").

- A SYN flood: one million distinct 4-tuples, all open at once. The flow table limit evicts,
  each eviction is counted in the manifest and shows up as a flows row marked 'evicted', and
  the peak stays under the cap. Without a limit below a million the same run peaks at ~4.2 GiB.
- A single huge flow: 1 GiB of payload (1.1 M packets, only headers captured; tailscope counts
  bytes from the IP header): the per-flow analysis state is bounded.
- A single long-lived flow of many request/response exchanges: its finished queries are written
  while it lives, so memory does not grow with the exchanges. Queries whose row the flow's
  verdicts may still change (an RTT sample of 20 ms or more, or lost server data; docs/queries.md)
  are held until the flow ends: on a slower path memory still grows (known, reported; xfail).

Figures on the development VM are in benchmarks/README.md ("Memory on hostile traces").
"""
from __future__ import annotations

import json
import subprocess
import sys

import duckdb
import pytest
from support import pcapgen

MIB = 1 << 20
# The cap the issue asks for (the benchmark's peak RSS target).
CAP_MIB = 256
# The flow table limit for the SYN flood. The peak is ~165 MiB plus ~4.2 KiB per flow the table
# may hold (a SYN-only TCP flow holds ~2.5 KiB of analysis state while live, and all live flows
# end at once at the end of the capture): 204 MiB at 10,000, 235 MiB at 20,000, 1,002 MiB at
# 200,000 on the development VM (benchmarks/README.md). 10,000 leaves a margin for other
# allocators and Python builds.
SYN_FLOOD_MAX_FLOWS = 10_000
SYN_FLOOD_FLOWS = 1_000_000

def run_measured(args: list[str], timeout: float = 120) -> tuple[int, str, str, int]:
    """Run ``tailscope *args``; (exit code, stdout, stderr, peak RSS of that process in bytes)."""
    wrapper = (
        "import json, os, sys\n"
        "r, w = os.pipe(); e_r, e_w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.dup2(w, 1); os.dup2(e_w, 2); os.close(r); os.close(e_r)\n"
        "    os.execv(sys.argv[1], sys.argv[1:])\n"
        "os.close(w); os.close(e_w)\n"
        "out = b''.join(iter(lambda: os.read(r, 1 << 16), b''))\n"
        "err = b''.join(iter(lambda: os.read(e_r, 1 << 16), b''))\n"
        "_, status, ru = os.wait4(pid, 0)\n"
        "print(json.dumps({'rc': os.waitstatus_to_exitcode(status), 'maxrss_kb': ru.ru_maxrss,\n"
        "                  'out': out.decode(errors='replace'), 'err': err.decode(errors='replace')}))\n"
    )
    cmd = [sys.executable, "-I", "-S", "-c", wrapper, sys.executable, "-m", "tailscope", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    return res["rc"], res["out"], res["err"], res["maxrss_kb"] * 1024


def analyze_measured(trace, out, *extra: str) -> tuple[dict, int]:
    rc, stdout, stderr, peak = run_measured(["analyze", str(trace), "--out", str(out), "--json", "--no-checksums", *extra])
    assert rc == 0, stderr
    return json.loads(stdout), peak


def count_flows(out, where: str = "") -> int:
    return duckdb.sql(f"SELECT count(*) FROM read_parquet('{out}/flows/*/*.parquet', hive_partitioning=true) {where}").fetchall()[0][0]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    return {
        "syn": pcapgen.write_syn_flood(d / "syn-flood.pcap", SYN_FLOOD_FLOWS),
        "bulk": pcapgen.write_bulk_flow(d / "one-huge-flow.pcap", 1 << 30),
    }


def test_syn_flood_is_bounded_by_the_flow_table(traces, tmp_path):
    manifest, peak = analyze_measured(traces["syn"], tmp_path / "ds", "--max-flows", str(SYN_FLOOD_MAX_FLOWS))
    t = manifest["totals"]
    assert (t["frames"], t["decoded"], t["skipped"]) == (SYN_FLOOD_FLOWS, SYN_FLOOD_FLOWS, 0)
    assert t["flows"] == SYN_FLOOD_FLOWS
    # every flow past the limit evicted the least recently active one; counted, and kept
    assert t["flows_evicted"] == SYN_FLOOD_FLOWS - SYN_FLOOD_MAX_FLOWS
    assert count_flows(tmp_path / "ds") == SYN_FLOOD_FLOWS
    assert count_flows(tmp_path / "ds", "WHERE end_reason = 'evicted'") == t["flows_evicted"]
    assert count_flows(tmp_path / "ds", "WHERE end_reason = 'end_of_capture'") == SYN_FLOOD_MAX_FLOWS
    assert peak < CAP_MIB * MIB, f"peak RSS {peak / MIB:.0f} MiB with --max-flows {SYN_FLOOD_MAX_FLOWS}"


def test_single_huge_flow_is_bounded(traces, tmp_path):
    manifest, peak = analyze_measured(traces["bulk"], tmp_path / "ds")
    t = manifest["totals"]
    assert t["flows"] == 1 and t["flows_evicted"] == 0 and t["frames"] == t["decoded"]
    row = duckdb.sql(
        f"SELECT end_reason, s2c_payload_bytes, c2s_packets + s2c_packets FROM read_parquet('{tmp_path}/ds/flows/*/*.parquet')"
    ).fetchall()[0]
    assert row == ("fin", 1 << 30, t["decoded"])
    assert peak < CAP_MIB * MIB, f"peak RSS {peak / MIB:.0f} MiB"


def _chatty_peaks(tmp_path, ack_delay_ns: int) -> tuple[int, int]:
    # Both traces start at midnight UTC, so neither crosses into another day: the big one (3.6 h
    # at 50 ms) used to start at 22:13 and cross midnight where the small one did not, and the
    # writer's split of a batch over two dates then weighed on the difference the test measures.
    start = 1_699_920_000 * 10**9
    small = pcapgen.write_chatty_flow(tmp_path / "chatty-small.pcap", 50_000, start_ns=start, ack_delay_ns=ack_delay_ns)
    big = pcapgen.write_chatty_flow(tmp_path / "chatty-big.pcap", 250_000, start_ns=start, ack_delay_ns=ack_delay_ns)
    manifest, peak_small = analyze_measured(small, tmp_path / "ds-small")
    small.unlink()
    manifest_big, peak_big = analyze_measured(big, tmp_path / "ds-big")
    assert manifest["totals"]["rows"]["queries"] == 50_000
    assert manifest_big["totals"]["rows"]["queries"] == 250_000
    return peak_small, peak_big, manifest_big["totals"]


def test_long_lived_chatty_flow_is_bounded(tmp_path):
    peak_small, peak_big, totals = _chatty_peaks(tmp_path, 1_000_000)
    # five times the exchanges in one flow must not cost more memory
    assert peak_big - peak_small < 32 * MIB, f"{peak_small / MIB:.0f} → {peak_big / MIB:.0f} MiB"
    assert totals["queries_written_unsettled"] == 0, "fast exchanges settle at once"


def test_long_lived_chatty_flow_on_a_slow_path_is_bounded(tmp_path):
    # 50 ms RTT samples: every exchange may still be charged bufferbloat when the flow ends, so
    # all but the newest MAX_HELD_QUERIES (1,024) are written without waiting, and counted.
    peak_small, peak_big, totals = _chatty_peaks(tmp_path, 50_000_000)
    assert peak_big - peak_small < 32 * MIB, f"{peak_small / MIB:.0f} → {peak_big / MIB:.0f} MiB"
    assert totals["queries_written_unsettled"] >= 250_000 - 1024 - 1

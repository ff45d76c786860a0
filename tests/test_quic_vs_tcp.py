"""QUIC vs TCP (sql/marts/070_quic_vs_tcp.sql, issue 18) on a dataset holding both: real aioquic
connections in simulated time with their key log (queries per request stream), synthetic TCP
connections with a heavier tail, and a QUIC attempt that fell back to TCP
(tests/support/transport_mix.py). Every figure of mart_quic_vs_tcp is recomputed here from the
Parquet files with pyarrow and Python (not the views); the bootstrap interval is recomputed by an
independent implementation of the same draw and checked against plain resampling; `tailscope
stats --table quic_vs_tcp` gives the mart's numbers."""
from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

pytest.importorskip("aioquic")
pytest.importorskip("h3")
np = pytest.importorskip("numpy")

from test_marts import iso_week, nearest_rank, table

from support import transport_mix
from support import corpus
from support.duck import rows
from support import duck
from tailscope.jobs.analytics.stats import Slice, compute_stats, parse_csv_sections, render

pytestmark = pytest.mark.xdist_group("quic_vs_tcp")

LOSS = {"syn_loss", "synack_loss", "tail_loss", "rto", "fast_retransmit", "tlp", "spurious_retransmission",
        "retransmission", "policing"}
RESAMPLES, SEED = 2000, 20261126


@pytest.fixture(scope="module")
def mix(tmp_path_factory) -> tuple[dict, Path]:
    tmp = tmp_path_factory.mktemp("quic-vs-tcp")
    info = transport_mix.build(tmp / "mix")
    return info, transport_mix.analyze(info, tmp / "ds")


@pytest.fixture(scope="module")
def con(mix):
    c = duck.connect(mix[1])
    yield c
    c.close()


def is_loss(sig: str) -> bool:
    return sig in LOSS or (sig.startswith("quic_") and sig not in ("quic_reordering", "quic_migration"))


class Truth:
    """Per transport and slice, from the Parquet files."""

    GRAINS = {"week": (), "carrier": ("carrier",), "hexagon": ("h3_cell",), "network_type": ("network_type",)}

    def __init__(self, ds: Path):
        self.flows = {f["flow_id"]: f for f in table(ds, "flows")}
        self.queries = []
        for q in table(ds, "queries"):
            f = self.flows.get(q["flow_id"])
            if not q["complete"] or q["latency_ns"] is None or f is None:
                continue
            setup = (q["setup_ns"] or 0) if q["query_index"] == 0 else 0
            sigs = set(q["signatures"] or []) | {d["signature"] for d in q["delays"] or []}
            loss_delay = sum(d["delay_ns"] for d in q["delays"] or [] if is_loss(d["signature"]))
            self.queries.append({"lat": q["latency_ns"] + setup, "protocol": f["protocol"], "flow": f,
                                 "loss": any(is_loss(s) for s in sigs), "loss_delay": loss_delay})

    @staticmethod
    def key(f: dict, grain: str) -> tuple:
        return (iso_week(f["start"]),) + tuple(f[c] or "unknown" for c in Truth.GRAINS[grain])

    def latencies(self, grain: str) -> dict[tuple, dict[str, list]]:
        out: dict = defaultdict(lambda: {"quic": [], "tcp": []})
        for q in self.queries:
            out[self.key(q["flow"], grain)][q["protocol"]].append(q)
        return out


def mart_key(r: dict, grain: str) -> tuple:
    return (r["week"],) + tuple(r[c] for c in Truth.GRAINS[grain])


@pytest.fixture(scope="module")
def truth(mix) -> Truth:
    return Truth(mix[1])


@pytest.mark.parametrize("grain", list(Truth.GRAINS))
def test_latency_and_tail_figures(con, truth, grain):
    mart = {mart_key(r, grain): r for r in rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = ?", [grain])}
    want = truth.latencies(grain)
    assert set(mart) == set(want)
    for key, by_proto in want.items():
        m = mart[key]
        for proto, qs in by_proto.items():
            lat = [q["lat"] for q in qs]
            assert m[f"{proto}_queries"] == len(qs), key
            for p in (50, 95, 99):
                got = m[f"{proto}_p{p}_ms"]
                assert (got is None) == (not lat)
                if lat:
                    assert got == pytest.approx(nearest_rank(lat, p / 100) / 1e6, abs=1e-6), (key, proto, p)
            if lat:  # the p99 tail: queries at or above the p99
                p99 = nearest_rank(lat, 0.99)
                tail = [q for q in qs if q["lat"] >= p99]
                assert m[f"{proto}_tail_queries"] == len(tail)
                assert m[f"{proto}_tail_loss_rate"] == pytest.approx(sum(q["loss"] for q in tail) / len(tail))
                assert m[f"{proto}_tail_loss_charged_ratio"] == pytest.approx(
                    sum(q["loss_delay"] for q in tail) / sum(q["lat"] for q in tail))
        if by_proto["quic"] and by_proto["tcp"]:
            red = 1 - nearest_rank([q["lat"] for q in by_proto["quic"]], 0.99) / nearest_rank([q["lat"] for q in by_proto["tcp"]], 0.99)
            assert m["tail_reduction"] == pytest.approx(red, abs=1e-9)
        assert m["small_sample"] == (min(len(by_proto["quic"]), len(by_proto["tcp"])) < m["small_sample_below"])


def test_the_dataset_shows_both_transports_and_loss(con, truth):
    (week,) = rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = 'week'")
    assert week["quic_queries"] > 500 and week["tcp_queries"] > 500, week
    assert not week["small_sample"]
    assert week["quic_tail_loss_rate"] > 0, "the lossy QUIC connections reach the p99 tail"
    assert week["tail_reduction"] > 0.3, "the TCP connections' think times have the heavier tail"
    small = rows(con, "SELECT carrier, small_sample FROM mart_quic_vs_tcp WHERE grain = 'carrier'")
    assert small and all(r["small_sample"] for r in small), "each carrier has under 500 queries per transport"


def test_small_sample_threshold_is_stated_once(con):
    assert rows(con, "SELECT quic_vs_tcp_min_queries() AS n")[0]["n"] == 500
    assert {r["small_sample_below"] for r in rows(con, "SELECT small_sample_below FROM mart_quic_vs_tcp")} == {500}


@pytest.mark.parametrize("grain", ["week", "carrier", "hexagon", "network_type"])
def test_flows_handshakes_fallback_and_sessions(con, truth, mix, grain):
    info, _ = mix
    mart = {mart_key(r, grain): r for r in rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = ?", [grain])}
    flows: dict = defaultdict(list)
    for f in truth.flows.values():
        flows[Truth.key(f, grain)].append(f)
    # sessions: a client's connections to one server address while each starts within 30 s of the
    # latest end so far (web ports for TCP)
    conns = sorted((f for f in truth.flows.values() if f["protocol"] == "quic" or f["server_port"] in (80, 443, 8443)),
                   key=lambda f: (f["client_ip"], f["server_ip"], f["start"], f["flow_id"]))
    sessions, last = [], {}
    for f in conns:
        k = (f["client_ip"], f["server_ip"])
        if k in last and f["start"] <= last[k][1] + 30 * 10**9:
            last[k] = (last[k][0], max(last[k][1], f["end"]))
            last[k][0].append(f)
        else:
            last[k] = ([f], f["end"])
            sessions.append(last[k][0])
    for key, fs in flows.items():
        m = mart[key]
        for proto, col in (("quic", "quic_handshake_rtt_ns"), ("tcp", "handshake_rtt_ns")):
            mine = [f for f in fs if f["protocol"] == proto]
            assert m[f"{proto}_flows"] == len(mine)
            hs = [f[col] for f in mine if f[col] is not None]
            got = m[f"{proto}_handshake_rtt_p50_ms"]
            assert (got is None) == (not hs) and (not hs or got == pytest.approx(nearest_rank(hs, 0.5) / 1e6))
        quic = [f for f in fs if f["protocol"] == "quic"]
        fell_back = [f for f in quic if f["client_ip"] in info["fallback_clients"]]
        assert (m["quic_attempts"], m["quic_ended_on_tcp"]) == (len(quic), len(fell_back)), key
        mine = [s for s in sessions if Truth.key(s[0], grain) == key]
        mixed = [s for s in mine if len({f["protocol"] for f in s}) == 2]
        assert (m["sessions"], m["mixed_sessions"]) == (len(mine), len(mixed)), key
    (week,) = rows(con, "SELECT fallback_share, mixed_session_share FROM mart_quic_vs_tcp WHERE grain = 'week'")
    assert week["fallback_share"] == pytest.approx(1 / info["quic_connections"])
    assert 0 < week["mixed_session_share"] < 1


# ----------------------------------------------------------------------------------------------
# the bootstrap interval


def lowbias32(x: int) -> int:
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def uniform(seed: int, b: int, stream: int) -> float:
    return (lowbias32(lowbias32((seed * 1000003 + b * 2 + stream) % 2**32)) + 0.5) / 2**32


def resampled_p99(x: list[int]):
    """The p99 of a resample of x as a function of a uniform u: the smallest x_j with
    P(p99* <= x_j) = P(Bin(n, (n-j)/n) <= n - k) >= u, the binomials from exact integer
    coefficients over every rank (the SQL uses lgamma over the top ranks)."""
    x = sorted(x)
    n = len(x)
    m = n - math.ceil(0.99 * n)
    cdf = [sum(math.comb(n, i) * ((n - j) / n) ** i * (j / n) ** (n - i) for i in range(m + 1)) for j in range(1, n + 1)]
    cdf = list(itertools.accumulate(cdf, max))
    return lambda u: x[min(bisect.bisect_left(cdf, u), n - 1)]


def disc(values: list[float], q: float) -> float:
    return nearest_rank(values, q)


@pytest.mark.parametrize("grain", ["week", "carrier"])
def test_bootstrap_interval_is_the_documented_draw(con, truth, grain):
    mart = {mart_key(r, grain): r for r in rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = ?", [grain])}
    for key, by_proto in truth.latencies(grain).items():
        quic = sorted(q["lat"] for q in by_proto["quic"])
        tcp = sorted(q["lat"] for q in by_proto["tcp"])
        draw_quic, draw_tcp = resampled_p99(quic), resampled_p99(tcp)
        r = [1 - draw_quic(uniform(SEED, b, 1)) / draw_tcp(uniform(SEED, b, 0)) for b in range(RESAMPLES)]
        m = mart[key]
        assert m["tail_reduction_low"] == pytest.approx(disc(r, 0.025), abs=1e-12), key
        assert m["tail_reduction_high"] == pytest.approx(disc(r, 0.975), abs=1e-12), key
        assert m["tail_reduction_low"] <= m["tail_reduction"] <= m["tail_reduction_high"], key


def test_bootstrap_matches_plain_resampling(truth):
    """The exact draw gives each transport's resampled p99 the distribution that resampling the
    queries with replacement (20,000 times, numpy) gives: Kolmogorov distance under 0.05."""
    rng = np.random.default_rng(7)
    (week,) = truth.latencies("week").values()
    for proto, stream in (("quic", 1), ("tcp", 0)):
        x = np.sort(np.array([q["lat"] for q in week[proto]]))
        n, k = len(x), math.ceil(0.99 * len(x))
        plain = np.concatenate([np.sort(x[rng.integers(0, n, size=(2000, n))], axis=1)[:, k - 1] for _ in range(10)])
        draw = resampled_p99(list(x))
        exact = np.array([draw(uniform(SEED, b, stream)) for b in range(RESAMPLES)])
        values = np.unique(np.concatenate([plain, exact]))
        ks = max(abs((plain <= v).mean() - (exact <= v).mean()) for v in values)
        assert ks < 0.05, (proto, ks)


def test_bootstrap_is_deterministic(con, mix):
    from tailscope.jobs.analytics.db import build

    first = rows(con, "SELECT grain, carrier, h3_cell, network_type, tail_reduction_low, tail_reduction_high "
                      "FROM mart_quic_vs_tcp ORDER BY ALL")
    other = duckdb.connect(str(build(mix[1], mix[1].parent / "again.duckdb")), read_only=True)
    other.execute("SET threads = 1")
    again = rows(other, "SELECT grain, carrier, h3_cell, network_type, tail_reduction_low, tail_reduction_high "
                        "FROM mart_quic_vs_tcp ORDER BY ALL")
    assert first == again and all(r["tail_reduction_low"] is not None for r in first)
    # the uniforms are the documented hash (recomputed above in Python)
    got = [r["u"] for r in rows(other, "SELECT bootstrap_uniform(20261126, b, s) AS u FROM range(5) t(b), range(2) v(s) ORDER BY b, s")]
    assert got == [uniform(SEED, b, s) for b in range(5) for s in range(2)]
    us = [r["u"] for r in rows(other, "SELECT bootstrap_uniform(1, b, 0) AS u FROM range(20000) t(b)")]
    assert 0 < min(us) and max(us) < 1 and abs(sum(us) / len(us) - 0.5) < 0.01  # spread over (0, 1)
    other.close()


# ----------------------------------------------------------------------------------------------
# stats


@pytest.mark.parametrize("by", [None, "carrier", "hexagon", "network_type"])
def test_stats_table_is_the_mart(con, mix, by):
    grain = {None: "week", "hexagon": "hexagon"}.get(by, by)
    mart = {mart_key(r, grain)[1:]: r for r in rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = ?", [grain])}
    got = compute_stats(mix[1], Slice(week=[transport_mix.WEEK]), by=by)["quic_vs_tcp"]
    assert len(got) == len(mart)
    for r in got:
        m = mart[() if by is None else (r["group"],)]
        for k, v in r.items():
            if k == "group":
                continue
            if isinstance(v, float):
                assert v == pytest.approx(m[k], abs=1e-3), k
            else:
                assert v == m[k], k


def test_stats_cli_prints_it(mix, capsys):
    from tailscope.cli import main

    assert main(["stats", str(mix[1]), "--table", "quic_vs_tcp", "--by", "carrier"]) == 0
    out = capsys.readouterr().out
    assert "QUIC tail reduction" in out and "small sample" in out and "Northwind Mobile" in out
    tables = compute_stats(mix[1])
    csv = parse_csv_sections(render(tables, "csv"))
    assert len(csv["quic_vs_tcp"]) == 1 and float(csv["quic_vs_tcp"][0]["tail_reduction"]) == pytest.approx(
        tables["quic_vs_tcp"][0]["tail_reduction"])



# ----------------------------------------------------------------------------------------------
# the report


def test_report_section_has_the_stats_numbers(mix, tmp_path):
    from tailscope.jobs.analytics.report import write_report
    from tailscope.jobs.analytics.stats import fmt_reduction

    paths = write_report(mix[1], tmp_path / "r")
    md = paths.markdown.read_text()
    section = md.split("## QUIC vs TCP", 1)[1].split("\n## ", 1)[0]
    html = paths.html.read_text()
    for by, label in ((None, "all traffic"), ("carrier", "carrier: "), ("network_type", "network type: ")):
        for r in compute_stats(mix[1], Slice(week=[transport_mix.WEEK]), by=by)["quic_vs_tcp"]:
            name = label if by is None else label + r["group"]
            line = next(ln for ln in section.splitlines() if ln.startswith(f"| {name} |"))
            assert f"| {r['quic_queries']} / {r['tcp_queries']} |" in line
            assert f"| {fmt_reduction(r)} |" in line and ("small sample" in line) == r["small_sample"]
            assert fmt_reduction(r) in html
    (week,) = compute_stats(mix[1], Slice(week=[transport_mix.WEEK]))["quic_vs_tcp"]
    assert f"a QUIC tail reduction of {fmt_reduction(week)}" in section
    assert "fewer than 500 queries on either side" in section
    assert 'id="quic-vs-tcp"' in html and "QUIC tail reduction, 1 − p99(QUIC) / p99(TCP)" in html


def test_report_says_when_there_is_no_quic(tmp_path):
    """A TCP-only dataset: the section says there is nothing to compare, with no invented figure."""
    from support import demo as demo_data
    from tailscope.jobs.analytics.report import write_report
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    corpus.require_samples()
    ds = tmp_path / "ds"
    analyze([str(demo_data.SAMPLES / "clean.pcap")], ds, AnalyzeOptions(progress=False, enrichment=demo_data.enrichment()))
    md = write_report(ds, tmp_path / "r").markdown.read_text()
    section = md.split("## QUIC vs TCP", 1)[1].split("\n## ", 1)[0]
    assert "No complete QUIC queries this week" in section and "tail reduction of" not in section


# ----------------------------------------------------------------------------------------------
# the dashboard


@pytest.mark.parametrize("group,grain", [("carrier", "carrier"), ("h3_cell", "hexagon"), ("network_type", "network_type")])
def test_dashboard_tables_are_the_mart(con, group, grain):
    from test_one_definition import panel_sql

    title = {"carrier": "carrier", "h3_cell": "hexagon", "network_type": "network type"}[group]
    panel = rows(con, panel_sql("tailscope-transport.json", f"QUIC vs TCP by {title}"))
    mart = {r[group]: r for r in rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = ?", [grain])}
    assert len(panel) == len(mart) >= 2
    for p in panel:
        m = mart[p[group]]
        for k, v in p.items():
            if k == "sample":
                assert (v == "small sample") == m["small_sample"]
            elif k != group:
                assert v == (pytest.approx(m[k]) if isinstance(v, float) else m[k]), (p[group], k)


def test_dashboard_stats_are_the_mart(con):
    from test_one_definition import panel_sql

    (week,) = rows(con, "SELECT * FROM mart_quic_vs_tcp WHERE grain = 'week'")
    (stat,) = rows(con, panel_sql("tailscope-transport.json", "QUIC tail reduction [95% interval] and sample sizes"))
    assert stat == {k: (pytest.approx(week[k]) if isinstance(week[k], float) else week[k]) for k in stat}
    (fb,) = rows(con, panel_sql("tailscope-transport.json", "QUIC attempts ended on TCP / sessions mixing both"))
    assert fb["fallback_share"] == pytest.approx(week["fallback_share"]) and fb["sessions"] == week["sessions"]

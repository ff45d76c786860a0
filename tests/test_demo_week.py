"""The demo weeks (scripts/make-demo-week.py): deterministic, two ISO weeks, three carriers, 24
hexagons in two regions, a diurnal curve, and an injected regression that stats and the report
name (issue 17); QUIC and TCP side by side, with fallbacks (issue 18); latencies drawn per connection,
so percentiles move beyond noise where something was injected and nowhere else (issue 27)."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tailscope.jobs.analytics import db
from tailscope.jobs.analytics.stats import Slice, compute_stats

ROOT = Path(__file__).resolve().parents[1]


def make(out: Path) -> dict:
    spec = importlib.util.spec_from_file_location("make_demo_week", ROOT / "scripts" / "make-demo-week.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build(out, quiet=True)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    week = tmp_path_factory.mktemp("demo") / "week"
    truth = make(week)
    out = week.parent / "ds"
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(week / "captures"), "--out", str(out), "-q",
                        "--site", "ams1", "--prefixes", str(week / "prefixes.csv"), "--sessions", str(week / "sessions.csv"),
                        "--regions", str(week / "regions.csv")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return week, out, truth


def test_deterministic(demo, tmp_path):
    week, _, truth = demo
    again = make(tmp_path / "again")
    assert again == truth
    for f in sorted((week / "captures").rglob("*.pcap"))[:2]:
        twin = tmp_path / "again" / f.relative_to(week)
        assert hashlib.sha256(f.read_bytes()).digest() == hashlib.sha256(twin.read_bytes()).digest()


def test_shape(demo):
    _, out, truth = demo
    con = duckdb.connect(str(db.build(out)), read_only=True)
    q = lambda sql: con.execute(sql).fetchall()  # noqa: E731
    assert [w for (w,) in q("SELECT DISTINCT week FROM flow_facts ORDER BY 1")] == ["2026-W46", "2026-W47"]
    assert q("SELECT count(DISTINCT carrier) FROM flows WHERE carrier <> 'unknown'")[0][0] >= 3
    assert q("SELECT count(DISTINCT h3_cell) FROM flows WHERE h3_cell <> 'unknown'")[0][0] >= 20
    assert {r for (r,) in q("SELECT DISTINCT region FROM flows")} == {"north", "south"}
    by_hour = dict(q("SELECT hour(start), count(*) FROM flows GROUP BY 1"))
    assert by_hour[20] > 2 * by_hour[4], by_hour  # the diurnal curve
    assert q("SELECT count(*) FROM files WHERE status <> 'ok'")[0][0] == 0
    assert truth["regression"]["policing"]["connections"] > 100


def test_stats_name_the_injected_policer(demo):
    _, out, _ = demo

    def p99_signatures(week):
        rows = compute_stats(out, Slice(carrier="Kestrel Mobile", region="north", week=week))["attribution"]
        return {r["signature"]: r for r in rows if r["level"] == "p99"}

    before, after = p99_signatures("2026-W46"), p99_signatures("2026-W47")
    assert "policing" not in before
    assert after["policing"]["share"] >= 0.5, after


def test_the_report_names_it(demo, tmp_path):
    _, out, _ = demo
    r = subprocess.run([sys.executable, "-m", "tailscope", "report", str(out), "--out", str(tmp_path / "r")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "r" / "report-2026-W47.md").read_text()
    kestrel = next(line for line in md.splitlines() if line.startswith("| Kestrel Mobile | ") and "top" not in line
                   and "policing" in line)
    assert "policing" in kestrel
    # the path's RTT beside the latency (a slow path told from a transport behaviour); the
    # week-over-week tables each under their own heading
    assert "| RTT p50 / p95 |" in md and "### p99 by carrier" in md and "### p99 by hexagon" in md
    html = (tmp_path / "r" / "report-2026-W47.html").read_text()
    assert 'font-size="9"' not in html and 'font-size="10"' not in html  # chart text at least 11 px


def test_alert_rules_fire_on_the_injected_regression(demo):
    """The provisioned alert rule (dashboards/provisioning/alerting): its data source is the
    provisioned one, its SQL runs on the demo dataset's database, and it fires on slices of the
    injected policer (policing grew) and queue (queueing grew), and on nothing else: not on the
    carriers whose tails only moved with noise (issue 27)."""
    import yaml

    _, out, truth = demo
    pol, q = truth["regression"]["policing"], truth["regression"]["bufferbloat"]
    prov = ROOT / "dashboards" / "provisioning"
    uid = yaml.safe_load((prov / "datasources" / "tailscope.yaml").read_text())["datasources"][0]["uid"]
    rules = {r["uid"]: r for g in yaml.safe_load((prov / "alerting" / "tailscope.yaml").read_text())["groups"] for r in g["rules"]}
    con = duckdb.connect(str(db.build(out)), read_only=True)
    fired = {}
    for ruid, rule in rules.items():
        (query,) = [d for d in rule["data"] if d["datasourceUid"] != "__expr__"]
        (threshold,) = [d for d in rule["data"] if d["model"].get("type") == "threshold"]
        assert query["datasourceUid"] == uid and rule["condition"] == threshold["refId"]
        limit = threshold["model"]["conditions"][0]["evaluator"]["params"][0]
        cur = con.execute(query["model"]["rawSql"])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        assert rows, ruid
        fired[ruid] = [r for r in rows if r[names[-1]] > limit]
    alerts = fired["tailscope-tail-moved-beyond-noise"]
    parts = {r["part"] for r in alerts}
    assert any(pol["carrier"] in r["slice_name"] and r["part"] == "policing throttle" for r in alerts), alerts
    assert any(q["h3_cell"] in r["slice_name"] and r["part"].startswith("queueing") for r in alerts), alerts
    assert parts <= {"policing throttle", "queueing (RTT above the floor)"}, alerts
    for r in alerts:  # every slice it fires on holds the policed or the queued traffic
        assert (pol["carrier"] in r["slice_name"] or pol["region"] in r["slice_name"]
                or q["carrier"] in r["slice_name"] or q["h3_cell"] in r["slice_name"]), r


def test_the_report_leads_with_what_changed(demo, tmp_path):
    """The report's summary names, first, the policed slice with the policing throttle and the
    queue's hexagon with queueing, each 'new this week', and no other change (issue 27)."""
    from tailscope.jobs.analytics.report import ReportOptions, collect, render_markdown

    _, out, truth = demo
    pol, q = truth["regression"]["policing"], truth["regression"]["bufferbloat"]
    d = collect(out, ReportOptions(week="2026-W47"))
    named = d["headline_changes"]
    assert len(named) == 2, [(r["slice"], r["carrier"], r["region"], r["h3_cell"], r["level"], r["top_part"]) for r in named]
    by_part = {r["top_part"]: r for r in named}
    assert set(by_part) == {"policing", "queueing"}
    p = by_part["policing"]
    assert (p["slice"], p["carrier"], p["region"]) == ("carrier_region", pol["carrier"], pol["region"]), p
    k = by_part["queueing"]
    assert k["slice"] in ("hexagon", "carrier_hexagon") and k["h3_cell"] == q["h3_cell"], k
    for r in named:
        assert r["delta_low_ms"] > 0 and r["top_part_new"], r
    md = render_markdown(d)
    summary = md.split("## Summary", 1)[1].split("\n## ", 1)[0]
    lines = [x[2:] for x in summary.splitlines() if x.startswith("- ")]
    assert lines[0].startswith(f"{pol['carrier']}, {pol['region']}: p9") and "policing throttle +" in lines[0], lines[0]
    assert "new this week" in lines[0] and q["h3_cell"] in lines[1] and "queueing" in lines[1], lines[:2]
    assert not any("p95 +" in x or "p99 +" in x or "p95 -" in x or "p99 -" in x for x in lines[2:]), lines


def test_every_share_is_at_most_100_percent(demo, tmp_path):
    """Report, stats and every dashboard panel over the demo weeks: no share past 100 % (the
    policed tail's charged delay read 674 % before the time budget)."""
    from test_budget import check_shares

    _, out, _ = demo
    con = duckdb.connect(str(db.build(out)), read_only=True)
    con.execute("SET TimeZone = 'UTC'")
    assert check_shares(out, con, "2026-W47", tmp_path) > 1000


def test_quic_and_tcp_side_by_side(demo):
    """The HTTP/3 app's sessions (issue 18): QUIC-first sessions, over TLS/TCP, and fallbacks, as
    drawn; the carrier throttling UDP shows the highest fallback share; QUIC queries are compared
    with TCP's in every slice that has both."""
    if not all((ROOT / "samples" / f"{n}.pcap").is_file() for n in ("quic_clean", "quic_loss", "quic_fallback")):
        pytest.skip("the QUIC lab samples (quic_clean, quic_loss, quic_fallback) are not bundled: the demo is TCP only")
    _, out, truth = demo
    con = duckdb.connect(str(db.build(out)), read_only=True)
    rows = lambda sql: [dict(zip([d[0] for d in c.description], r)) for c in [con.execute(sql)] for r in c.fetchall()]  # noqa: E731
    weeks = rows("SELECT * FROM mart_quic_vs_tcp WHERE grain = 'week' ORDER BY week")
    app = truth["app_sessions"]
    assert app["quic_first"] > 500 and app["fallback"] > 20 and app["tcp"] > 100, app
    # each QUIC-first session made one QUIC attempt; a fallback session's ended on TCP
    assert sum(w["quic_attempts"] for w in weeks) == app["quic_first"]
    assert sum(w["quic_ended_on_tcp"] for w in weeks) == app["fallback"]
    assert sum(w["mixed_sessions"] for w in weeks) == app["fallback"]
    carriers = {r["carrier"]: r for r in rows("SELECT * FROM mart_quic_vs_tcp WHERE grain = 'carrier' AND week = '2026-W47'")}
    assert max(carriers, key=lambda c: carriers[c]["fallback_share"]) == "Plover Net", carriers
    for w in weeks:
        assert w["quic_queries"] > 500 and w["tcp_queries"] > 500 and not w["small_sample"], w
        assert w["tail_reduction_low"] <= w["tail_reduction"] <= w["tail_reduction_high"], w
    hexes = rows("SELECT * FROM mart_quic_vs_tcp WHERE grain = 'hexagon' AND week = '2026-W47' AND quic_queries > 0")
    assert hexes and any(h["small_sample"] for h in hexes), "hexagons are small slices and say so"


# -- issue 27: a demo week that looks like traffic ----------------------------------------------
# Every connection draws its path (RTT, jitter, loss, access rate) and its exchanges (sizes, server
# and think times) per carrier, region, network type and hour, the same in both weeks; the second
# week adds a policer (Kestrel Mobile, north) and a deep queue (Heron Telecom, one hexagon). So the
# percentiles of a slice move week over week where something was injected, and only there.

BOOT = 1000  # bootstrap resamples of each week's connections
LEVELS = (0.95, 0.99)


def quantiles(ms, flows, lv, seed):
    """The `lv` quantile of latencies `ms` (inverse CDF), and its value in each of BOOT
    resamples of the connections (`flows`: each query's connection) with replacement: a
    connection's queries share its path, so they are not independent draws, the connections
    are (a bootstrap over queries would make its intervals too narrow)."""
    import numpy as np

    order = np.argsort(ms, kind="stable")
    ms = np.asarray(ms, float)[order]
    _, idx = np.unique(np.asarray(flows)[order], return_inverse=True)
    k = idx.max() + 1
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, k, k), minlength=k) for _ in range(BOOT)])
    cum = np.cumsum(counts[:, idx], axis=1)
    at = [np.searchsorted(row, lv * row[-1]) for row in cum]
    return float(ms[min(len(ms) - 1, int(np.ceil(lv * len(ms))) - 1)]), ms[np.minimum(at, len(ms) - 1)]


def week_over_week(w46, w47, seed):
    """{level: (Δ, low, high)} in ms: the W46→W47 change of each percentile and its 95 %
    bootstrap interval; w46, w47: ([latency ms], [connection]) of one slice's queries."""
    import numpy as np

    out = {}
    for lv in LEVELS:
        a, ra = quantiles(*w46, lv, seed)
        b, rb = quantiles(*w47, lv, seed + 1)
        lo, hi = np.quantile(rb - ra, [0.025, 0.975])
        out[lv] = (b - a, float(lo), float(hi))
    return out


@pytest.fixture(scope="module")
def latencies(demo):
    """{(carrier, region or "hexagon"): {week: ([latency ms], [flow])}} of complete queries, TCP
    and QUIC; "hexagon": the queue's."""
    _, out, truth = demo
    con = duckdb.connect(str(db.build(out)), read_only=True)
    hot = truth["regression"]["bufferbloat"]["h3_cell"]
    rows = con.execute("SELECT carrier, region, h3_cell, week, latency_ms, flow_id FROM query_facts "
                       "WHERE carrier <> 'unknown' AND latency_ms IS NOT NULL").fetchall()
    by = {}
    for carrier, region, cell, week, ms, flow in rows:
        for key in [(carrier, region)] + [(carrier, "hexagon")] * (cell == hot):
            ms_, flows_ = by.setdefault(key, {}).setdefault(week, ([], []))
            ms_.append(ms)
            flows_.append(flow)
    return by


def test_injected_slices_move_beyond_noise(demo, latencies):
    """(a) the policed slice's and the queue hexagon's p95 and p99 rise W46→W47 with a 95 %
    bootstrap interval above 0."""
    _, _, truth = demo
    pol, q = truth["regression"]["policing"], truth["regression"]["bufferbloat"]
    for key in ((pol["carrier"], pol["region"]), (q["carrier"], "hexagon")):
        weeks = latencies[key]
        assert len(weeks["2026-W46"][0]) >= 50 and len(weeks["2026-W47"][0]) >= 50, (key, {w: len(v[0]) for w, v in weeks.items()})
        moved = week_over_week(weeks["2026-W46"], weeks["2026-W47"], seed=1)
        for lv, (d, lo, hi) in moved.items():
            assert lo > 0, (key, lv, d, lo, hi)


def test_noise_slices_stay_within_their_interval(demo, latencies):
    """(b) no other carrier×region slice's p99 moves beyond its interval: the same distributions
    drew both weeks (the queue hexagon's region excepted for its carrier: the hexagon is in it)."""
    _, _, truth = demo
    pol, q = truth["regression"]["policing"], truth["regression"]["bufferbloat"]
    injected = {(pol["carrier"], pol["region"]), (q["carrier"], q["region"])}
    noise = [k for k in latencies if k[1] != "hexagon" and k not in injected]
    assert len(noise) == 4, sorted(latencies)
    for key in noise:
        d, lo, hi = week_over_week(latencies[key]["2026-W46"], latencies[key]["2026-W47"], seed=2)[0.99]
        assert lo <= 0 <= hi, (key, d, lo, hi)


def test_no_latency_value_dominates_a_slice(latencies):
    """(c) drawn per connection, latencies do not tie: no value is more than 2 % of a slice's
    queries (the replayed lab samples made one value 18 % of a slice)."""
    from collections import Counter

    for key, weeks in latencies.items():
        for week, (ms, _) in weeks.items():
            (value, n), = Counter(ms).most_common(1)
            assert n <= max(2, 0.02 * len(ms)), (key, week, value, n, len(ms))


def test_detectors_find_what_was_injected(demo):
    """(d) tailscope's own detectors tag the policer (Flach et al.'s policing fit) on the policed
    slice and bufferbloat in the queue's hexagon in the second week, and neither in the first; and
    the synthesized connections show the ordinary loss recoveries too."""
    _, out, truth = demo
    pol, q = truth["regression"]["policing"], truth["regression"]["bufferbloat"]
    con = duckdb.connect(str(db.build(out)), read_only=True)

    def flows(where):
        return dict(con.execute(f"SELECT week, count(*) FROM flow_facts WHERE {where} GROUP BY 1").fetchall())

    policed = flows(f"list_contains(signatures, 'policing') AND carrier = '{pol['carrier']}' AND region = '{pol['region']}'")
    # Flach et al.'s fit judges a flow with 10 losses or more: most of those the policer dropped 10 of
    assert policed.get("2026-W47", 0) >= 0.5 * pol["dropped_10_or_more"] > 20 and "2026-W46" not in policed, (policed, pol)
    assert flows("list_contains(signatures, 'policing')") == policed  # nowhere else
    bloated = flows(f"list_contains(signatures, 'bufferbloat') AND h3_cell = '{q['h3_cell']}'")
    assert bloated.get("2026-W47", 0) >= 0.3 * q["connections"] and "2026-W46" not in bloated, (bloated, q)
    tags = dict(con.execute("SELECT s, count(*) FROM (SELECT unnest(signatures) AS s FROM flow_facts "
                            "WHERE protocol = 'tcp') GROUP BY 1").fetchall())
    for sig in ("fast_retransmit", "tail_loss", "rto", "synack_loss"):
        assert tags.get(sig, 0) >= 5, (sig, tags)


def test_synthesized_connections_read_as_drawn(tmp_path):
    """scripts/demo_tcp.py's connections, analyzed: the exchanges tailscope finds are those
    drawn (sizes, count, the handshake RTT; no resend on a loss-free path), and a policer or a
    deep queue after the capture point is what tailscope's detectors name."""
    import random

    from support import pcapgen

    spec = importlib.util.spec_from_file_location("demo_tcp", ROOT / "scripts" / "demo_tcp.py")
    tcp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tcp)
    rng = random.Random(7)
    big = [(300, 0.01, 400_000, 0.0), (300, 0.01, 300_000, 0.2), (300, 0.01, 500_000, 0.2)]
    conns = {  # client address: (path, exchanges)
        1: ({}, [(300, 0.02, 30_000, 0.0), (500, 0.005, 4_000, 0.3), (200, 0.08, 250_000, 0.1)]),
        2: ({"policer": tcp.Policer(2e6 / 8, 16_000)}, big),
        3: ({"queue": tcp.DeepQueue(rng, 8e6 / 8, 800_000, 100_000, 0.95)}, big),
    }
    pcap = tmp_path / "synth.pcap"
    packets = []
    for n, (extra, queries) in conns.items():
        packets += tcp.synthesize(rng, client=bytes((10, 41, 0, n)), server=bytes((198, 18, 2, 2)), sport=40000 + n,
                                  dport=8443, start=1_763_000_000.0 + n, rtt=0.05, jitter=0.0005, loss=0.0,
                                  rate=40e6 / 8, queries=queries, **extra)
    packets.sort(key=lambda p: p[0])
    pcapgen.write_pcap(pcap, [(ts * 1000, data) for ts, data, _ in packets], snaplen=128,
                       orig_lens=[n for _, _, n in packets])
    out = tmp_path / "ds"
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(pcap), "--out", str(out), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(db.build(out)), read_only=True)
    flows = {int(ip.split(".")[-1]): (sigs, hs, retx) for ip, sigs, hs, retx in con.execute(
        "SELECT client_ip, signatures, handshake_rtt_ms, retransmissions FROM flow_facts").fetchall()}
    assert sorted(flows) == [1, 2, 3], flows
    sigs, hs, retx = flows[1]
    assert abs(hs - 50) < 3 and retx == 0 and not sigs, flows[1]
    got = con.execute("SELECT request_bytes, response_bytes, latency_ms FROM query_facts q JOIN flow_facts f USING (flow_id) "
                      "WHERE f.client_ip = '10.41.0.1' ORDER BY q.start").fetchall()
    assert [(a, b) for a, b, _ in got] == [(q[0], q[2]) for q in conns[1][1]], got
    assert all(ms >= 50 for _, _, ms in got), got  # at least a round trip each
    assert "policing" in flows[2][0] and "bufferbloat" not in flows[2][0], flows[2]
    assert "bufferbloat" in flows[3][0] and "policing" not in flows[3][0], flows[3]

"""Queries inferred from encrypted QUIC (docs/queries.md#quic-without-keys) scored against the
client's own request log, the same workload over TLS/TCP beside it, and against the per-stream
queries the run's key log gives.

    sudo python -m tests.lab.quic_queries_eval --out /tmp/qq      # run the scenarios, score
    python -m tests.lab.quic_queries_eval --reuse /tmp/qq          # re-score finished runs (no root)

The scenarios (scenarios.QUIC_QUERY_SCENARIOS without quic_fallback: clean, 3% loss, a bottleneck
queue, a policer, reordering) alternate QUIC and TLS-over-TCP sessions of four sequential requests of
different sizes (quic_apps.py logs each `request`: t_send_ns, t_first_byte_ns, t_last_byte_ns on
the client's clock, which is the capture's: one host, CLOCK_REALTIME). tailscope analyses each
pcap twice: without keys (QUIC queries are `quic_inferred`) and with the client's key log (QUIC
queries are `quic_streams`, the reference).

Matching.  Per connection (the client's port: the `request` record's sport, the flow's
client_port), requests in time order; a request is found when an unmatched query starts between
its send and its last byte (at a server-side capture the request arrives half a round trip after
it was sent); of several, the one whose response size is closest to the request's. A query left
unmatched is invented; in a TCP flow there is none (the TLS handshake is the first request's
setup and close_notify no exchange: docs/queries.md#tls-over-tcp).
Latency.  The client's t_last_byte - t_send against the query's latency_ns (start = the request's
arrival, end = the client's ACK of the last byte: both half a round trip after the client's own
marks); within one RTT = within the scenario's path RTT (2 x delay_ms).
p99.  Over each transport's requests (the clients') and queries (ours: every query of the
transport's flows, as a user would compute it), pooled over the scenarios; linear interpolation
(DuckDB's quantile_cont). They agree when within P99_TOLERANCE.
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .harness import ScenarioResult, load_finished, run_scenarios
from .scenarios import QUIC_QUERY_SCENARIOS

EVAL_SCENARIOS = [s for n, s in QUIC_QUERY_SCENARIOS.items() if n != "quic_fallback"]
FOUND_TARGET = 0.95          # the targets (issue 18)
WITHIN_RTT_TARGET = 0.95
# p99s from the queries and from the clients agree within one path RTT or 10% of the clients'
# p99, whichever is larger: every query may differ from its request by up to one RTT (module doc),
# and with ~50 requests per transport the p99 is an interpolation between the two largest.
P99_TOLERANCE_RTTS = 1.0
P99_TOLERANCE_SHARE = 0.10


def quantile(values: list, q: float) -> float | None:
    """DuckDB's quantile_cont: linear interpolation between the closest ranks."""
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@dataclass
class Match:
    scenario: str
    transport: str
    request: dict
    query: dict | None
    rtt_ns: int

    @property
    def client_ns(self) -> int:
        return self.request["t_last_byte_ns"] - self.request["t_send_ns"]

    @property
    def within_rtt(self) -> bool:
        return self.query is not None and abs(self.query["latency_ns"] - self.client_ns) <= self.rtt_ns


@dataclass
class ScenarioScore:
    name: str
    matches: list = field(default_factory=list)
    invented: list = field(default_factory=list)         # QUIC queries matching no request
    invented_tcp: list = field(default_factory=list)     # TCP queries matching no request
    queries: dict = field(default_factory=dict)          # transport -> every query of its flows
    keyed: list = field(default_factory=list)            # (inferred, keyed) query pairs, QUIC
    keyed_unpaired: int = 0
    stalls: list = field(default_factory=list)           # (inferred has quic_pto_stall, keyed has quic_pto)


def _tables(pcap: Path, keylog: Path | None = None):
    from tailscope import api

    t = api.tables([str(pcap)], keylogs=[str(keylog)] if keylog else ())
    return t["flows"].to_pylist(), t["queries"].to_pylist()


def _by_port(flows: list, queries: list) -> tuple[dict, dict]:
    """(client port, protocol) -> flow, and flow_id -> its queries in time order."""
    flow_of = {(f["client_port"], f["protocol"]): f for f in flows}
    qs: dict = collections.defaultdict(list)
    for q in queries:
        qs[q["flow_id"]].append(q)
    for v in qs.values():
        v.sort(key=lambda q: q["start"])
    return flow_of, qs


def _ns(ts) -> int:
    return int(ts.timestamp()) * 10**9 + ts.microsecond * 1000 if hasattr(ts, "timestamp") else int(ts)


def score(res: ScenarioResult) -> ScenarioScore:
    rtt = int(2 * res.params["delay_ms"] * 1e6)
    sc = ScenarioScore(res.name)
    flows, queries = _tables(res.pcap)
    flow_of, qs = _by_port(flows, queries)
    reqs = [r for r in res.requests() if r.get("ok")]
    for transport, proto in (("quic", "quic"), ("tcp", "tcp")):
        mine = [r for r in reqs if r["transport"] == transport]
        ports = sorted({r["sport"] for r in mine})
        sc.queries[transport] = [q for p in ports if (p, proto) in flow_of for q in qs[flow_of[(p, proto)]["flow_id"]]]
        for port in ports:
            f = flow_of.get((port, proto))
            cands = list(qs[f["flow_id"]]) if f else []
            used = set()
            for r in sorted((r for r in mine if r["sport"] == port), key=lambda r: r["t_send_ns"]):
                window = [i for i, q in enumerate(cands) if i not in used
                          and r["t_send_ns"] <= _ns(q["start"]) <= r["t_last_byte_ns"]]
                hit = min(window, key=lambda i: abs(cands[i]["response_bytes"] - r["resp_bytes"]), default=None)
                if hit is not None:
                    used.add(hit)
                sc.matches.append(Match(res.name, transport, r, cands[hit] if hit is not None else None, rtt))
            unmatched = [q for i, q in enumerate(cands) if i not in used]
            if transport == "quic":
                sc.invented += unmatched
            else:
                sc.invented_tcp += unmatched
    keylog = res.files.get("keylog")
    if keylog and Path(keylog).exists():
        kflows, kqueries = _tables(res.pcap, keylog)
        kflow_of, kqs = _by_port(kflows, kqueries)
        for (port, proto), f in flow_of.items():
            if proto != "quic" or (port, proto) not in kflow_of:
                continue
            inferred, keyed = qs[f["flow_id"]], kqs[kflow_of[(port, proto)]["flow_id"]]
            # a stream's query and the inferred one start at the same request packet (a
            # connection's first inferred query at the client's Finished, when the request
            # shares or follows its datagram: docs/queries.md), so within one RTT of each other
            left = list(keyed)
            for i in inferred:
                k = min(left, key=lambda k: abs(_ns(k["start"]) - _ns(i["start"])), default=None)
                if k is None or abs(_ns(k["start"]) - _ns(i["start"])) > rtt:
                    sc.keyed_unpaired += 1
                    continue
                left.remove(k)
                sc.keyed.append((i, k))
                sc.stalls.append(("quic_pto_stall" in i["signatures"], "quic_pto" in k["signatures"]))
            sc.keyed_unpaired += len(left)
    return sc


@dataclass
class Evaluation:
    scores: dict
    results: dict
    table: str = ""
    table_path: Path | None = None

    def matches(self, transport: str, scenario: str | None = None) -> list:
        return [m for s in self.scores.values() if scenario in (None, s.name) for m in s.matches
                if m.transport == transport]

    def found(self, transport: str = "quic", scenario: str | None = None) -> tuple[int, int]:
        ms = self.matches(transport, scenario)
        return sum(m.query is not None for m in ms), len(ms)

    def within_rtt(self, transport: str = "quic", scenario: str | None = None) -> tuple[int, int]:
        ms = [m for m in self.matches(transport, scenario) if m.query is not None]
        return sum(m.within_rtt for m in ms), len(ms)

    def p99(self, transport: str) -> tuple[float | None, float | None]:
        """(ours, the clients') in ms, pooled over the scenarios."""
        ours = [q["latency_ns"] / 1e6 for s in self.scores.values() for q in s.queries.get(transport, [])]
        theirs = [m.client_ns / 1e6 for m in self.matches(transport)]
        return quantile(ours, 0.99), quantile(theirs, 0.99)

    def p99_tolerance_ms(self, clients_ms: float) -> float:
        rtt_ms = max(m.rtt_ns for s in self.scores.values() for m in s.matches) / 1e6
        return max(P99_TOLERANCE_RTTS * rtt_ms, P99_TOLERANCE_SHARE * clients_ms)

    def keyed_agreement(self) -> tuple[int, int, int, int]:
        """(inferred/keyed pairs with latency within one RTT, pairs whose stream's response the
        client acknowledged, pairs, queries without a pair). A connection's last stream often has
        no ACK the capture shows (aioquic's client closes at once): its keyed `end` is its last
        byte, not a delivery, and it is not compared."""
        rtt = max((m.rtt_ns for s in self.scores.values() for m in s.matches), default=0)
        pairs = [p for s in self.scores.values() for p in s.keyed]
        acked = [(i, k) for i, k in pairs if k["complete"]]
        close = sum(abs(i["latency_ns"] - k["latency_ns"]) <= rtt for i, k in acked)
        return close, len(acked), len(pairs), sum(s.keyed_unpaired for s in self.scores.values())

    def confidence_levels(self) -> dict:
        """confidence -> (QUIC queries matching a request within one RTT, QUIC queries)."""
        out: dict = collections.defaultdict(lambda: [0, 0])
        for s in self.scores.values():
            ok = {id(m.query) for m in s.matches if m.transport == "quic" and m.within_rtt}
            for q in s.queries.get("quic", []):
                out[q["confidence"]][1] += 1
                out[q["confidence"]][0] += id(q) in ok
        return {k: tuple(v) for k, v in sorted(out.items())}

    def stall_counts(self) -> dict:
        c = collections.Counter()
        for s in self.scores.values():
            for inferred, keyed in s.stalls:
                c[("tp" if keyed else "fp") if inferred else ("fn" if keyed else "tn")] += 1
        return dict(c)


def evaluate(results: dict) -> Evaluation:
    ok = {n: r for n, r in results.items() if not isinstance(r, Exception)}
    return Evaluation({n: score(r) for n, r in ok.items()}, results)


def _pct(a: int, b: int) -> str:
    return f"{a}/{b} ({100 * a / b:.1f}%)" if b else f"{a}/0"


def format_table(ev: Evaluation, details: int = 10) -> str:
    lines = ["QUIC queries without keys vs the client's request log (server-side capture)", "",
             f"{'scenario':26s} {'QUIC found':>16s} {'within RTT':>16s} {'invented':>8s} "
             f"{'TCP found':>16s} {'TCP within RTT':>16s} {'TCP invented':>12s}"]
    for n, s in ev.scores.items():
        lines.append(f"{n:26s} {_pct(*ev.found('quic', n)):>16s} {_pct(*ev.within_rtt('quic', n)):>16s} "
                     f"{len(s.invented):>8d} {_pct(*ev.found('tcp', n)):>16s} {_pct(*ev.within_rtt('tcp', n)):>16s} "
                     f"{len(s.invented_tcp):>12d}")
    lines.append(f"{'all':26s} {_pct(*ev.found('quic')):>16s} {_pct(*ev.within_rtt('quic')):>16s} "
                 f"{sum(len(s.invented) for s in ev.scores.values()):>8d} {_pct(*ev.found('tcp')):>16s} "
                 f"{_pct(*ev.within_rtt('tcp')):>16s} {sum(len(s.invented_tcp) for s in ev.scores.values()):>12d}")
    lines.append("")
    for t in ("quic", "tcp"):
        ours, theirs = ev.p99(t)
        if ours is not None and theirs is not None:
            lines.append(f"p99 {t:4s}: ours {ours:7.1f} ms, clients' {theirs:7.1f} ms, difference "
                         f"{ours - theirs:+6.1f} ms (tolerance {ev.p99_tolerance_ms(theirs):.1f} ms)")
    (oq, cq), (ot, ct) = ev.p99("quic"), ev.p99("tcp")
    if None not in (oq, cq, ot, ct):
        lines.append(f"QUIC tail reduction (1 - p99 QUIC / p99 TCP): ours {1 - oq / ot:+.1%}, clients' {1 - cq / ct:+.1%}")
    close, acked, pairs, unpaired = ev.keyed_agreement()
    lines.append(f"inferred vs keyed (key log) queries: {pairs} pairs, {unpaired} without a pair; of the "
                 f"{acked} whose stream's response was acknowledged, {_pct(close, acked)} within one RTT")
    lines.append("confidence levels (QUIC queries matching a request within one RTT): "
                 + ", ".join(f"{k}: {_pct(*v)}" for k, v in ev.confidence_levels().items()))
    lines.append(f"quic_pto_stall vs the key log's quic_pto charges, per query: {ev.stall_counts()}")
    bad = [m for s in ev.scores.values() for m in s.matches if m.transport == "quic" and not m.within_rtt]
    for m in bad[:details]:
        q = m.query
        lines.append(f"  {m.scenario} request {m.request['id']} port {m.request['sport']} "
                     f"{m.request['resp_bytes']} B: client {m.client_ns / 1e6:.1f} ms, "
                     + (f"query {q['query_index']} {q['latency_ns'] / 1e6:.1f} ms {q['signatures']}" if q
                        else "no query"))
    for s in ev.scores.values():
        for kind, qs in (("invented", s.invented), ("TCP invented", s.invented_tcp)):
            for q in qs[:details]:
                lines.append(f"  {s.name} {kind}: flow {q['flow_id']} query {q['query_index']} "
                             f"{q['request_bytes']} B / {q['response_bytes']} B, {q['latency_ns'] / 1e6:.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.quic_queries_eval")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="run the scenarios into this directory (root)")
    g.add_argument("--reuse", help="score runs already in this directory")
    a = ap.parse_args(argv)
    if a.out:
        results = run_scenarios(EVAL_SCENARIOS, a.out, max_parallel=2, return_exceptions=True)
    else:
        results = load_finished(a.reuse, EVAL_SCENARIOS)
    print(format_table(evaluate(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

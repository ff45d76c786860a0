"""Precision and recall of tailscope's key-log QUIC signatures (docs/signatures.md, "QUIC with a key
log") against the endpoints' own qlogs, in the ground-truth lab.

    sudo python -m tests.lab.quic_keylog_eval --out /tmp/qk      # run the key-log scenarios, score
    python -m tests.lab.quic_keylog_eval --reuse /tmp/qk          # re-score finished runs

tailscope analyses each run's pcap with the client's SSLKEYLOGFILE (`--keylog`); the truth is each
endpoint's qlog (aioquic), never tailscope's parsers:

Lost packets (per 1-RTT packet number and sender).  `recovery:packet_lost` of type 1RTT in the
    sender's qlog: the server's trace (by original DCID = tailscope's quic_ocid) for s2c, the
    client's (by its port) for c2s. Its trigger, which aioquic does not log, is read from where the
    event sits: aioquic logs `packet_received` before it processes the packet's frames, so a loss
    whose latest packet event is a received packet carrying an ACK, less than 1 ms before, came from
    that ACK - `packet_threshold` when the largest acknowledged so far is >= 3 above it, else
    `time_threshold`; otherwise a timer fired - `time_threshold` below the largest acknowledged (the
    loss timer), `pto` above it (aioquic's probe re-sends the oldest unacknowledged packet's data
    and logs that packet lost).
Retransmissions (per packet).  A 1-RTT `packet_sent` carrying STREAM bytes that the same sender
    already sent on that stream.
Spurious (per lost packet).  A packet the sender declared lost and a later ACK it received covered.
Out of order (per client packet).  A client 1-RTT packet that reached the server (the capture)
    after one the client sent with a higher number: the client's qlog says which packets each of
    its datagrams carried, the emulator's log when each datagram left it. Not the server's qlog: it
    has no number for a packet it could not decrypt yet (a request sent with the Finished and
    arriving before it) nor any record of one arriving after it closed. Server packets reordered
    after the capture point are not observable at the server (reported).
"""
from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .evaluate import TARGET, Row, _read
from .harness import ScenarioResult, load_finished, run_scenarios
from .quic_eval import _load_qlog
from .scenarios import QUIC_KEYLOG_SCENARIOS

KEYLOG_EVAL_SCENARIOS = list(QUIC_KEYLOG_SCENARIOS.values())
CAUSES = ("packet_threshold", "time_threshold", "pto")
# Loss rows are scored apart for scenarios that reorder: there the client's ACKs often cover a
# packet within a millisecond or two of the sender's time threshold, and whether the sender's loss
# timer or that ACK came first depends on its clock, which the capture does not show.
REORDERING = " under reordering"


@dataclass
class SenderTruth:
    lost: dict = field(default_factory=dict)          # pn -> trigger
    retx: set = field(default_factory=set)            # pns re-sending stream data
    spurious: set = field(default_factory=set)        # lost pns acknowledged later


def _ms_ns(e: dict) -> int:
    return int(float(e["time"]) * 1e6)


def sender_truth(trace: dict) -> SenderTruth:
    """What this endpoint sent, from one qlog trace."""
    sent = SenderTruth()
    largest_acked = -1
    last_ack_ns = None      # the latest packet event, when it was a received ACK
    stream_hi: dict = collections.defaultdict(list)      # stream id -> [(start, end)]
    lost_at: dict = {}
    for e in trace.get("events", []):
        name, d = e["name"], e.get("data", {})
        if name in ("transport:packet_received", "transport:packet_sent"):
            last_ack_ns = None
        if name == "transport:packet_received" and d.get("header", {}).get("packet_type") == "1RTT":
            for f in d.get("frames", []):
                if f.get("frame_type") == "ack":
                    for r in f.get("acked_ranges", []):
                        lo, hi = r[0], r[-1]
                        largest_acked = max(largest_acked, hi)
                        sent.spurious.update(p for p in lost_at if lo <= p <= hi)
                    last_ack_ns = _ms_ns(e)
        elif name == "transport:packet_sent" and d.get("header", {}).get("packet_type") == "1RTT":
            pn = d["header"]["packet_number"]
            for f in d.get("frames", []):
                if f.get("frame_type") != "stream" or not f.get("length"):
                    continue
                a, b = f["offset"], f["offset"] + f["length"]
                segs = stream_hi[f["stream_id"]]
                if any(s < b and a < t for s, t in segs):
                    sent.retx.add(pn)
                segs.append((a, b))
        elif name == "recovery:packet_lost" and d.get("type") == "1RTT":
            pn = d["packet_number"]
            by_ack = last_ack_ns is not None and _ms_ns(e) - last_ack_ns < 1_000_000
            if by_ack:
                trig = "packet_threshold" if largest_acked - pn >= 3 else "time_threshold"
            else:
                trig = "time_threshold" if pn < largest_acked else "pto"
            sent.lost[pn] = trig
            lost_at[pn] = _ms_ns(e)
    return sent


def reordered_before_server(client_trace: dict, fates: list) -> set | None:
    """The client's 1-RTT packet numbers that reached the server after a higher one: datagram k of
    the client's trace (its packets are the `packet_sent` events logged before its `datagrams_sent`)
    is the emulator's datagram `dgram_n` k of that flow, forwarded or dropped (`fates`), and the
    capture at the server sees the forwarded ones in the order the emulator let them go. None when
    the two do not pair up one to one."""
    dgrams, pending = [], []
    for e in client_trace.get("events", []):
        if e["name"] == "transport:packet_sent" and e["data"].get("header", {}).get("packet_type") == "1RTT":
            pending.append(e["data"]["header"]["packet_number"])
        elif e["name"] == "transport:datagrams_sent":
            if e["data"].get("count", 1) != 1:
                return None
            dgrams.append(pending)
            pending = []
    if sorted(r["dgram_n"] for r in fates) != list(range(1, len(dgrams) + 1)):
        return None
    late, largest = set(), -1
    for r in sorted((r for r in fates if r["action"] == "forward"), key=lambda r: r["ts_ns"]):
        for pn in dgrams[r["dgram_n"] - 1]:
            if pn < largest:
                late.add(pn)
            largest = max(largest, pn)
    return late


@dataclass
class KeylogEvaluation:
    rows: list
    warnings: list
    truths: dict
    table: str = ""
    table_path: Path | None = None

    def row(self, signature: str) -> Row:
        return next(r for r in self.rows if r.signature == signature)


def analyze(res: ScenarioResult, work_dir: Path) -> dict:
    from tailscope.jobs.run.local import AnalyzeOptions
    from tailscope.jobs.run.local import analyze as ts_analyze

    out = Path(work_dir) / f"ts-keylog-{res.name}"
    if out.exists():
        import shutil
        shutil.rmtree(out)
    ts_analyze([str(res.pcap)], out, AnalyzeOptions(progress=False, keylogs=[str(res.files["keylog"])]))
    return {t: _read(out, t) for t in ("flows", "events")}


def evaluate(results: dict, work_dir: Path) -> KeylogEvaluation:
    rows = {}

    def row(sig: str, unit: str, target=TARGET, note: str = "") -> Row:
        return rows.setdefault(sig, Row(sig, unit, target, note=note))

    client_note = ("the client's losses are replayed from the far side: its sends are seen half an RTT late, "
                   "the server's ACKs half an RTT early, and an ACK lost after the capture still counts")
    for where in ("", REORDERING):
        row(f"quic_packet_lost (s2c){where}", "lost 1-RTT packet")
        row(f"quic_packet_lost (c2s){where}", "lost 1-RTT packet", target=None, note=client_note)
        for c in CAUSES:
            row(f"quic_packet_lost cause={c} (s2c){where}", "lost 1-RTT packet",
                target=None if c == "pto" else TARGET,
                note=("a handful per run (a response's last packets all lost); the replay's PTO is proven "
                      "exactly in tests/test_quic_keylog.py") if c == "pto" else "")
        row(f"quic_spurious_retransmission (s2c){where}", "lost 1-RTT packet", target=TARGET if where else None)
    row("retransmission (s2c)", "1-RTT packet")
    row("retransmission (c2s)", "1-RTT packet", target=None, note="the client re-sends little (300 B requests)")
    row("out_of_order (c2s)", "1-RTT packet")
    warnings, truths = [], {}
    for name, res in results.items():
        if not isinstance(res, ScenarioResult):
            warnings.append(f"{name}: did not run: {res!r}")
            continue
        ts = analyze(res, work_dir)
        where = REORDERING if any(r.get("kind") == "reorder" for r in res.params.get("rules", [])) else ""
        flows = [f for f in ts["flows"] if f.get("protocol") == "quic"]
        by_ocid = {f["quic_ocid"]: f for f in flows if f.get("quic_ocid")}
        ev = collections.defaultdict(set)   # (flow, signature, direction, cause) -> {seq}
        for e in ts["events"]:
            ev[(e["flow_id"], e["signature"], e["direction"], e.get("cause"))].add(e["seq"])

        def got(fid, sig, direction, cause=None):
            if cause is None:
                return set().union(*[v for (f, s, d, c), v in ev.items() if f == fid and s == sig and d == direction])
            return ev.get((fid, sig, direction, cause), set())

        server = {t["common_fields"]["ODCID"]: t for t in _load_qlog(res.files.get("server_qlog"))}
        client = {int(t["title"].split()[-1].rsplit(":", 1)[1]): t for t in _load_qlog(res.files.get("client_qlog"))
                  if t.get("title")}
        completed = {r["sport"] for r in res.client_records() if r["kind"] == "quic_attempt" and r.get("ok")}
        fates = collections.defaultdict(list)    # client port -> its datagrams the emulator forwarded or dropped
        for r in res.emulator_records():
            if r.get("action") in ("forward", "drop") and r.get("dir") == "c2s" and r.get("proto") == "udp":
                fates[r["sport"]].append(r)
        truths[name] = {}
        for ocid, tr in server.items():
            f = by_ocid.get(ocid)
            if f is None:
                warnings.append(f"{name}: server trace {ocid}: no tailscope flow")
                continue
            # The client logs its secrets once it has them: an attempt that timed out has none.
            if f.get("quic_keys") != "decrypted" and f["client_port"] in completed:
                warnings.append(f"{name}: flow {f['flow_id']} (handshake completed) quic_keys={f.get('quic_keys')}")
            s_sent = sender_truth(tr)
            c_tr = client.get(f["client_port"])
            c_sent = sender_truth(c_tr) if c_tr else SenderTruth()
            late = reordered_before_server(c_tr, fates[f["client_port"]]) if c_tr else set()
            if c_tr is None:
                warnings.append(f"{name}: no client trace for port {f['client_port']}")
            elif late is None:
                warnings.append(f"{name}: port {f['client_port']}: the client's datagrams and the emulator's "
                                "do not pair up one to one")
                late = set()
            truths[name][f["flow_id"]] = (s_sent, c_sent, late)
            fid = f["flow_id"]
            mask = 0xFFFFFFFF
            _score(row(f"quic_packet_lost (s2c){where}", ""), name, fid, {p & mask for p in s_sent.lost},
                   got(fid, "quic_packet_lost", "s2c"))
            _score(row(f"quic_packet_lost (c2s){where}", ""), name, fid, {p & mask for p in c_sent.lost},
                   got(fid, "quic_packet_lost", "c2s"))
            for c in CAUSES:
                _score(row(f"quic_packet_lost cause={c} (s2c){where}", ""), name, fid,
                       {p & mask for p, t in s_sent.lost.items() if t == c}, got(fid, "quic_packet_lost", "s2c", c))
            _score(row("retransmission (s2c)", ""), name, fid, s_sent.retx, got(fid, "retransmission", "s2c"))
            _score(row("retransmission (c2s)", ""), name, fid, c_sent.retx, got(fid, "retransmission", "c2s"))
            _score(row(f"quic_spurious_retransmission (s2c){where}", ""), name, fid, s_sent.spurious,
                   got(fid, "quic_spurious_retransmission", "s2c"))
            _score(row("out_of_order (c2s)", ""), name, fid, late, got(fid, "out_of_order", "c2s"))
    return KeylogEvaluation(list(rows.values()), warnings, truths)


def _score(r: Row, scenario: str, flow_id: int, truth: set, got: set) -> None:
    r.tp += len(truth & got)
    r.fp += len(got - truth)
    r.fn += len(truth - got)
    if truth:
        r.pos_scenarios.add(scenario)
    if got - truth:
        r.fp_scenarios.add(scenario)
    for p in sorted(got - truth)[:3]:
        r.details.append(f"FP {scenario} flow {flow_id} pn {p}")
    for p in sorted(truth - got)[:3]:
        r.details.append(f"FN {scenario} flow {flow_id} pn {p}")


def format_table(ev: KeylogEvaluation, details: int = 8) -> str:
    from .evaluate import Evaluation
    from .evaluate import format_table as _tcp_table

    out = [_tcp_table(Evaluation(ev.rows, ev.truths, {}, [], {}), details=0)]
    if details:
        for r in ev.rows:
            if r.details:
                out.append(f"## {r.signature}: {len(r.details)} FP/FN lines (first {details})")
                out += ["   " + d for d in r.details[:details]]
    if ev.warnings:
        out += ["", "truth warnings:"] + ["   " + w for w in ev.warnings[:40]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.quic_keylog_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="quic-keylog-eval")
    ap.add_argument("--reuse", help="score the finished runs in this directory instead of running")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--details", type=int, default=8)
    a = ap.parse_args(argv)
    if a.reuse:
        out = Path(a.reuse)
        results = load_finished(out, KEYLOG_EVAL_SCENARIOS)
    else:
        out = Path(a.out)
        results = run_scenarios(KEYLOG_EVAL_SCENARIOS, out, max_parallel=a.parallel, return_exceptions=True)
    print(format_table(evaluate(results, out), a.details))
    return 0


if __name__ == "__main__":
    sys.exit(main())

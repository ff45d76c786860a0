"""tailscope's per-query time budget (docs/queries.md#time-budget) against the lab's truth (issue 27,
item 2: "proof against truth"). Pure functions over truth.py's per-packet truth and the client's
request log; pool.py adds the rows to its table and tests/test_lab_pool.py gates them.

Pairing. A tailscope query is paired with the client's request at its position in the connection
(queries_check.py's join: flow key, `query_index` = the client's `index`); a pair whose response
byte counts differ is not scored (queries_check counts it). The response's bytes are stream
offsets [lo, hi) of the server's direction (offsets from the ISN + 1; the client's `resp_bytes`
are exact payload bytes, so the k-th response starts where the k-1 before it end).

The truth's waits. For every *first transmission* of the response's bytes that the relay dropped
(truth.Tx not delivered), its wait runs from when it was sent to when the transmission that
completed the delivery of its bytes was sent (the repair that got through; a lost resend extends
it). At a server-side capture both instants are capture times, as tailscope's. A request segment
the relay dropped (before the capture) waits from when it would have arrived (its send + the
one-way delay) to the capture of its repair, from the query's span on (`request_waits`).
Overlapping waits count once (their union), as the budget paints them. A response whose lost
bytes were never repaired (the run ended) is not scored.

Rows (unit: a query; TP = within tolerance, FN = outside, FP = charged where the truth has
nothing; a row's recall is the share of qualifying queries within tolerance):
1. `budget loss recovery (tail-loss response)`: responses with a truth tail-loss episode (truth.py:
   a dropped message or burst tail first repaired by a timer). The budget's loss-recovery part
   (LOSS_PARTS) against the union of the query's waits (all its lost segments, request and
   response), within one RTT: the flow's `rtt_min_ns` (the strictest round trip tailscope knows,
   as queries_check). `... (any response with a loss)`: the same over every query that lost
   data (reported).
2. `budget policing (policed response)`: responses of a flow the policer struck >= 10 times
   (truth.POLICING_MIN_DROPS, the signature's own minimum) with at least one of their bytes' copies
   dropped by the policer. `budget_policing_ns` against the union of the waits of the lost
   segments the policer dropped a copy of, within 20 %. A flow the policing detector missed has
   its repairs charged as fast_retransmit etc. and fails here too (the detail says so).
3. `budget queueing (bottlenecked response)`: responses of draws with the relay's bottleneck. The
   truth under the budget's own model (docs/queries.md): the response's delivery - its first
   byte's first send to the capture of the client's first ACK of its last byte, less the truth's
   waits inside it - times mean hold / (floor + mean hold); `mean hold` the mean, over the RTT
   samples of the response's segments, of what the relay log says each sample waited on both
   legs (truth.queue_samples: the bottleneck's queue, the relay's backlog, the TUN queues; SACK
   samples included, as a sender takes them) beyond what the flow's least RTT sample waited
   (the handshake's and the FIN's included), and `floor` the path's propagation RTT (2 x
   delay_ms) plus that least wait: the floor the budget measures from is the flow's minimum RTT
   (docs/queries.md), and a row scored from the path's propagation instead failed on what that
   floor cannot see, not on what the budget measured - jitter under its mean (unseen seed 246, a
   322 ms path with 11.6 ms of jitter: the flow's minimum 292 ms, every response charged 60-70 %
   over the truth), and a flow that starts behind a standing queue never sees the path's floor
   (docs/queries.md: queueing is a lower bound). That difference is reported on its own row, `budget queueing over the path's
   propagation`, the holds over 2 x delay_ms. Not a plain mean of the bottleneck's `queue_ms`: that
   misses the ACK path, which the RTT, and so the budget, sees (the lab's relay holds ACKs when
   the machine is loaded). Nothing under QUEUE_MIN_NS of mean hold (the model's 20 ms line). A
   connection's first query adds its handshake's hold (the SYN-ACK's and its ACK's) when that is
   over the line. Within 20 %; a response the truth says did not queue (mean hold under the line
   by QUEUE_MARGIN_NS) must be charged nothing (else a FP). Responses within QUEUE_MARGIN_NS of
   the line either way are not scored: there the budget's part jumps between 0 and delivery x
   20 / (floor + 20) on a few ms of difference between its RTT samples and the truth's - each
   sample is the smaller of two consecutive (draw0014 of pool 1-16: mean hold 26.0 ms, 22.8
   by that rule, the flow's minimum RTT 2.7 ms over the path's), and delayed ACKs. The same
   over draws without a bottleneck (the lab's own queue, jitter): `... (other queued response)`,
   reported.
4. `budget: clean draws charge nothing`: every query of a draw without impairment has 0 in every
   loss part (syn_loss, synack_loss, LOSS_PARTS, spurious_retransmission) and in queueing - unless
   the truth measured a queue on the lab's own path for it (mean hold within the margin of the
   line or over it: a loaded relay behind several bulk transfers, pool 1-16 draw0016_clean, whose
   flows the truth labels bufferbloat too); those are scored by the queueing rows. Nor in
   spurious_retransmission where that queue made the sender resend delivered bytes (the truth's
   replay records them: unseen axis seed 112, five bulk transfers through the relay). At a
   client-side capture only the loss parts are checked (no queue truth there).

Rows 1-3 are scored at a server-side capture only: at the client the server's sends are not
seen (truth.FlowTruth.unobservable: tail_loss, policing, bufferbloat).
"""
from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass, field

MS = 1_000_000
MASK = 0xFFFFFFFF
# the budget's loss-recovery part (issue 27): every wait a lost segment of the server's data is charged as
LOSS_PARTS = ("rto", "tlp", "tail_loss", "fast_retransmit", "retransmission", "policing")
# what a clean draw must not be charged (item 3)
CLEAN_ZERO_PARTS = ("syn_loss", "synack_loss") + LOSS_PARTS + ("spurious_retransmission", "queueing")
QUEUE_MIN_NS = 20 * MS          # signatures/src/queries.rs QUEUE_MIN_NS: the budget's queueing line
QUEUE_MARGIN_NS = 10 * MS       # responses this close to the line are not scored (module docstring)
POLICING_TOL = QUEUE_TOL = 0.20
BUDGET_TARGET = 0.90            # share of qualifying queries within tolerance (issue 27's first gate)

LOSS_ROW = "budget loss recovery (tail-loss response)"
POLICING_ROW = "budget policing (policed response)"
QUEUE_ROW = "budget queueing (bottlenecked response)"
QUEUE_OTHER_ROW = "budget queueing (other queued response)"
QUEUE_PATH_ROW = "budget queueing over the path's propagation (bottlenecked response)"
LOSS_ANY_ROW = "budget loss recovery (any response with a loss)"
CLEAN_ROW = "budget: clean draws charge nothing"
ROWS = (LOSS_ROW, POLICING_ROW, QUEUE_ROW)


# ---- pure functions -----------------------------------------------------------------------

def union_ns(intervals) -> int:
    """Length of the union of [a, b) intervals (empty and reversed ones count nothing)."""
    total, cur_a, cur_b = 0, None, None
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def clip(intervals, lo: int, hi: int) -> list:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


@dataclass
class Wait:
    """One lost first transmission and the repair that got through."""
    off: int
    end: int
    sent_ns: int
    repaired_ns: int | None           # None: never repaired
    frame: int | None                 # the lost original's frame (s2c: captured before the relay)
    repair_frame: int | None = None
    reasons: set = field(default_factory=set)   # the relay's drop reasons for any copy before the repair

    @property
    def interval(self) -> tuple:
        return (self.sent_ns, self.repaired_ns)


def repair_waits(sent: list, lo: int, hi: int, repaired_at=None) -> list:
    """The waits of the lost first transmissions of stream offsets [lo, hi) (module docstring).
    `sent`: one direction's truth.Tx in send order (offsets set). A transmission whose bytes start
    at or above the highest byte sent so far is a first transmission (of its new bytes). The
    repair's time is its send (`repaired_at` another)."""
    txs = [t for t in sent if t.off is not None and t.off >= 0 and t.len > 0]
    out, high = [], 0
    for i, t in enumerate(txs):
        a, b = max(t.off, high), t.off + t.len
        high = max(high, b)
        if b <= a or t.delivered or not (lo <= a < hi):
            continue
        w = Wait(a, b, t.t_ns, None, t.frame, reasons={_reason(t)} - {None})
        covered = []
        for r in txs[i + 1:]:
            if not (r.off < b and a < r.off + r.len):
                continue
            if not r.delivered:
                w.reasons |= {_reason(r)} - {None}
                continue
            covered.append((r.off, r.off + r.len))
            if union_ns(clip(covered, a, b)) >= b - a:
                w.repaired_ns, w.repair_frame = (repaired_at(r) if repaired_at else r.t_ns), r.frame
                break
        out.append(w)
    return out


def _reason(t) -> str | None:
    rec = t.rec or {}
    return rec.get("reason") if rec.get("action") == "drop" else None


def queueing_truth_ns(delivery_ns: int, holds_ns: list, floor_ns: int) -> int:
    """The budget's model with the relay's holds (module docstring, row 3): delivery x mean hold /
    (floor + mean hold); 0 under the 20 ms line or without holds."""
    if not holds_ns or delivery_ns <= 0:
        return 0
    mean = sum(holds_ns) / len(holds_ns)
    if mean < QUEUE_MIN_NS or floor_ns + mean <= 0:
        return 0
    return int(delivery_ns * mean / (floor_ns + mean))


def response_bounds(requests: list, size: str = "resp_bytes") -> dict:
    """index -> (lo, hi): each response's (size="req_bytes": request's) stream offsets, from the
    client's exact sizes in order."""
    out, pos = {}, 0
    for r in sorted(requests, key=lambda r: r["index"]):
        out[r["index"]] = (pos, pos + r[size])
        pos += r[size]
    return out


def request_waits(sent: list, lo: int, hi: int, one_way_ns: int, since_ns: int) -> list:
    """The waits of a request's lost segments as the server lived them, [(from, to)]: at a
    server-side capture the client's copy the relay dropped never arrives, so its wait runs from
    when it would have arrived (the client's send + the one-way delay) to the capture of the copy
    that completed its bytes, and not before the query's span begins (`since_ns`: the first SYN
    for a connection's first query, else its first request byte captured); only where the
    capture saw the hole."""
    out = []
    for w in repair_waits(sent, lo, hi, repaired_at=lambda t: t.arrive_ns):
        # only a hole the capture saw (later bytes first) is a wait there: a segment whose every
        # copy before the resend was lost, with nothing after it, looks like a first transmission
        # (queries_check.check_repairs; its query starts at the resend)
        seen = any(t.delivered and t.off is not None and t.off >= w.end and t.arrive_ns < (w.repaired_ns or 0)
                   for t in sent)
        if w.repaired_ns is not None and seen:
            out.append((max(w.sent_ns + one_way_ns, since_ns), w.repaired_ns))
    return [x for x in out if x[1] > x[0]]


def within(got: int, want: int, abs_tol: int | None = None, rel_tol: float | None = None) -> bool:
    if abs_tol is not None:
        return abs(got - want) <= abs_tol
    return abs(got - want) <= rel_tol * want


def loss_part_ns(q: dict) -> int:
    return sum(q.get(f"budget_{p}_ns") or 0 for p in LOSS_PARTS)


# ---- one draw -----------------------------------------------------------------------------

@dataclass
class ResponseTruth:
    flow: tuple
    index: int
    lo: int
    hi: int
    waits: list                        # [Wait] of all its lost first transmissions
    tail: bool = False                 # a timer-recovered tail episode in it (truth.py)
    policed_flow: bool = False
    holds_ns: list = field(default_factory=list)
    first_sent_ns: int | None = None
    acked_ns: int | None = None        # capture of the client's first ACK of its last byte
    synack_hold_ns: int | None = None  # first response only: the SYN-ACK's hold in the queue
    request_waits: list = field(default_factory=list)   # [(from, to)] of its request's lost segments
    floor_hold_ns: float = 0.0         # what the flow's least RTT sample waited beyond propagation

    def over_flow_floor(self) -> "ResponseTruth":
        """The holds above the flow's least RTT sample instead of the path's propagation: the
        floor the budget measures from (docs/queries.md; module docstring, row 3)."""
        base = self.floor_hold_ns
        return dataclasses.replace(self, holds_ns=[h - base for h in self.holds_ns],
                                   synack_hold_ns=None if self.synack_hold_ns is None else self.synack_hold_ns - base,
                                   floor_hold_ns=0.0)

    @property
    def repaired(self) -> bool:
        return all(w.repaired_ns is not None for w in self.waits)

    @property
    def loss_wait_ns(self) -> int:
        """The query's waits for lost data: its response's, and its request's (request_waits)."""
        return union_ns([w.interval for w in self.waits if w.repaired_ns is not None] + self.request_waits)

    @property
    def policing_wait_ns(self) -> int:
        return union_ns(w.interval for w in self.waits if w.repaired_ns is not None and "policer" in w.reasons)

    @property
    def mean_hold_ns(self) -> float | None:
        return sum(self.holds_ns) / len(self.holds_ns) if self.holds_ns else None

    def queued(self, line_ns: float) -> bool:
        """Did the response's RTT samples (or a first query's handshake) wait at least this much
        beyond the path's propagation delay, on average?"""
        return (self.mean_hold_ns or 0) >= line_ns or (self.synack_hold_ns or 0) >= line_ns

    @property
    def near_the_line(self) -> bool:
        """The response's mean hold or its handshake's within QUEUE_MARGIN_NS of the budget's line:
        which side of it the budget's own RTT samples fall is theirs to decide (module docstring)."""
        return any(h is not None and abs(h - QUEUE_MIN_NS) < QUEUE_MARGIN_NS
                   for h in (self.mean_hold_ns, self.synack_hold_ns))

    def queueing_ns(self, floor_ns: int) -> int:
        if self.first_sent_ns is None or self.acked_ns is None:
            return 0
        span = (self.first_sent_ns, self.acked_ns)
        delivery = span[1] - span[0] - union_ns(clip([w.interval for w in self.waits if w.repaired_ns], *span))
        q = queueing_truth_ns(delivery, self.holds_ns, floor_ns)
        if self.synack_hold_ns is not None and self.synack_hold_ns >= QUEUE_MIN_NS:
            q += self.synack_hold_ns
        return q

    def lost_frames(self) -> str:
        more = " ..." if len(self.waits) > 6 else ""
        return ", ".join(f"{w.frame}->{w.repair_frame}" for w in self.waits[:6]) + more


def _isn(lst: list) -> int | None:
    return next((t.seq for t in lst if "S" in t.flags), None)


def response_truths(truth, requests: list, params: dict) -> dict:
    """(flow, index) -> ResponseTruth for every response of a server-side capture (module docstring)."""
    from .truth import POLICING_MIN_DROPS, queue_samples

    one_way_ms = float(params.get("delay_ms", 0))
    # the RTT samples' queueing is measured where the relay logs each packet's propagation delay
    # (truth.queue_samples); a tbf bottleneck queues after the relay, per 50 ms sample only
    bq = params.get("bottleneck")
    queue_known = not (bq and params.get("bottleneck_backend", "auto") != "relay")

    reqs = collections.defaultdict(list)
    for r in requests:
        reqs[(r["src"], r["sport"], r["dst"], r["dport"])].append(r)
    out = {}
    for flow, ft in truth.flows.items():
        s2c, c2s = truth.txs.get((flow, "s2c"), []), truth.txs.get((flow, "c2s"), [])
        isn = _isn(s2c)
        if isn is None:
            continue
        tails = [(t.seq_start - isn - 1) & MASK for t in ft.tails if t.dir == "s2c" and t.timer_recovered]
        acks = sorted(((t.arrive_ns, (t.ack - isn - 1) & MASK) for t in c2s
                       if "A" in t.flags and t.delivered and "S" not in t.flags), key=lambda x: x[0])
        synack = next((t for t in s2c if "S" in t.flags and t.delivered), None)
        samples = queue_samples(s2c, c2s, one_way_ms, sacked=True) if queue_known else []
        # the flow's least RTT sample, the handshake's and the FIN's included: tailscope's rtt_min
        every = queue_samples(s2c, c2s, one_way_ms, sacked=True, control=True) if queue_known else []
        floor_hold_ns = min(q for _, q in every) * MS if every else 0.0
        req_bounds = response_bounds(reqs.get(flow, []), "req_bytes")
        syn_seen = next((t.arrive_ns for t in c2s if "S" in t.flags and t.delivered), None)
        for index, (lo, hi) in response_bounds(reqs.get(flow, [])).items():
            rt = ResponseTruth(flow, index, lo, hi, repair_waits(s2c, lo, hi),
                               tail=any(lo <= x < hi for x in tails),
                               policed_flow=ft.policer_drops >= POLICING_MIN_DROPS, floor_hold_ns=floor_hold_ns)
            data = [t for t in s2c if t.off is not None and t.len > 0 and lo <= t.off < hi]
            firsts = [t for t in data if t.off == lo]
            rt.first_sent_ns = firsts[0].t_ns if firsts else None
            rt.holds_ns = [q * MS for t, q in samples if lo <= t.off < hi]
            rt.acked_ns = next((ts for ts, a in acks if a < (1 << 31) and a >= hi
                                and (rt.first_sent_ns is None or ts > rt.first_sent_ns)), None)
            if index == 0 and samples and synack is not None:
                rt.synack_hold_ns = _handshake_hold_ns(synack, c2s, one_way_ms)
            rlo, rhi = req_bounds[index]
            seen = [t.arrive_ns for t in c2s if t.delivered and t.off is not None and t.len > 0
                    and rlo <= t.off < rhi]
            since = syn_seen if index == 0 else (min(seen) if seen else None)
            if since is not None:
                rt.request_waits = request_waits(c2s, rlo, rhi, int(one_way_ms * MS), since)
            out[(flow, index)] = rt
    return out


def _handshake_hold_ns(synack, c2s: list, one_way_ms: float) -> int | None:
    """The handshake's RTT sample above the path's floor: the SYN-ACK's wait beyond the one-way
    delay from the capture to the relay's release, and the client's ACK of it from the relay's
    read to its release (truth.queue_samples' two legs; the client's own TUN queue is not in it)."""
    ack = next((t for t in c2s if "S" not in t.flags and "A" in t.flags and t.rec and "prop_ms" in t.rec
                and t.rec.get("action") == "forward" and t.t_ns >= synack.t_ns), None)
    rec = synack.rec
    if ack is None or not rec or rec.get("action") != "forward" or synack.cap_ts_ns is None:
        return None
    legs = (rec["ts_ns"] - synack.cap_ts_ns) + (ack.rec["ts_ns"] - ack.rec["rx_ts_ns"])
    return int(legs - 2 * one_way_ms * MS)


def _paired(outputs) -> dict:
    """(flow key, query_index) -> query row."""
    keys = {f["flow_id"]: (f["client_ip"], f["client_port"], f["server_ip"], f["server_port"])
            for f in outputs.flows if f.get("protocol", "tcp") == "tcp"}
    rtt = {keys[f["flow_id"]]: (f.get("rtt_min_ns") or f.get("handshake_rtt_ns"))
           for f in outputs.flows if f["flow_id"] in keys}
    out = {}
    for q in getattr(outputs, "queries", []) or []:
        k = keys.get(q["flow_id"])
        if k is not None:
            out[(k, q["query_index"])] = (q, rtt.get(k))
    return out


def _parts(q: dict, names) -> str:
    return ", ".join(f"{p} {q.get(f'budget_{p}_ns', 0) / MS:.1f}" for p in names if q.get(f"budget_{p}_ns"))


def score_draw(name: str, truth, outputs, res, rows: dict) -> None:
    """Add one draw's queries to the rows (Row objects of evaluate.py, keyed by ROWS + CLEAN_ROW)."""
    pairs = _paired(outputs)
    params = res.params
    at_server = params.get("vantage", "server") == "server"
    kern = params.get("kernel") or {}
    # nftables drops are counted, not logged per packet; at the client the server's sends are unseen
    scored = at_server and not (kern.get("loss") or kern.get("police"))
    rts = response_truths(truth, res.requests(), params) if scored else {}
    floor_ns = int(2 * float(params.get("delay_ms", 0)) * MS)
    sigs = {(f["client_ip"], f["client_port"], f["server_ip"], f["server_port"]): f.get("signatures")
            for f in outputs.flows}
    if truth.clean:
        for (k, i), (q, _) in sorted(pairs.items(), key=lambda x: (x[0][0][1], x[0][1])):
            bad = {p: q.get(f"budget_{p}_ns") for p in CLEAN_ZERO_PARTS if q.get(f"budget_{p}_ns")}
            rt = rts.get((k, i))
            rt = rt and rt.over_flow_floor()
            if "queueing" in bad and (not at_server or (rt and rt.queued(QUEUE_MIN_NS - QUEUE_MARGIN_NS))):
                # the lab's own path queued (a loaded machine's relay behind a bulk transfer): the
                # truth measured it in the RTT samples, and the queueing row scores it
                del bad["queueing"]
            if "spurious_retransmission" in bad and k in truth.spurious_flows:
                # and that queue fired the sender's timer before the ACK was back: the truth
                # records the resends of delivered bytes (unseen axis seed 112)
                del bad["spurious_retransmission"]
            rows[CLEAN_ROW].pos_scenarios.add(name)
            if bad:
                rows[CLEAN_ROW].fp += 1
                rows[CLEAN_ROW].fp_scenarios.add(name)
                rows[CLEAN_ROW].details.append(f"FP {name}: port {k[1]} query {i}: charged "
                                               + ", ".join(f"{p} {v / MS:.1f} ms" for p, v in bad.items()))
            else:
                rows[CLEAN_ROW].tp += 1
    for (flow, index), rt in rts.items():
        q, rtt = pairs.get((flow, index), (None, None))
        if q is None or q["response_bytes"] != rt.hi - rt.lo or not rt.repaired:
            continue
        rtt = rtt or floor_ns
        where = f"port {flow[1]} query {index}"
        if rt.waits or rt.request_waits:
            got, want = loss_part_ns(q), rt.loss_wait_ns
            rows[LOSS_ANY_ROW].add(name, True, within(got, want, abs_tol=rtt),
                                   f"{where}: loss parts {got / MS:.1f} ms ({_parts(q, LOSS_PARTS)}) vs truth "
                                   f"{want / MS:.1f} ms, RTT {rtt / MS:.1f} ms; lost->repair frames {rt.lost_frames()}")
        if rt.tail:
            got, want = loss_part_ns(q), rt.loss_wait_ns
            rows[LOSS_ROW].add(name, True, within(got, want, abs_tol=rtt),
                               f"{where}: loss parts {got / MS:.1f} ms ({_parts(q, LOSS_PARTS)}) vs truth "
                               f"{want / MS:.1f} ms, RTT {rtt / MS:.1f} ms; lost->repair frames {rt.lost_frames()}")
        if rt.policed_flow and any("policer" in w.reasons for w in rt.waits):
            got, want = q.get("budget_policing_ns") or 0, rt.policing_wait_ns
            missed = "" if "policing" in (sigs.get(flow) or []) else " - tailscope did not find the flow policed"
            rows[POLICING_ROW].add(name, True, within(got, want, rel_tol=POLICING_TOL),
                                   f"{where}: policing {got / MS:.1f} ms vs truth {want / MS:.1f} ms (loss parts "
                                   f"{_parts(q, LOSS_PARTS)}){missed}; lost->repair frames {rt.lost_frames()}")
        own = rt.over_flow_floor()
        _score_queueing(rows[QUEUE_ROW] if params.get("bottleneck") else rows[QUEUE_OTHER_ROW], name, where, q, own,
                        floor_ns + rt.floor_hold_ns)
        if params.get("bottleneck"):
            _score_queueing(rows[QUEUE_PATH_ROW], name, where, q, rt, floor_ns)


def _score_queueing(row, name: str, where: str, q: dict, rt: ResponseTruth, floor_ns: float) -> None:
    """One response on a queueing row: its holds over `floor_ns` (module docstring, row 3)."""
    got = q.get("budget_queueing_ns") or 0
    if not rt.holds_ns or rt.near_the_line:
        return
    if not rt.queued(QUEUE_MIN_NS - QUEUE_MARGIN_NS):
        # no queue worth the line: nothing may be charged (a FP when it is)
        row.add(name, False, got > 0, f"{where}: queueing {got / MS:.1f} ms, truth none (mean hold "
                                      f"{(rt.mean_hold_ns or 0) / MS:.1f} ms over {len(rt.holds_ns)} RTT "
                                      f"samples, handshake hold {(rt.synack_hold_ns or 0) / MS:.1f} ms)")
    elif rt.queued(QUEUE_MIN_NS + QUEUE_MARGIN_NS) and rt.acked_ns is not None:
        want = rt.queueing_ns(floor_ns)
        row.add(name, True, within(got, want, rel_tol=QUEUE_TOL),
                f"{where}: queueing {got / MS:.1f} ms vs truth {want / MS:.1f} ms (mean hold "
                f"{(rt.mean_hold_ns or 0) / MS:.1f} ms over {len(rt.holds_ns)} RTT samples, floor "
                f"{floor_ns / MS:.0f} ms, handshake hold {(rt.synack_hold_ns or 0) / MS:.1f} ms, "
                f"transfer {(q.get('budget_transfer_ns') or 0) / MS:.1f} ms)")


def new_rows() -> dict:
    """The budget rows, empty (module docstring)."""
    from .evaluate import Row

    return {
        LOSS_ROW: Row(LOSS_ROW, "query", BUDGET_TARGET,
                      note="tail-loss responses: the budget's loss-recovery parts (rto+tlp+tail_loss+fast_retransmit+"
                           "retransmission+policing) within one RTT (flow rtt_min) of the union of the waits for the "
                           "repairs of the query's lost segments (relay log); TP = within, FN = outside "
                           "(budget_check.py)"),
        POLICING_ROW: Row(POLICING_ROW, "query", BUDGET_TARGET,
                          note="responses of policed flows the policer struck: budget_policing_ns within 20 % of the "
                               "union of the waits for the repairs of the policer's drops"),
        QUEUE_ROW: Row(QUEUE_ROW, "query", BUDGET_TARGET,
                       note="responses of bottleneck draws: budget_queueing_ns within 20 % of delivery x mean hold / "
                            "(floor + mean hold), the holds the relay log gives the RTT samples (within 10 ms of the "
                            "20 ms line: not scored; FP = charged where the truth has no queue)"),
        LOSS_ANY_ROW: Row(LOSS_ANY_ROW, "query", None,
                          note="as the tail-loss row, over every query that lost data (mid-burst losses, a policer's "
                               "drops, requests); reported, not a target"),
        QUEUE_PATH_ROW: Row(QUEUE_PATH_ROW, "query", None,
                            note="as the bottlenecked row, with the holds over the path's propagation RTT (2 x "
                                 "delay_ms) instead of the flow's least RTT sample: what the budget's floor misses "
                                 "(a flow that starts behind a queue; jitter under the mean); reported, not a target"),
        QUEUE_OTHER_ROW: Row(QUEUE_OTHER_ROW, "query", None,
                             note="as the queueing row, in draws without a bottleneck: the lab's own path queued "
                                  "(a loaded relay) or jitter spread the RTT samples; reported, not a target"),
        CLEAN_ROW: Row(CLEAN_ROW, "query", None, kind="clean",
                       note="every query of a clean draw: 0 in syn_loss, synack_loss, loss parts, spurious, queueing "
                            "(queueing the truth measured on the lab's own path excepted)"),
    }


def budget_rows(ev) -> list:
    """The budget rows over every draw of an Evaluation (evaluate.py)."""
    from .harness import ScenarioResult

    rows = new_rows()
    for name, truth in ev.truths.items():
        res, out = ev.results.get(name), ev.outputs.get(name)
        if isinstance(res, ScenarioResult) and out is not None:
            score_draw(name, truth, out, res, rows)
    return list(rows.values())


def score_datasets(results: dict, datasets: dict) -> list:
    """The budget rows over finished runs ({name: ScenarioResult}) and tailscope's datasets of
    them ({name: directory}), e.g. queries_check.py's named scenarios."""
    from types import SimpleNamespace

    from .evaluate import _read
    from .truth import derive

    rows = new_rows()
    for name, res in results.items():
        if name in datasets:
            out = SimpleNamespace(flows=_read(datasets[name], "flows"), queries=_read(datasets[name], "queries"))
            score_draw(name, derive(res), out, res, rows)
    return list(rows.values())


def budget_table(rows: list) -> str:
    """The rows as a table with each row's failures (queries_check.py)."""
    lines = [f"{'row':<50} {'TP':>4} {'FP':>4} {'FN':>4} {'share':>7} {'target':>7}  result"]
    for r in rows:
        share = "-" if r.recall is None else f"{r.recall:.3f}"
        tp = f"{r.tp} ok" if r.kind == "clean" else str(r.tp)
        lines.append(f"{r.signature:<50} {tp:>4} {r.fp:>4} {r.fn:>4} {share:>7} "
                     f"{'-' if r.target is None else r.target:>7}  {r.result}")
    for r in rows:
        lines += [f"   {d}" for d in r.details[:6]]
    return "\n".join(lines)

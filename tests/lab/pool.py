"""Precision and recall over a pool of randomized lab draws (draws.py).

    sudo python -m tests.lab.pool --seeds 1-24 --out /tmp/lab-pool     # run, analyse, print the table
    python -m tests.lab.pool --seeds 1-24 --reuse /tmp/lab-pool        # re-score finished runs
    make lab-pool SEEDS=1-200                                           # the larger pool, by hand

One decision unit per signature as in evaluate.py (flows, tail-loss episodes, retransmitted
packets), counted over every draw of the pool. Pooling is what makes the figures stable: a single
draw holds few occurrences of any one signature. Added to evaluate.py's rows:

* `retx timer (rto|tlp) [s2c]`: the issue's "timer vs SACK/dupACK-driven" split. RTO and TLP are
  both timers and fire together when one segment is in flight, so the pool scores the class, not
  the name; `retx_cause=rto` and `=tlp` stay in the table for information.
* `policing rate within 15%` / `policing burst within 50%`: for every policed flow tailscope
  found, the fitted rate and bucket against the relay's configured token bucket (Flach et al.
  2016 report the rate; the bucket is what the burst estimate is checked against).
* the time budget against the relay log (issue 27, budget_check.py): a tail-loss response's
  loss-recovery parts within one RTT of the truth's wait for the repair, a policed response's
  policing part and a bottlenecked response's queueing part within 20 %, and nothing charged to
  loss or queueing in clean draws; share of qualifying queries >= 0.90 (ROW_TARGETS).
* `rwnd_limited within 10% of the kernel's` (issue 29): per flow, tailscope's `rwnd_limited_ns`
  against the server kernel's own receiver-limited time (tcp_info `tcpi_rwnd_limited`, logged by
  apps.py's server at each connection's close). Scored where either says at least RWND_FLOOR_NS:
  TP = within RWND_TOL of the kernel's; FN = the kernel's time missed or off by more; FP = time
  tailscope reports on a flow the kernel says was not limited.
* per axis (draws.AXES: timestamps off, SACK off, IPv6, slow reader, GSO, BBR behind a policer):
  every targeted row again over the draws with that axis only, named `<row> [<axis>]`, held to
  the same targets when the axis holds positives of the row (issue 29).
* the worst draws: per draw, its FPs and FNs over the targeted rows, most first, with the
  parameters that made the draw (seed -> `python -m tests.lab.pool --seeds N` re-runs it).

Targets (issue 16): >= 0.95 precision and recall for each row in POOL_TARGETS (the budget rows:
their ROW_TARGETS); no signature in clean draws, no loss or queueing charged in their budgets.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .budget_check import BUDGET_TARGET, LOSS_ROW, POLICING_ROW, QUEUE_ROW, budget_rows
from .draws import AXES, FAMILIES, at_client, axis_names, parse_seeds, pool
from .evaluate import TARGET, Evaluation, Row, evaluate, format_table
from .harness import ScenarioResult, load_finished, run_scenarios
from .truth import POLICER_RATE_OBSERVABLE

# CI's pool: 5 draws of each family (40 draws, ~2 minutes on 2 cores), and 7 more of the
# bottleneck family (~30 s): the budget's queueing row is a share of responses, and seeds 1-40
# hold only 9-11 that qualify, so one response at the edge of the scored band failed its 0.90
# (CI, 2026-11-28: draw0038 port 43084 query 1, mean hold 30.0 ms over 9 samples, 27.2 vs 34.0
# ms). With these ~28 qualify. A larger pool is run by hand (make lab-pool), kept in
# docs/accuracy.md.
RWND_ROW = "rwnd_limited within 10% of the kernel's"
RWND_TOL = 0.10
# below this neither side's figure is scored: the kernel's chrono and the capture's view of the
# window differ by an ACK's flight at each start and stop, a few ms on a 20-400 ms path
RWND_FLOOR_NS = 50_000_000
CI_SEEDS = "1-40,46,54,62,70,78,86,94"
RATE_TOL, BURST_TOL = 0.15, 0.50
FLOOR_ROW = f"policing rate, flow under {POLICER_RATE_OBSERVABLE:.0%} of it"
POOL_TARGETS = ["synack_loss", "syn_loss", "tail_loss", "retx timer (rto|tlp) [s2c]",
                "retx_cause=fast_retransmit [s2c]", "retx_cause=spurious [s2c]", "reordering", "policing", "bufferbloat",
                "policing rate within 15%", FLOOR_ROW, "policing burst within 50%",
                LOSS_ROW, POLICING_ROW, QUEUE_ROW, RWND_ROW]
# Rows held to another figure than TARGET: the time budget's shares of queries within tolerance
# (issue 27's first gate; budget_check.py, docs/accuracy.md)
ROW_TARGETS = {LOSS_ROW: BUDGET_TARGET, POLICING_ROW: BUDGET_TARGET, QUEUE_ROW: BUDGET_TARGET}
# At a client-side capture (draws.at_client): what that vantage sees whole - the client's SYNs and
# the server's data arriving out of order. The server-direction detectors and a SYN-ACK lost before
# the capture are reported, not scored (truth.FlowTruth.unobservable).
CLIENT_TARGETS = ["syn_loss", "reordering"]
TIMER = ("rto", "tlp")


@dataclass
class PoolEvaluation:
    ev: Evaluation
    draws: dict                                   # name -> Scenario
    axis_rows: list = field(default_factory=list)  # rows named "<row> [<axis>]", over that axis's draws
    worst: list = field(default_factory=list)     # (fp + fn, name, description, [lines])
    targets: list = field(default_factory=lambda: list(POOL_TARGETS))
    table: str = ""
    table_path: Path | None = None

    def row(self, signature: str) -> Row:
        return self.ev.row(signature)

    @property
    def rows(self) -> list:
        return self.ev.rows


def _timer_row(ev: Evaluation) -> Row:
    """The timer class from the per-packet confusion counts (evaluate.py)."""
    row = Row("retx timer (rto|tlp) [s2c]", "retx pkt", TARGET,
              note="truth rto/tlp (incl. one segment in flight) vs tailscope rto/tlp")
    for (truth, pred), n in ev.confusion.get("s2c", {}).items():
        t_timer = truth.split("(")[0] in TIMER
        p_timer = pred in TIMER
        if t_timer and p_timer:
            row.tp += n
        elif t_timer:
            row.fn += n
            row.details.append(f"FN (pooled): {n} x truth {truth}, tailscope {pred}")
        elif p_timer:
            row.fp += n
            row.details.append(f"FP (pooled): {n} x truth {truth}, tailscope {pred}")
    return row


def _policing_fit_rows(ev: Evaluation, draws: dict) -> list:
    rate = Row("policing rate within 15%", "policed flow", TARGET,
               note="tailscope's policing_rate_bps vs the relay's token-bucket rate (IP bytes)")
    burst = Row("policing burst within 50%", "policed flow", TARGET,
                note="tailscope's policing_burst_bytes vs the relay's bucket")
    floor = Row(FLOOR_ROW, "policed flow", TARGET,
                note=f"flows that carried under {POLICER_RATE_OBSERVABLE:.0%} of the policer's rate between their "
                     "first and last drop: their drops bound the rate from below (truth.py); "
                     "TP = fitted rate at least what the flow carried, at most the configured rate x 1.15")
    for name, t in ev.truths.items():
        sc = draws.get(name)
        if sc is None or not sc.police:
            continue
        o = ev.outputs[name]
        by_key = {(f["client_ip"], f["client_port"], f["server_ip"], f["server_port"]): f for f in o.flows}
        conf_rate = sc.police["rate_kbit"] * 1000
        conf_burst = sc.police["burst_bytes"]
        for key, ft in t.flows.items():
            f = by_key.get(key) or {}
            if "policing" not in ft.labels() or "policing" not in (f.get("signatures") or []):
                continue
            r, b = f.get("policing_rate_bps"), f.get("policing_burst_bytes")
            ok_r = r is not None and abs(r - conf_rate) <= RATE_TOL * conf_rate
            ok_b = b is not None and abs(b - conf_burst) <= BURST_TOL * conf_burst
            used = ft.policer_rate_used
            detail = f"port {key[1]}: fitted {r and round(r)} bit/s, configured {conf_rate}"
            if used is not None and used < POLICER_RATE_OBSERVABLE:
                carried = used * conf_rate
                floor.add(name, True, r is not None and carried * 0.95 <= r <= conf_rate * (1 + RATE_TOL),
                          f"{detail}, carried {round(carried)} ({used:.0%})")
            else:
                rate.add(name, True, ok_r, detail)
            burst.add(name, True, ok_b, f"port {key[1]}: fitted {b} B, configured {conf_burst}")
    return [rate, burst, floor]


def kernel_tcp_info(res: ScenarioResult) -> dict:
    """The server's tcp_info records (apps.py) by flow key (client ip, port, server ip, port)."""
    path = res.files.get("server_log")
    if not path or not Path(path).exists():
        return {}
    out = {}
    for line in Path(path).read_text().splitlines():
        r = json.loads(line)
        if r.get("kind") == "tcp_info":
            out[(r["src"], r["sport"], r["dst"], r["dport"])] = r
    return out


def _rwnd_row(ev: Evaluation) -> Row:
    row = Row(RWND_ROW, "flow", TARGET,
              note=f"tailscope's flows.rwnd_limited_ns vs the server kernel's tcp_info rwnd_limited, flows where "
                   f"either is >= {RWND_FLOOR_NS / 1e6:.0f} ms; TP = within {RWND_TOL:.0%} of the kernel's")
    for name, res in ev.results.items():
        o = ev.outputs.get(name)
        if not isinstance(res, ScenarioResult) or o is None:
            continue
        kinfo = kernel_tcp_info(res)
        by_key = {(f["client_ip"], f["client_port"], f["server_ip"], f["server_port"]): f for f in o.flows}
        for key, k in kinfo.items():
            if "rwnd_limited_us" not in k:
                continue
            kern = k["rwnd_limited_us"] * 1000
            ours = (by_key.get(key) or {}).get("rwnd_limited_ns") or 0
            if kern < RWND_FLOOR_NS and ours < RWND_FLOOR_NS:
                continue
            ok = abs(ours - kern) <= RWND_TOL * kern
            row.add(name, kern >= RWND_FLOOR_NS, ok if kern >= RWND_FLOOR_NS else True,
                    f"port {key[1]}: kernel {kern / 1e6:.1f} ms, tailscope {ours / 1e6:.1f} ms")
    return row


RETRANS_ROW = "truth's server resends = tcp_info total_retrans"


def _retrans_row(ev: Evaluation) -> Row:
    """The truth against the server kernel, per flow (reported, not a target): the replay's resends
    of server data (and FINs) up to the tcp_info record, plus the repeated SYN-ACKs, against
    total_retrans (which counts wire segments, and a request socket's SYN-ACK resends, as the
    truth does)."""
    row = Row(RETRANS_ROW, "flow", None,
              note="TP = equal; FN = differ (the evidence lists both); the kernels' MIB counters are checked per "
                   "draw as before (truth.counter_check)")
    for name, t in ev.truths.items():
        res = ev.results.get(name)
        if not isinstance(res, ScenarioResult):
            continue
        for key, k in kernel_tcp_info(res).items():
            if "total_retrans" not in k:
                continue
            # as of the record: the server reads tcp_info when the client has closed, before its
            # own FIN, whose resends come after
            resends = sum(1 for r in t.retx if r.dir == "s2c" and r.flow == key and r.t_ns <= k["t_ns"])
            synacks = sum(1 for x in t.txs.get((key, "s2c"), []) if "S" in x.flags)
            ours = resends + max(0, synacks - 1)
            row.add(name, True, ours == k["total_retrans"],
                    f"port {key[1]}: truth {ours} resends, kernel total_retrans {k['total_retrans']}")
    return row


def _axis_rows(ev: Evaluation, draws: dict, work_dir: Path, targets: list) -> list:
    """Each targeted row again over the draws of one axis (draws.AXES)."""
    out = []
    for axis in AXES:
        names = [n for n in ev.results if n in draws and axis in axis_names(draws[n])]
        if not names:
            continue
        sub = evaluate({n: ev.results[n] for n in names}, work_dir, ev.outputs, ev.truths)
        sub.rows += [_timer_row(sub), *_policing_fit_rows(sub, draws), *budget_rows(sub), _rwnd_row(sub)]
        for r in sub.rows:
            if r.signature not in targets and r.kind != "clean":
                continue
            r.signature, r.note = f"{r.signature} [{axis}]", ""     # the note is the pooled row's
            if r.kind == "pr":
                r.target = ROW_TARGETS.get(r.signature.rsplit(" [", 1)[0], TARGET)
            out.append(r)
    return out


_WHO = re.compile(r"^(FP|FN) (draw\d+_\w+):")


def score(results: dict, work_dir: Path, draws: dict, outputs: dict | None = None,
          targets: list | None = None) -> PoolEvaluation:
    """Pooled rows over finished draws; tailscope runs on each unless `outputs` has it. `targets`:
    the rows held to the target (POOL_TARGETS; CLIENT_TARGETS for draws captured at the client)."""
    targets = list(targets or POOL_TARGETS)
    ev = evaluate(results, work_dir, outputs)
    ev.rows += [_timer_row(ev), *_policing_fit_rows(ev, draws), *budget_rows(ev), _rwnd_row(ev), _retrans_row(ev)]
    # the pool's targets, not evaluate.py's (which are set for the named scenarios)
    for r in ev.rows:
        if r.signature in targets:
            r.target = ROW_TARGETS.get(r.signature, TARGET)
        elif r.kind == "pr":
            r.target = None
    pe = PoolEvaluation(ev, draws, targets=targets)
    pe.axis_rows = _axis_rows(ev, draws, work_dir, targets)
    per_draw: dict = collections.defaultdict(list)
    for r in ev.rows:
        if r.signature not in targets and r.kind != "clean":
            continue
        for d in r.details:
            m = _WHO.match(d)
            if m:
                per_draw[m.group(2)].append(f"{r.signature}: {d}")
    for name, res in results.items():
        if not isinstance(res, ScenarioResult) or res.problems:
            per_draw[name].append(f"run problems: {res if not isinstance(res, ScenarioResult) else res.problems}")
    pe.worst = sorted(((len(v), n, draws[n].description if n in draws else "", v) for n, v in per_draw.items()),
                      reverse=True)
    return pe


def broken_tables(pe: PoolEvaluation) -> dict:
    """The draws whose tables disagree with each other (tests/support/invariants.py), with how."""
    return {n: o.invariant_violations for n, o in pe.ev.outputs.items() if o.invariant_violations}


def format_pool(pe: PoolEvaluation, details: int = 6, worst: int = 8) -> str:
    fams = collections.Counter(n.removesuffix("_client").split("_", 1)[1] for n in pe.draws)
    at_client = sum(1 for sc in pe.draws.values() if getattr(sc, "vantage", "server") == "client")
    head = [f"pool: {len(pe.draws)} draws (" + ", ".join(f"{f} {fams[f]}" for f in FAMILIES if fams[f]) + ")"
            + (f", {at_client} captured at the client" if at_client else "")]
    targets = [r for r in pe.rows if r.signature in pe.targets or r.kind == "clean"]
    head.append("targeted: " + ", ".join(f"{r.signature} {r.result}" for r in targets))
    broken = broken_tables(pe)
    head.append(f"tables agree (tests/support/invariants.py): {len(pe.ev.outputs) - len(broken)} of "
                f"{len(pe.ev.outputs)} draws" + "".join(f"\n  {n}: {v[0][:300]}" for n, v in sorted(broken.items())))
    body = format_table(pe.ev, details)
    if pe.axis_rows:
        from .evaluate import Evaluation as _Ev
        axes = collections.Counter(a for sc in pe.draws.values() for a in axis_names(sc))
        body += ("\n\nper axis (" + ", ".join(f"{a} {axes[a]} draws" for a in AXES if axes[a]) + "):\n"
                 + format_table(_Ev([r for r in pe.axis_rows if r.tp + r.fp + r.fn], {}, {}, []), details)
                 + "\n(rows of an axis without any occurrence are left out)")
    tail = ["", f"worst draws (FP + FN over the targeted rows; first {worst}):"]
    for n_bad, name, desc, lines in pe.worst[:worst]:
        tail.append(f"  {name}: {n_bad}  [{desc[:200]}]")
        tail += ["      " + x[:220] for x in lines[:4]]
    return "\n".join(head + ["", body] + tail)


def axis_failures(pe: PoolEvaluation) -> list:
    """The per-axis rows that miss their target (rows without positives of the axis are n/a)."""
    return [r for r in pe.axis_rows if not (r.result == "PASS" or r.result.startswith("n/a") or r.result == "info")]


def passed(pe: PoolEvaluation) -> bool:
    targeted = [r for r in pe.rows if r.signature in pe.targets or r.kind == "clean"]
    return (not broken_tables(pe) and not axis_failures(pe)
            and all(r.result == "PASS" or r.result.startswith("n/a") for r in targeted))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.pool", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default=CI_SEEDS, help=f"seeds: '1-24', '3,7,9' (default {CI_SEEDS})")
    ap.add_argument("--out", default="lab-pool", help="output directory")
    ap.add_argument("--reuse", action="store_true", help="score the finished runs in --out instead of running")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--details", type=int, default=8)
    ap.add_argument("--json", help="also write the rows as JSON here")
    ap.add_argument("--no-axes", action="store_true",
                    help="draw without the stack/capture axes (draws.draw(axes=False): CI's main pool)")
    ap.add_argument("--at-client", action="store_true",
                    help="capture each draw at the client's eth0 (named <draw>_client; scored on CLIENT_TARGETS)")
    a = ap.parse_args(argv)
    scs = pool(parse_seeds(a.seeds), axes=not a.no_axes)
    if a.at_client:
        scs = [at_client(sc) for sc in scs]
    out = Path(a.out)
    if a.reuse:
        results = load_finished(out, scs)
    else:
        results = run_scenarios(scs, out, max_parallel=a.parallel, return_exceptions=True)
    pe = score(results, out / "eval", {s.name: s for s in scs}, targets=CLIENT_TARGETS if a.at_client else None)
    text = format_pool(pe, a.details)
    print(text)
    (out / "pool-table.txt").write_text(text + "\n")
    if a.json:
        Path(a.json).write_text(json.dumps([{k: getattr(r, k) for k in ("signature", "unit", "tp", "fp", "fn",
                                                                         "precision", "recall", "target", "result")}
                                            for r in pe.rows], indent=1))
    return 0 if passed(pe) else 1


if __name__ == "__main__":
    sys.exit(main())

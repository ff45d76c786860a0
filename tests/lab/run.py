"""Run lab scenarios by hand.

    sudo python -m tests.lab.run tail_loss --out /tmp/lab
    sudo python -m tests.lab.run all --out /tmp/lab --parallel 3
    sudo python -m tests.lab.run quic --out /tmp/lab --parallel 3   # the QUIC scenarios (needs aioquic)
    python -m tests.lab.run --list
    sudo python -m tests.lab.run --cleanup      # remove namespaces of dead runs

Prints one summary per scenario (what the relay dropped, what the hosts'
TCP counters say, where the files are); exit status 1 if any run had problems.
"""
from __future__ import annotations

import argparse
import collections
import sys

from .harness import ScenarioResult, lab_available, run_scenarios
from .scenarios import QUIC_SCENARIOS, SCENARIOS
from .topology import cleanup_stale

_TCP_KEYS = ("TCPSynRetrans", "TCPLossProbes", "TCPLossProbeRecovery", "TCPTimeouts", "TCPFastRetrans",
             "TCPSackRecovery", "TCPSpuriousRTOs", "TCPDSACKRecv", "TCPSACKReorder", "TCPOFOQueue")


def summarize(r: ScenarioResult) -> str:
    drops = collections.Counter(f"{d['reason']}{':' + d['rule_kind'] if d.get('rule_kind') else ''}/{d['dir']}"
                                for d in r.drops())
    holds = sum(1 for e in r.emulator_records() if e.get("action") == "hold")
    lines = [f"{r.name}: {'ok' if r.ok else 'PROBLEMS'}  run {r.duration_s:.2f}s  traffic {r.traffic_s:.2f}s  "
             f"packets captured {r.capture_stats.get('captured')}  requests {len(r.requests())}",
             f"  relay drops: {dict(drops) or '-'}  holds: {holds}  backends: {r.backends}"]
    if r.params.get("app") == "quic":
        recs = r.client_records()
        att = collections.Counter(x.get("outcome") for x in recs if x.get("kind") == "quic_attempt")
        ses = collections.Counter(f"{x.get('effective')}->{x.get('transport')}" for x in recs
                                  if x.get("kind") == "session")
        lines.append(f"  quic attempts: {dict(att) or '-'}  sessions (mode->transport): {dict(ses)}")
    for role in ("server", "client"):
        ext = r.kernel_counters.get(role, {}).get("TcpExt", {})
        got = {k: ext[k] for k in _TCP_KEYS if ext.get(k)}
        lines.append(f"  {role} TCP: {got or '-'}")
    lines.append(f"  files: {r.pcap}  {r.emulator_log.name}  {r.client_log.name}  {r.meta.name}")
    lines += [f"  problem: {p}" for p in r.problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenarios", nargs="*", help="scenario names, 'all' (TCP) or 'quic'")
    ap.add_argument("--out", default="lab-out", help="output directory (default: lab-out)")
    ap.add_argument("--parallel", type=int, default=1, help="scenarios to run at once")
    ap.add_argument("--snaplen", type=int, help="override the capture snaplen (bytes)")
    ap.add_argument("--seed", type=int, help="override the scenario seed")
    ap.add_argument("--list", action="store_true", help="list scenarios and exit")
    ap.add_argument("--cleanup", action="store_true", help="remove namespaces left by dead runs and exit")
    a = ap.parse_args(argv)
    if a.list:
        for s in [*SCENARIOS.values(), *QUIC_SCENARIOS.values()]:
            print(f"{s.name:20s} {s.description}")
        return 0
    ok, why = lab_available()
    if not ok:
        print(f"lab unavailable: {why}", file=sys.stderr)
        return 2
    if a.cleanup:
        print("\n".join(cleanup_stale()) or "nothing to clean")
        return 0
    names = (list(SCENARIOS) if a.scenarios == ["all"] else list(QUIC_SCENARIOS) if a.scenarios == ["quic"]
             else a.scenarios)
    if not names:
        ap.error("name at least one scenario (see --list)")
    overrides = {k: v for k, v in (("snaplen", a.snaplen), ("seed", a.seed)) if v is not None}
    results = run_scenarios(names, a.out, max_parallel=a.parallel, **overrides)
    for r in results.values():
        print(summarize(r))
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""What the lab's test modules share: the skip where the lab cannot run, the runs that went
wrong, the evidence behind a missed target, and the table printed into the test log."""
from __future__ import annotations

from pathlib import Path


def require_lab() -> None:
    """Skip the calling test or fixture where the lab cannot run (not root, no /dev/net/tun, a
    tool missing): the reason is lab_available()'s."""
    import pytest

    from tests.lab import lab_available

    ok, why = lab_available()
    if not ok:
        pytest.skip(f"lab unavailable: {why}")


def failed_runs(results: dict) -> dict:
    """Scenario name -> the exception it raised or its problems, for the runs that went wrong."""
    return {n: (r if isinstance(r, Exception) else r.problems) for n, r in results.items()
            if isinstance(r, Exception) or r.problems}


def why(ev, row) -> str:
    """A missed target's counts and first evidence lines, and where the whole table is."""
    return "\n".join([f"{row.signature}: TP {row.tp} FP {row.fp} FN {row.fn}"] + row.details[:15]
                     + [f"(full table: {ev.table_path})"])


def show_table(ev, request, capsys, name: str) -> None:
    """Print the evaluation's table into the test log (also without -s) and attach it to the
    report as the user property `name`."""
    request.node.user_properties.append((name, ev.table))
    with capsys.disabled():
        print(f"\n{ev.table}\n(written to {ev.table_path})")


def rerun_once(scenarios, results: dict, bad, out_dir: Path) -> dict:
    """`results` with the runs named in `bad` repeated once, in out_dir/retry. A run whose own
    ground truth went wrong on a busy machine (the client failed, the capture dropped packets, a
    loss nothing logged) measures the lab, not tailscope; the tests still fail if it goes wrong
    again."""
    from .harness import run_scenarios

    retry_dir = Path(out_dir) / "retry"
    retry_dir.mkdir()
    rerun = run_scenarios([s for s in scenarios if s.name in bad], retry_dir, max_parallel=2,
                          return_exceptions=True)
    return {**results, **rerun}


def untrustworthy(ev, accept=None) -> set:
    """Scenario names whose own ground truth is inconsistent: the run failed, the replayed causes
    disagree with the senders' kernel counters (a check `accept(truth, key, check)` explains is
    not counted), or the capture and the relay log disagree. Such a run went wrong on a busy
    machine; it is repeated once (`rerun_once`)."""
    bad = set(failed_runs(ev.results))
    bad |= {n for n, t in ev.truths.items()
            if any(not v["ok"] and not (accept and accept(t, k, v)) for k, v in t.counter_check.items())}
    bad |= {w.split(":", 1)[0] for w in ev.warnings if "relay record" in w or "no flow" in w}
    return bad

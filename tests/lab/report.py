"""What the lab's test modules share when they report: the runs that went wrong, the evidence
behind a missed target, and the table printed into the test log."""
from __future__ import annotations


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

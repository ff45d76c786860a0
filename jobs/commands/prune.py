"""`tailscope prune`: remove the days older than a retention period (docs/privacy.md)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "prune",
        help="remove whole days of data older than a retention period (dry run unless --yes)",
        description="Remove the date partitions of every table older than --older-than, and their "
        "inputs from the ledger, in one commit: the dataset's retention horizon, which every view "
        "applies, so readers see the dataset before or after the prune, never half of it. Without "
        "--yes, only says what would go.",
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--older-than", required=True, metavar="AGE", help="retention: e.g. 30d, 8w, 36h (whole UTC days go)")
    p.add_argument("--yes", action="store_true", help="do it (default: a dry run)")
    p.add_argument("--grace", type=float, default=5.0, metavar="SEC",
                   help="wait this long between the commit and deleting files, for queries already running (default: 5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.dataset import prune

    try:
        age = prune.parse_age(args.older_than)
        if args.grace < 0:
            raise prune.PruneError("--grace must be at least 0")
        if not args.dataset.is_dir():
            raise prune.PruneError(f"{args.dataset}: no such dataset directory")
        plan = prune.plan(args.dataset, age)
    except prune.PruneError as exc:
        print(f"tailscope prune: error: {exc}", file=sys.stderr)
        return 2
    verb = "removing" if args.yes else "would remove"
    print(f"horizon {plan.horizon}: {verb} {len(plan.partitions)} partitions ({plan.bytes / 2**20:.1f} MiB) "
          f"and {len(plan.inputs)} inputs from the ledger")
    for table, day, _, size in plan.partitions:
        print(f"  {table}/date={day}  {size / 2**20:.1f} MiB")
    for run, path in plan.inputs:
        print(f"  input {path} (run {run})")
    if not args.yes:
        print("dry run: nothing changed (--yes to prune)")
        return 0
    prune.apply(args.dataset, plan, grace_s=args.grace, log=lambda m: print(m, file=sys.stderr))
    return 0

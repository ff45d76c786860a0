"""`tailscope compact`: rewrite partitions of many small part files as few large ones."""
from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compact",
        help="rewrite the partitions holding many small part files as few large ones",
        description="Rewrite every date partition (and the files table) holding more than --over part files (a fleet's hourly "
        "runs leave one per table, day and run) as few large ones, in one commit: readers see the "
        "old files or the new ones, never both and never neither (jobs/dataset/compact.py); a query "
        "that listed the old files just before fails naming one, and can be run again. The ledger, --reprocess, prune and "
        "pseudonymization records stay as they were. A local dataset only. Run it when no analyze "
        "writes to the dataset; `analyze --compact-over N` does it after each run.",
    )
    # a str, not a Path: Path("s3://b/ds") is "s3:/b/ds", which the URL check would not refuse
    p.add_argument("dataset", metavar="DATASET", help="dataset directory (tailscope analyze --out); a local one")
    p.add_argument("--over", type=int, default=1, metavar="N",
                   help="compact the partitions holding more than N part files (default: 1, every partition of several)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.dataset import compact

    if args.over < 1:
        print("tailscope compact: error: --over must be at least 1", file=sys.stderr)
        return 2
    try:
        r = compact.compact(args.dataset, over=args.over, log=lambda m: print(m, file=sys.stderr))
    except (compact.CompactError, OSError) as exc:
        print(f"tailscope compact: error: {exc}", file=sys.stderr)
        return 1
    if r.run_id is None:
        print(f"nothing to compact: no partition holds more than {args.over} part files")
    else:
        print(f"compaction {r.run_id}: {len(r.partitions)} partitions, "
              f"{sum(len(p.parts) for p in r.partitions)} parts -> {len(r.outputs)}")
    return 0

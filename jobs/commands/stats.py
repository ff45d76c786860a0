"""`tailscope stats`: the field-study tables and tail-latency attribution for a dataset slice."""
from __future__ import annotations

import argparse
import sys

EXIT_OK = 0
EXIT_USAGE = 2

EPILOG = """\
tables:
  overview     flows, packets, queries in the slice; how many flows have unknown enrichment
  network      the ride-hailing field study's table: RTT p50/75/95/99 and variance, share of
               packets retransmitted, loss rate in lossy connections, connections with at least
               one loss (of those: during establishment / during data), retransmission delay
               p50/75/95/99, retransmissions of one segment p50/75/95/99
  budget       where the time went: for all queries and those at or above p50/p95/p99 latency,
               each part of the time budget (connection setup, server, transfer, queueing, loss
               recovery by cause, policing, ...): its share of the time (<= 100%, summing to
               100%), its mean per query, and the percentile without it (what if)
  what_changed the latest week (or --week) against the week before: p50/p95/p99, the change
               with its 95% bootstrap interval, beyond noise or not, the part that moved most
  attribution  for all queries and those at or above p50/p95/p99 latency: the share carrying
               each signature, median latency with and without it, the overlapping delay it was
               charged (secondary: it can exceed the latency)
  quic_vs_tcp  QUIC and TCP side by side: queries, latency p50/p95/p99, the QUIC tail reduction
               1 - p99(QUIC)/p99(TCP) with its 95% bootstrap interval (small samples flagged),
               loss signatures' share of each p99 tail, handshake RTT, QUIC attempts that ended
               on TCP, client sessions that used both

slices (repeat an option for several values; options combine with AND; 'unknown' selects
flows without that enrichment):
  tailscope stats DS --carrier "Northwind Mobile" --week 2026-W47
  tailscope stats DS --hexagon 861969c97ffffff     (a coarser cell takes the hexagons inside it)
  tailscope stats DS --by carrier --format markdown
  tailscope stats DS --week 2026-W47 --by network_type --table quic_vs_tcp

definitions: docs/stats.md
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "stats",
        help="field-study tables (RTT, loss, retransmissions) and tail-latency attribution for a slice",
        description="Print, for a dataset and a slice of it (carrier, hexagon, site, week, network type, "
        "region), the network metrics of the ride-hailing field study and the attribution of tail query "
        "latency to transport signatures.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--carrier", action="append", default=[], metavar="NAME", help="carrier name (case-insensitive)")
    p.add_argument("--hexagon", action="append", default=[], metavar="H3", help="H3 cell, any resolution")
    p.add_argument("--site", action="append", default=[], metavar="NAME", help="capture site")
    p.add_argument("--week", action="append", default=[], metavar="YYYY-Www", help="ISO week of the flow's start (UTC)")
    p.add_argument("--network-type", action="append", default=[], metavar="TYPE", help="LTE, 5G, 3G, 2G, Wi-Fi, ...")
    p.add_argument("--region", action="append", default=[], metavar="NAME", help="region name")
    p.add_argument("--by", choices=["carrier", "hexagon", "site", "week", "network_type", "region"], help="one column (text) or group (csv/json) per value")
    p.add_argument("--format", "-f", choices=["text", "csv", "json", "markdown"], default="text", help="output format (default: text)")
    p.add_argument("--table", choices=["overview", "network", "budget", "what_changed", "attribution", "quic_vs_tcp"], help="print only this table (csv: plain CSV without the section line)")
    p.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of standard output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tailscope.jobs.analytics.stats import (
        Slice,
        StatsError,
        compute_stats,
        render,
        slice_values,
    )

    try:
        slice_ = Slice(
            carrier=args.carrier,
            hexagon=args.hexagon,
            site=args.site,
            week=args.week,
            network_type=args.network_type,
            region=args.region,
        )
        tables = compute_stats(Path(args.dataset), slice_, by=args.by)
        text = render(tables, args.format, dataset=str(args.dataset), slice_desc=slice_.describe(), by=args.by, only=args.table)
    except StatsError as exc:
        print(f"tailscope stats: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not tables["overview"]:
        print(f"tailscope stats: no flows match {slice_.describe()}", file=sys.stderr)
        for dim, values in slice_values(Path(args.dataset), list(slice_.active())).items():
            print(f"  {dim} values in the dataset: {', '.join(values) or '-'}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK

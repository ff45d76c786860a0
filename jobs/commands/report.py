"""`tailscope report`: the weekly root-cause report (HTML with plots, and Markdown)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

EPILOG = """\
sections: summary; the field-study tables (tailscope stats); p99 by carrier with the signatures
of each carrier's p99 tail and the delay charged to them; p99 by hexagon (per carrier); a
hexagon map; week-over-week deltas; the worst flows with their ids; data quality.

writes DIR/report-YYYY-Www.html (self-contained: inline CSS and SVG, no external resources),
DIR/report-YYYY-Www.md and DIR/hexagons-YYYY-Www.geojson (the cells with their p99).

  tailscope report demo-out --week 2026-W47 --out reports/
  tailscope report /data/ds --out reports/ --grafana-url http://grafana:3000

definitions: docs/stats.md, sql/README.md

exit status: 0 written; 2 bad arguments, or not a dataset; 3 nothing to report: the week asked
for (or the whole dataset) has no flows; the message names the weeks that have some, and no
file is written
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="weekly root-cause report: p99 by carrier and hexagon, the signatures behind it, week-over-week (HTML + Markdown)",
        description="Write the weekly root-cause report of a dataset: the field-study tables, p99 latency by carrier "
        "and hexagon with the signatures that make the tail and the delay charged to them, a hexagon map, "
        "week-over-week deltas and the worst flows with their ids.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--week", metavar="YYYY-Www", help="ISO week (UTC), e.g. 2026-W47 (default: the latest week with flows)")
    p.add_argument("--out", "-o", type=Path, required=True, metavar="DIR", help="directory to write the report to")
    p.add_argument("--top", type=int, default=15, metavar="N", help="rows of the hexagon and worst-flow tables (default: 15)")
    p.add_argument("--min-queries", type=int, default=1, metavar="N",
                   help="rank only hexagons with at least N complete queries (default: 1)")
    p.add_argument("--grafana-url", metavar="URL", help="link flow ids to the Grafana flow drill-down dashboard at URL")
    p.add_argument("--show-clients", action="store_true",
                   help="name the worst flows' clients by full address (default: their /24 or /48 network; docs/privacy.md)")
    p.add_argument("--db", type=Path, metavar="FILE", help="query this tailscope database instead of building a temporary one")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.analytics.report import NoFlows, ReportError, ReportOptions, write_report

    if args.top < 1 or args.min_queries < 1:
        print("tailscope report: error: --top and --min-queries must be at least 1", file=sys.stderr)
        return 2
    options = ReportOptions(week=args.week, top=args.top, min_queries=args.min_queries, grafana_url=args.grafana_url, db=args.db,
                            show_clients=args.show_clients)
    try:
        paths = write_report(args.dataset, args.out, options)
    except NoFlows as exc:
        print(f"tailscope report: nothing to report: {exc}", file=sys.stderr)
        return 3
    except ReportError as exc:
        print(f"tailscope report: error: {exc}", file=sys.stderr)
        return 2
    for note in paths.notes:
        print(f"tailscope report: note: {note}", file=sys.stderr)
    print(f"report {paths.week}: {paths.html}")
    print(f"markdown: {paths.markdown}")
    print(f"hexagons: {paths.geojson}")
    return 0

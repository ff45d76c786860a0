"""`tailscope plot`: one flow's time-sequence graph and RTT over time, as PNG or SVG."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a TCP flow's time-sequence graph and RTT over time (PNG/SVG)",
        description="Draw one TCP flow as tcptrace/xplot do: data segments over time (retransmissions "
        "coloured by cause), the ACK line, ACK + receive window, SACK blocks; below it the RTT samples "
        "over time. Find flow ids with `tailscope conn DATASET`.",
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--flow", required=True, type=int, metavar="ID", help="flow_id (tailscope conn lists them)")
    p.add_argument("--capture", metavar="CAPTURE_ID", help="the capture, when the flow id is in several")
    p.add_argument("--direction", choices=["s2c", "c2s"], help="data direction to draw (default: the one that sent more)")
    p.add_argument("--out", "-o", type=Path, metavar="FILE", help="FILE.png or FILE.svg (default: flow-ID.png)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.analytics.plot import PlotError, draw, load_flow

    out = args.out or Path(f"flow-{args.flow}.png")
    if out.suffix.lower() not in (".png", ".svg"):
        print(f"tailscope plot: error: --out {out}: the file name must end in .png or .svg", file=sys.stderr)
        return 2
    if not args.dataset.is_dir():
        print(f"tailscope plot: error: {args.dataset}: no such dataset directory", file=sys.stderr)
        return 2
    try:
        path = draw(load_flow(args.dataset, args.flow, args.capture), out, args.direction)
    except PlotError as exc:
        print(f"tailscope plot: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0

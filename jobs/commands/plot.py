"""`tailscope plot`: one flow's time-sequence graph and RTT over time, as PNG, SVG or HTML."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plot",
        help="draw a TCP flow's time-sequence graph and RTT over time (PNG/SVG/HTML)",
        description="Draw one direction of a TCP flow as tcptrace/xplot do: data segments over time, "
        "each retransmission marked R in its cause's colour, the silence before an RTO or TLP resend "
        "labelled with its length, the ACK line, ACK + receive window, SACK blocks; the y-axis spans "
        "the data. Below it the RTT samples over time. FILE.html is one self-contained page (no "
        "network) that zooms with the mouse wheel and pans by dragging. Find flow ids with "
        "`tailscope conn DATASET`.",
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="dataset directory (tailscope analyze --out)")
    p.add_argument("--flow", required=True, type=int, metavar="ID", help="flow_id (tailscope conn lists them)")
    p.add_argument("--capture", metavar="CAPTURE_ID", help="the capture, when the flow id is in several")
    p.add_argument("--direction", choices=["s2c", "c2s"], help="the data direction to draw (default: the one that sent more bytes)")
    p.add_argument("--out", "-o", type=Path, metavar="FILE", help="FILE.png, FILE.svg or FILE.html (default: flow-ID.png)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tailscope.jobs.analytics.plot import PlotError, check_out, draw, load_flow

    if not args.dataset.is_dir():
        print(f"tailscope plot: error: {args.dataset}: no such dataset directory", file=sys.stderr)
        return 2
    try:
        out = check_out(args.out or Path(f"flow-{args.flow}.png"))
        path = draw(load_flow(args.dataset, args.flow, args.capture), out, args.direction)
    except PlotError as exc:
        print(f"tailscope plot: error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0

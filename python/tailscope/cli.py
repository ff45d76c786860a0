"""The ``tailscope`` command line.

Each subcommand lives in its own module that exposes ``register(subparsers)``; the module is
imported only when the command list is built, and heavy imports stay inside the handlers so that
``tailscope --help`` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from tailscope import __version__

# (module, attribute) pairs; each register() adds one or more subparsers and sets `func`.
COMMAND_MODULES = [
    "tailscope.jobs.cli_analyze",
    "tailscope.jobs.cli_db",
    "tailscope.jobs.cli_stats",
    "tailscope.jobs.cli_report",
    "tailscope.capture.cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tailscope",
        description="Passive TCP/QUIC trace analytics: decode pcaps, rebuild flows, tag transport "
        "behaviors, store Parquet, query with DuckDB.",
    )
    parser.add_argument("--version", action="version", version=f"tailscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only a command module that does not exist is skipped; a missing dependency of an
            # existing one is a real error.
            if exc.name and name.startswith(exc.name):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

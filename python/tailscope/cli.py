"""The ``tailscope`` command line.

Each subcommand lives in its own module that exposes ``register(subparsers)``; the module is
imported only when the command list is built, and heavy imports stay inside the handlers so that
``tailscope --help`` is instant.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from tailscope import __version__

# Exit statuses every command shares (each command documents its own 0-3 in its --help).
EXIT_FILE_ERROR = 4  # a file or directory could not be read or written; the message names it
EXIT_INTERNAL = 70  # a bug of ours (sysexits EX_SOFTWARE); TAILSCOPE_DEBUG=1 shows the traceback

# (module, attribute) pairs; each register() adds one or more subparsers and sets `func`.
COMMAND_MODULES = [
    "tailscope.jobs.commands.analyze",
    "tailscope.jobs.commands.db",
    "tailscope.jobs.commands.stats",
    "tailscope.jobs.commands.report",
    "tailscope.jobs.commands.conn",
    "tailscope.jobs.commands.export",
    "tailscope.jobs.commands.plot",
    "tailscope.jobs.commands.prune",
    "tailscope.jobs.commands.compact",
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
    prog = f"tailscope {args.command}"
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`tailscope conn DS | head`): stop quietly, as cat does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13  # SIGPIPE
    except OSError as exc:
        if os.environ.get("TAILSCOPE_DEBUG"):
            raise
        print(f"{prog}: error: {_os_error(exc)}", file=sys.stderr)
        return EXIT_FILE_ERROR
    except Exception as exc:  # noqa: BLE001 - a user sees one line, never a traceback
        if os.environ.get("TAILSCOPE_DEBUG"):
            raise
        print(f"{prog}: internal error: {type(exc).__name__}: {exc} (a bug: please report it; "
              "TAILSCOPE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


def _os_error(exc: OSError) -> str:
    """`PATH: reason`, as cp and tar say it."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{exc.filename}: {reason}"
    return reason


if __name__ == "__main__":
    sys.exit(main())

"""``tailscope agent``: the edge capture agent's command line.

Registered by tailscope/cli.py; only argparse is imported at module level so that
``tailscope --help`` stays instant. Handlers return a process exit code.
"""
from __future__ import annotations

import argparse

# flag -> dotted config key; these override both the file and --set
FLAG_KEYS = {
    "site": "agent.site",
    "capture_point": "agent.capture_point",
    "agent_id": "agent.agent_id",
    "spool_dir": "agent.spool_dir",
    "log_level": "agent.log_level",
    "interface": "capture.interface",
    "filter": "capture.bpf_filter",
    "snaplen": "capture.snaplen",
    "rotate_seconds": "capture.rotate_seconds",
    "rotate_size": "capture.rotate_bytes",
    "compression": "capture.compression",
    "quota": "spool.quota_bytes",
    "landing": "ship.landing",
    "rate_limit": "ship.rate_limit_bytes_per_second",
    "metrics_listen": "metrics.listen",
}

EPILOG = """\
configuration: a TOML file (see capture/README.md; `tailscope agent config` prints the effective
one), then --set section.key=value (repeatable), then the flags above.

examples:
  tailscope agent run --config /etc/tailscope/agent.toml
  tailscope agent run --site ams1 --interface eth0 --landing s3://pcaps/edge --spool-dir /var/lib/ts
  tailscope agent run --config agent.toml --set ship.storage_options.endpoint_url=https://minio:9000
  tailscope agent status --config agent.toml
  tailscope agent metrics --config agent.toml
"""


def _add_config_args(p: argparse.ArgumentParser, capture_flags: bool = True) -> None:
    g = p.add_argument_group("configuration")
    g.add_argument("-c", "--config", metavar="FILE", help="agent configuration file (TOML)")
    g.add_argument("--set", metavar="SECTION.KEY=VALUE", action="append", default=[], dest="overrides",
                   help="override one setting, e.g. --set capture.snaplen=256 (repeatable)")
    g.add_argument("--spool-dir", metavar="DIR", help="spool and state directory [agent.spool_dir]")
    if not capture_flags:
        return
    g.add_argument("--site", help="site name, first partition level [agent.site]")
    g.add_argument("--capture-point", metavar="NAME", help="capture point name [agent.capture_point]")
    g.add_argument("--agent-id", metavar="ID", help="agent id, default: host name [agent.agent_id]")
    g.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="[agent.log_level]")
    g.add_argument("-i", "--interface", metavar="IFACE", help="capture interface [capture.interface]")
    g.add_argument("--filter", metavar="BPF", help="BPF capture filter [capture.bpf_filter]")
    g.add_argument("--snaplen", type=int, metavar="BYTES", help="bytes kept per packet [capture.snaplen]")
    g.add_argument("--rotate-seconds", type=float, metavar="S", help="rotate after S seconds [capture.rotate_seconds]")
    g.add_argument("--rotate-size", metavar="SIZE", help="rotate at this raw size, e.g. 100M [capture.rotate_bytes]")
    g.add_argument("--compression", choices=["gzip", "zstd"], help="[capture.compression]")
    g.add_argument("--quota", metavar="SIZE", help="spool disk quota, e.g. 10G [spool.quota_bytes]")
    g.add_argument("--landing", metavar="URL",
                   help="landing zone: DIR, file://, s3://, gs://, hdfs://... [ship.landing]")
    g.add_argument("--rate-limit", metavar="SIZE",
                   help="upload bytes/s, 0 = unlimited [ship.rate_limit_bytes_per_second]")
    g.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve /metrics over HTTP [metrics.listen]")


def register(subparsers) -> None:
    agent = subparsers.add_parser(
        "agent", help="edge capture agent: capture, rotate, spool and ship pcaps to a landing zone",
        description="Edge capture agent: captures with tcpdump (BPF filter, headers-only snaplen),\n"
        "rotates by time and size, compresses, writes a manifest per file, and ships the files to a\n"
        "landing zone (directory, s3://, gs://, hdfs://...) as site=<site>/date=YYYY-MM-DD/hour=HH/.\n"
        "Finished files survive crashes and land exactly once. Docs: capture/README.md.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = agent.add_subparsers(dest="agent_command", metavar="ACTION")
    agent.set_defaults(func=lambda args: (agent.print_help(), 2)[1])

    p = sub.add_parser("run", help="capture and ship until SIGTERM/SIGINT (the systemd service)",
                       description="Run the agent in the foreground: recover what a previous run left,\n"
                       "then capture and ship. JSON logs on stderr. SIGTERM/SIGINT stop it cleanly.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_config_args(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("status", help="spool, counters and dropped files (JSON)",
                       description="Read-only summary of the spool and lifetime counters; works while "
                       "the agent runs or not.")
    _add_config_args(p, capture_flags=False)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("metrics", help="print the Prometheus metrics",
                       description="Print the health counters in the Prometheus text format (the same "
                       "text the HTTP endpoint and <spool>/metrics.prom serve).")
    _add_config_args(p, capture_flags=False)
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("config", help="validate and print the effective configuration",
                       description="Merge the file, --set and flags, validate, and print the result as TOML "
                       "(secrets masked). Exit code 1 if invalid.")
    _add_config_args(p)
    p.set_defaults(func=cmd_config)

    p = sub.add_parser("drain", help="ship the spool without capturing, then exit",
                       description="Finish raw captures left in the spool and ship everything pending "
                       "(e.g. before decommissioning a host). Exit code 1 if files remain.")
    _add_config_args(p)
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="give up after S seconds (600)")
    p.set_defaults(func=cmd_drain)


def _load(args, *, need_capture: bool, need_landing: bool):
    from .config import load_config, parse_override, validate

    overrides = [parse_override(s) for s in args.overrides]
    for attr, key in FLAG_KEYS.items():
        v = getattr(args, attr, None)
        if v is not None:
            overrides.append((key, v))
    cfg = load_config(args.config, overrides)
    validate(cfg, need_capture=need_capture, need_landing=need_landing)
    return cfg


def _config_or_exit(args, **kw):
    import sys

    from .config import ConfigError

    try:
        return _load(args, **kw)
    except ConfigError as exc:
        print(f"tailscope agent: {exc}", file=sys.stderr)
        return None


def cmd_run(args) -> int:
    cfg = _config_or_exit(args, need_capture=True, need_landing=True)
    if cfg is None:
        return 2
    from .agent import Agent
    from .logs import setup_logging

    setup_logging(cfg.agent.log_level)
    try:
        return Agent(cfg).run()
    except RuntimeError as exc:  # e.g. spool locked by another agent
        import logging

        from .logs import get_logger, log_event

        log_event(get_logger(), logging.ERROR, "agent_failed", error=str(exc))
        return 1


def cmd_drain(args) -> int:
    cfg = _config_or_exit(args, need_capture=False, need_landing=True)
    if cfg is None:
        return 2
    from .agent import drain
    from .logs import setup_logging

    setup_logging(cfg.agent.log_level)
    try:
        return drain(cfg, args.timeout)
    except RuntimeError as exc:  # spool locked: the agent is running and ships by itself
        import sys

        print(f"tailscope agent: {exc}", file=sys.stderr)
        return 1


def _lenient(args):
    """status/metrics only need the spool location."""
    import sys

    from .config import ConfigError, load_config, parse_override

    try:
        overrides = [parse_override(s) for s in args.overrides]
        if args.spool_dir:
            overrides.append(("agent.spool_dir", args.spool_dir))
        return load_config(args.config, overrides)
    except ConfigError as exc:
        print(f"tailscope agent: {exc}", file=sys.stderr)
        return None


def cmd_status(args) -> int:
    import json

    cfg = _lenient(args)
    if cfg is None:
        return 2
    from .agent import offline_status

    print(json.dumps(offline_status(cfg), indent=2, sort_keys=True))
    return 0


def cmd_metrics(args) -> int:
    cfg = _lenient(args)
    if cfg is None:
        return 2
    from .agent import offline_status
    from .fsutil import read_json
    from .metrics import render
    from .spool import spool_paths

    paths = spool_paths(cfg.spool_path)
    st = offline_status(cfg)
    if st["agent_running"] and paths["metrics"].exists():
        print(paths["metrics"].read_text(), end="")  # the live agent's own view (refreshed every 5 s)
        return 0
    state = read_json(paths["state"], default={}) or {}
    values = {**state.get("counters", {}), **state.get("gauges", {}),
              "files_pending": st["files_pending"], "tombstones_pending": st["tombstones_pending"],
              "spool_bytes": st["spool_bytes"], "spool_quota_bytes": cfg.spool.quota_bytes, "capture_running": 0}
    print(render(values, {"agent_id": cfg.agent.agent_id, "site": cfg.agent.site}), end="")
    return 0


def cmd_config(args) -> int:
    cfg = _config_or_exit(args, need_capture=True, need_landing=True)
    if cfg is None:
        return 1
    from .config import to_toml
    from .tcpdump import check_filter

    print(to_toml(cfg), end="")
    err = check_filter(cfg.capture)
    if err:
        import sys

        print(f"tailscope agent: BPF filter does not compile: {err}", file=sys.stderr)
        return 1
    return 0

"""Agent configuration: a TOML file, then CLI overrides, then validation.

Precedence is defaults < config file < ``--set section.key=value`` < dedicated flags such as
``--interface``. The effective configuration is printed by ``tailscope agent config`` and recorded in
each manifest where it matters (filter, snaplen), so a landed file always says how it was captured.
"""
from __future__ import annotations

import dataclasses
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]

# TCP and UDP (QUIC) on the web ports. "tcp or udp" is spelled out so that other IP protocols that
# happen to use those port numbers are not matched.
DEFAULT_FILTER = "(tcp or udp) and (port 443 or port 80)"
# Headers only: Ethernet (14) + QinQ (8) + IPv4 with options (60) + TCP with all options (60) + TLS
# record header (5) = 147; IPv6 (40) leaves room for extension headers; Linux SLL2 ("any") is 20.
# It keeps no QUIC SNI/ALPN (an Initial cannot be decrypted cut: 1600 keeps it whole) and a TCP SNI
# only when the ClientHello's server_name ends early: what each snaplen keeps, docs/queries.md#snaplen.
DEFAULT_SNAPLEN = 192


class ConfigError(ValueError):
    pass


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.I)


def parse_size(value: Any) -> int:
    """``100M``, ``1.5G``, ``64KiB`` or a plain integer; suffixes are powers of 1024."""
    if isinstance(value, bool):
        raise ConfigError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"not a size: {value!r} (examples: 1048576, 100M, 10G)")
    mult = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(float(m.group(1)) * mult)


def _hostname() -> str:
    return socket.gethostname().split(".")[0] or "agent"


@dataclass
class AgentSection:
    site: str = ""
    capture_point: str = "default"
    agent_id: str = field(default_factory=_hostname)
    spool_dir: str = "/var/lib/tailscope-agent"
    log_level: str = "info"
    # A Crypto-PAn key file (docs/privacy.md): this site's captures must be analysed with client
    # addresses pseudonymized by this key. The agent never uses the key on packets (enrichment
    # needs the real address); each landed manifest names the key by its fingerprint, and
    # `tailscope analyze` refuses the file without that key.
    pseudonymize_clients: str = ""


@dataclass
class CaptureSection:
    interface: str = ""
    bpf_filter: str = DEFAULT_FILTER
    snaplen: int = DEFAULT_SNAPLEN
    rotate_seconds: float = 300.0
    rotate_bytes: int = 100 * 1024 * 1024
    # Rotate on wall-clock multiples of rotate_seconds so files never straddle an hour partition
    # (when rotate_seconds divides 3600) and sites line up in time.
    align_rotation: bool = True
    compression: str = "gzip"  # gzip | zstd
    compression_level: int | None = None
    buffer_kib: int = 8192  # tcpdump -B: kernel ring size; too small shows up as kernel drops
    promiscuous: bool = False  # an edge server captures its own traffic; no need to see others'
    tcpdump: str = "tcpdump"
    # tcpdump -Z user. Empty: keep the agent's user. tcpdump never dissects packets when writing
    # with -w, and a privilege change would clear the parent-death signal that stops tcpdump when
    # the agent dies (see README "Capture"), so the recommended setup is a dedicated non-root user
    # with CAP_NET_RAW/CAP_NET_ADMIN (the systemd unit does that).
    tcpdump_user: str = ""
    extra_args: list[str] = field(default_factory=list)
    start_timeout_seconds: float = 10.0
    # How long the old and the new tcpdump both run at a rotation. libpcap (TPACKET_V3) hands
    # packets to tcpdump in blocks retired at least every second (tcpdump's 1000 ms timeout), and a
    # stopped tcpdump discards the block it has not read yet; so the old one must keep running for
    # more than a second after the new one listens, or the packets of that last second are lost.
    handover_seconds: float = 2.0
    # tcpdump --immediate-mode: libpcap then uses TPACKET_V2 and hands over each packet at once, so a
    # stopped tcpdump loses (almost) nothing and handover_seconds can be ~0.5 s. More wake-ups per
    # packet at moderate rates; the default keeps libpcap's batched high-throughput mode.
    immediate_mode: bool = False
    size_check_seconds: float = 0.25


@dataclass
class SpoolSection:
    quota_bytes: int = 10 * 1024**3
    # Also treat the spool as full when the file system gets this low, whatever the quota says.
    min_free_bytes: int = 512 * 1024**2


@dataclass
class ShipSection:
    landing: str = ""
    # driver settings (endpoint_url, region_name, ...); never credentials: those come from the
    # environment, the instance role, or credentials_file (docs/privacy.md)
    storage_options: dict[str, Any] = field(default_factory=dict)
    # a TOML file of storage options holding credentials (key = "...", secret = "..."), readable by
    # the agent's user alone (mode 0600); read when the landing zone is opened, never logged
    credentials_file: str = ""
    # shipping over plain HTTP or without certificate checks must be asked for (test setups)
    allow_insecure_tls: bool = False
    retry_initial_seconds: float = 1.0
    retry_max_seconds: float = 300.0
    rate_limit_bytes_per_second: int = 0  # 0: unlimited; edge uplinks are often shared with users
    poll_seconds: float = 2.0
    shutdown_timeout_seconds: float = 15.0


@dataclass
class MetricsSection:
    listen: str = ""  # "127.0.0.1:9560" serves /metrics over HTTP
    textfile: str = ""  # extra copy for node_exporter's textfile collector


@dataclass
class AgentConfig:
    agent: AgentSection = field(default_factory=AgentSection)
    capture: CaptureSection = field(default_factory=CaptureSection)
    spool: SpoolSection = field(default_factory=SpoolSection)
    ship: ShipSection = field(default_factory=ShipSection)
    metrics: MetricsSection = field(default_factory=MetricsSection)
    source: str = "<defaults>"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        return d

    @property
    def spool_path(self) -> Path:
        return Path(self.agent.spool_dir)


SECTIONS = {f.name: f.type for f in dataclasses.fields(AgentConfig) if f.name != "source"}
_SIZE_KEYS = {("capture", "rotate_bytes"), ("spool", "quota_bytes"), ("spool", "min_free_bytes"),
              ("ship", "rate_limit_bytes_per_second")}


def _section_fields(section: str) -> dict[str, dataclasses.Field]:
    cls = {"agent": AgentSection, "capture": CaptureSection, "spool": SpoolSection,
           "ship": ShipSection, "metrics": MetricsSection}[section]
    return {f.name: f for f in dataclasses.fields(cls)}


def _coerce(section: str, key: str, value: Any) -> Any:
    fields = _section_fields(section)
    if key not in fields:
        raise ConfigError(f"unknown setting [{section}] {key} (known: {', '.join(sorted(fields))})")
    if (section, key) in _SIZE_KEYS:
        return parse_size(value)
    ftype = str(fields[key].type)
    try:
        if ftype == "bool":
            if isinstance(value, str):
                if value.lower() in ("true", "yes", "1", "on"):
                    return True
                if value.lower() in ("false", "no", "0", "off"):
                    return False
                raise ValueError(value)
            return bool(value)
        if ftype == "int":
            return int(value)
        if ftype == "float":
            return float(value)
        if ftype == "int | None":
            return None if value in (None, "", "none") else int(value)
        if ftype == "str":
            return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"[{section}] {key}: expected {ftype}, got {value!r}") from None
    return value  # lists and tables as given


def set_value(cfg: AgentConfig, dotted: str, value: Any) -> None:
    if "." not in dotted:
        raise ConfigError(f"expected section.key, got {dotted!r}")
    section, key = dotted.split(".", 1)
    if section not in SECTIONS:
        raise ConfigError(f"unknown section [{section}] (known: {', '.join(SECTIONS)})")
    if section == "ship" and key.startswith("storage_options."):
        cfg.ship.storage_options[key.split(".", 1)[1]] = value
        return
    setattr(getattr(cfg, section), key, _coerce(section, key, value))


def parse_override(text: str) -> tuple[str, Any]:
    """``section.key=value``; the value is read as a TOML value when it parses, else as a string."""
    if "=" not in text:
        raise ConfigError(f"--set expects section.key=value, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = _toml.loads(f"v = {raw}")["v"]
    except _toml.TOMLDecodeError:
        value = raw
    return key.strip(), value


def load_config(path: str | None = None, overrides: list[tuple[str, Any]] | None = None) -> AgentConfig:
    cfg = AgentConfig()
    if path:
        try:
            with open(path, "rb") as f:
                data = _toml.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except _toml.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        cfg.source = str(path)
        for section, table in data.items():
            if section not in SECTIONS:
                raise ConfigError(f"{path}: unknown section [{section}] (known: {', '.join(SECTIONS)})")
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: [{section}] must be a table")
            for key, value in table.items():
                set_value(cfg, f"{section}.{key}", value)
    for key, value in overrides or []:
        set_value(cfg, key, value)
    return cfg


_ID_RE = re.compile(r"^[A-Za-z0-9_-]+$")


# storage options that are credentials (s3fs, gcsfs, adlfs, ...): never in the configuration
CREDENTIAL_WORDS = ("secret", "password", "token", "credential", "sas")
CREDENTIAL_KEYS = {"key", "access_key", "account_key", "aws_access_key_id", "private_key", "client_secret"}


def is_credential(name: str) -> bool:
    n = name.lower()
    return n in CREDENTIAL_KEYS or any(w in n for w in CREDENTIAL_WORDS)


def _insecure(opts: dict[str, Any]) -> str | None:
    endpoint = str(opts.get("endpoint_url", ""))
    client = opts.get("client_kwargs") or {}
    if endpoint.startswith("http://"):
        return f"endpoint_url {endpoint} is plain HTTP"
    if opts.get("use_ssl") is False:
        return "use_ssl = false"
    if isinstance(client, dict) and client.get("verify") is False:
        return "client_kwargs.verify = false"
    return None


def ship_security_problems(ship: ShipSection) -> list[str]:
    problems = []
    for name in ship.storage_options:
        if is_credential(name):
            problems.append(f"[ship] storage_options.{name}: credentials never go in the configuration or on the "
                            "command line (ps, config dumps, backups show them): use the environment "
                            "(the unit's EnvironmentFile), ship.credentials_file (mode 0600) or the instance role")
    if (why := _insecure(ship.storage_options)) and not ship.allow_insecure_tls:
        problems.append(f"[ship] {why}: captures would travel without verified TLS; "
                        "set ship.allow_insecure_tls = true to accept that (test setups only)")
    if ship.credentials_file:
        problems += credentials_file_problems(Path(ship.credentials_file))
    return problems


def credentials_file_problems(path: Path) -> list[str]:
    import os
    import stat

    try:
        st = path.stat()
    except OSError as exc:
        return [f"[ship] credentials_file {path}: {exc.strerror or exc}"]
    if not stat.S_ISREG(st.st_mode):
        return [f"[ship] credentials_file {path}: not a regular file"]
    problems = []
    if st.st_mode & 0o077:
        problems.append(f"[ship] credentials_file {path}: readable or writable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}); chmod 600 it")
    if st.st_uid != os.geteuid():
        problems.append(f"[ship] credentials_file {path}: owned by uid {st.st_uid}, not by the agent's user ({os.geteuid()})")
    return problems


def pseudonym_key_problems(path: Path) -> list[str]:
    from tailscope.jobs.enrichment.pseudonymize import PseudonymKeyError, load_key

    problems = [p.replace("[ship] credentials_file", "[agent] pseudonymize_clients") for p in credentials_file_problems(path)]
    if not problems:
        try:
            load_key(path)
        except PseudonymKeyError as exc:
            problems.append(f"[agent] pseudonymize_clients: {exc}")
    return problems


def pseudonym_fingerprint(cfg: AgentConfig) -> str | None:
    """The fingerprint of the site's pseudonymization key, for the manifests (never the key)."""
    if not cfg.agent.pseudonymize_clients:
        return None
    from tailscope.jobs.enrichment.pseudonymize import fingerprint, load_key

    return fingerprint(load_key(cfg.agent.pseudonymize_clients))


def landing_options(ship: ShipSection) -> dict[str, Any]:
    """The storage options the landing zone is opened with: the configured ones plus the
    credentials file's (kept out of the config object, so no dump or log can show them)."""
    opts = dict(ship.storage_options)
    if ship.credentials_file:
        try:
            data = _toml.loads(Path(ship.credentials_file).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"[ship] credentials_file {ship.credentials_file}: unreadable ({type(exc).__name__})") from None
        opts.update(data)
    return opts


def validate(cfg: AgentConfig, *, need_capture: bool = True, need_landing: bool = True) -> None:
    problems = []
    if not cfg.agent.site:
        problems.append("[agent] site is required")
    for key in ("site", "capture_point", "agent_id"):
        v = getattr(cfg.agent, key)
        if v and not _ID_RE.match(v):
            problems.append(f"[agent] {key}={v!r}: use letters, digits, '-' and '_' only "
                            "(it goes into file names and partition paths)")
    c = cfg.capture
    if need_capture and not c.interface:
        problems.append("[capture] interface is required")
    if c.snaplen < 68 or c.snaplen > 262144:
        problems.append("[capture] snaplen must be within 68..262144")
    if c.rotate_seconds < 1:
        problems.append("[capture] rotate_seconds must be >= 1")
    if not 0 <= c.handover_seconds < c.rotate_seconds:
        problems.append("[capture] handover_seconds must be >= 0 and below rotate_seconds")
    if c.rotate_bytes < 64 * 1024:
        problems.append("[capture] rotate_bytes must be >= 64K")
    if c.compression not in ("gzip", "zstd"):
        problems.append("[capture] compression must be gzip or zstd")
    s = cfg.spool
    # The quota must at least hold the file being written plus the one being compressed, or
    # capture itself could exceed it with nothing finished left to drop.
    if s.quota_bytes < 2 * c.rotate_bytes:
        problems.append(f"[spool] quota_bytes ({s.quota_bytes}) must be at least 2 x rotate_bytes "
                        f"({2 * c.rotate_bytes})")
    sh = cfg.ship
    if need_landing and not sh.landing:
        problems.append("[ship] landing is required (a directory, file://, s3://, gs://, hdfs://...)")
    if sh.retry_initial_seconds <= 0 or sh.retry_max_seconds < sh.retry_initial_seconds:
        problems.append("[ship] need 0 < retry_initial_seconds <= retry_max_seconds")
    if cfg.agent.log_level.lower() not in ("debug", "info", "warning", "error"):
        problems.append("[agent] log_level must be debug, info, warning or error")
    if cfg.metrics.listen and not re.match(r"^[^:]*:\d+$", cfg.metrics.listen):
        problems.append("[metrics] listen must be host:port")
    problems += ship_security_problems(cfg.ship)
    if cfg.agent.pseudonymize_clients:
        problems += pseudonym_key_problems(Path(cfg.agent.pseudonymize_clients))
    if problems:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(problems))


def to_toml(cfg: AgentConfig) -> str:
    """Render the effective configuration as TOML (for ``tailscope agent config``)."""

    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if v is None:
            return '""'
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {fmt(x)}" for k, x in v.items()) + " }"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"# effective configuration (source: {cfg.source})"]
    for section, table in cfg.to_dict().items():
        lines.append(f"\n[{section}]")
        for k, v in table.items():
            if k == "storage_options":
                v = {kk: ("***" if any(s in kk.lower() for s in ("secret", "key", "token", "password")) else vv)
                     for kk, vv in v.items()}
            lines.append(f"{k} = {fmt(v)}")
    return "\n".join(lines) + "\n"

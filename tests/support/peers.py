"""Parsers for the corpus peers' outputs (tshark, tcptrace, Zeek), for comparison tests.

Everything here is read straight from ``<corpus>/peers`` (see the corpus README); nothing is cached
on disk. The parsers are strict: a line or cell they do not understand raises ``ValueError`` so
that a format surprise shows up as a test failure instead of silently missing data.

Addresses are normalised with :mod:`ipaddress` (``.compressed`` form) so that the three peers'
endpoints, and tailscope's, can be compared with :func:`endpoint_key`.
"""
from __future__ import annotations

import calendar
import csv
import datetime as dt
import functools
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .corpus import corpus_dir

Endpoint = tuple[str, int]


def norm_addr(addr: str) -> str:
    """Canonical text form of an IPv4/IPv6 address (raises ``ValueError`` if it is not one)."""
    return ipaddress.ip_address(addr).compressed


def endpoint_key(addr1: str, port1: int, addr2: str, port2: int) -> tuple[Endpoint, Endpoint]:
    """Direction-independent flow key: the two (normalised address, port) endpoints, sorted."""
    a, b = (norm_addr(addr1), port1), (norm_addr(addr2), port2)
    return (a, b) if a <= b else (b, a)


def _decimal_ns(text: str) -> int:
    """Exact nanoseconds from a non-negative decimal seconds string (no float rounding)."""
    m = re.fullmatch(r"(\d+)(?:\.(\d{1,9}))?", text)
    if not m:
        raise ValueError(f"not a decimal time with <= 9 fractional digits: {text!r}")
    return int(m[1]) * 10**9 + int((m[2] or "").ljust(9, "0"))


def _peer(*parts: str) -> Path:
    path = corpus_dir().joinpath("peers", *parts)
    if not path.is_file():
        raise FileNotFoundError(f"peer output not found: {path}")
    return path


# --------------------------------------------------------------------------------------------
# tshark conversation tables (peers/tshark/<pcap>.conv.txt)
# --------------------------------------------------------------------------------------------

_SIZE_UNITS = {"bytes": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


@dataclass(frozen=True)
class ByteCount:
    """A byte count as tshark printed it.

    tshark 4.0 formats sizes with ``format_size()`` (SI prefixes): below 10,000 it prints the
    exact ``"N bytes"``; from 10,000 on it prints ``"N kB"`` (then MB, ...) where N is the size
    integer-divided (truncated, not rounded) by the unit. So ``"11 kB"`` means 11000 <= n < 12000.
    ``value`` is the exact count when ``exact``, else the lower bound; ``unit`` is the multiplier.
    """

    value: int
    exact: bool
    unit: int = 1

    @property
    def upper(self) -> int:
        """Exclusive upper bound of the true count."""
        return self.value + self.unit

    def contains(self, n: int) -> bool:
        return self.value <= n < self.upper

    @classmethod
    def parse(cls, text: str) -> ByteCount:
        num, _, unit = text.partition(" ")
        mult = _SIZE_UNITS[unit]
        return cls(int(num) * mult, exact=mult == 1, unit=mult)


@dataclass(frozen=True)
class Conversation:
    """One row of ``tshark -z conv,tcp`` / ``-z conv,udp`` (tshark 4.0 layout).

    Direction semantics (verified against frame lengths and the per-packet CSV): the column
    headed ``<-`` counts frames/bytes sent by B to A, the column headed ``->`` those sent by A to B.
    A is the source of the first frame tshark saw in the conversation. Bytes are on-the-wire frame
    lengths (``frame.len``, including link-layer headers and bytes beyond the snaplen).
    ``rel_start_ns`` is relative to the first frame of the capture; ``duration_s`` is printed
    with 4 decimals (rounded).
    """

    proto: str  # "tcp" or "udp"
    addr_a: str
    port_a: int
    addr_b: str
    port_b: int
    frames_b_to_a: int
    bytes_b_to_a: ByteCount
    frames_a_to_b: int
    bytes_a_to_b: ByteCount
    frames_total: int
    bytes_total: ByteCount
    rel_start_ns: int
    duration_s: float

    @property
    def key(self) -> tuple[Endpoint, Endpoint]:
        return endpoint_key(self.addr_a, self.port_a, self.addr_b, self.port_b)


_SIZE = r"\d+ (?:bytes|kB|MB|GB|TB)"
_CONV_ROW = re.compile(
    rf"(?P<a>\S+):(?P<pa>\d+) +<-> (?P<b>\S+):(?P<pb>\d+) +"
    rf"(?P<fba>\d+) (?P<bba>{_SIZE}) +(?P<fab>\d+) (?P<bab>{_SIZE}) +"
    rf"(?P<ft>\d+) (?P<bt>{_SIZE}) +(?P<start>[\d.]+) +(?P<dur>[\d.]+)"
)
_CONV_IGNORED = re.compile(r"=+|Filter:<No Filter>| +\|.*\|")


def tshark_conversations(pcap_name: str) -> dict[str, list[Conversation]]:
    """Parse ``peers/tshark/<pcap>.conv.txt`` into ``{"tcp": [...], "udp": [...]}``.

    The file holds two tables (UDP first, then TCP). Each row is
    ``A:port <-> B:port  frames bytes  frames bytes  frames bytes  rel_start  duration``;
    IPv6 addresses are printed without brackets (the port is after the last ``:``) and long
    ones push the columns out of alignment, so rows are split on whitespace, not on columns.
    """
    out: dict[str, list[Conversation]] = {"tcp": [], "udp": []}
    proto = None
    for lineno, line in enumerate(_peer("tshark", f"{pcap_name}.conv.txt").read_text().splitlines(), 1):
        if m := re.fullmatch(r"(TCP|UDP) Conversations", line):
            proto = m[1].lower()
        elif m := _CONV_ROW.fullmatch(line):
            if proto is None:
                raise ValueError(f"{pcap_name}.conv.txt:{lineno}: row before a table title")
            out[proto].append(Conversation(
                proto=proto,
                addr_a=norm_addr(m["a"]), port_a=int(m["pa"]),
                addr_b=norm_addr(m["b"]), port_b=int(m["pb"]),
                frames_b_to_a=int(m["fba"]), bytes_b_to_a=ByteCount.parse(m["bba"]),
                frames_a_to_b=int(m["fab"]), bytes_a_to_b=ByteCount.parse(m["bab"]),
                frames_total=int(m["ft"]), bytes_total=ByteCount.parse(m["bt"]),
                rel_start_ns=_decimal_ns(m["start"]), duration_s=float(m["dur"]),
            ))
        elif not _CONV_IGNORED.fullmatch(line):
            raise ValueError(f"{pcap_name}.conv.txt:{lineno}: unexpected line {line!r}")
    return out


# --------------------------------------------------------------------------------------------
# tshark per-packet fields (peers/tshark/<pcap>.csv)
# --------------------------------------------------------------------------------------------

TSHARK_FIELDS = (
    "frame.number", "frame.time_epoch", "ip.src", "ipv6.src", "tcp.srcport", "udp.srcport",
    "ip.dst", "ipv6.dst", "tcp.dstport", "udp.dstport", "tcp.stream", "tcp.flags",
    "tcp.seq_raw", "tcp.ack_raw", "tcp.len", "tcp.analysis.retransmission",
    "tcp.analysis.fast_retransmission", "tcp.analysis.spurious_retransmission",
    "tcp.analysis.out_of_order", "tcp.analysis.lost_segment", "tcp.analysis.duplicate_ack",
    "tcp.analysis.zero_window", "tcp.analysis.ack_rtt", "quic.long.packet_type", "quic.version",
    "quic.dcid", "quic.scid", "quic.spin_bit", "tls.handshake.extensions_server_name",
)

# Single-valued cells. A comma in one of these is a parse error.
_TSHARK_SINGLE = {
    "frame.number": int,
    "frame.time_epoch": _decimal_ns,
    "tcp.srcport": int, "udp.srcport": int, "tcp.dstport": int, "udp.dstport": int,
    "tcp.stream": int, "tcp.flags": lambda s: int(s, 16),
    "tcp.seq_raw": int, "tcp.ack_raw": int, "tcp.len": int,
    "tcp.analysis.ack_rtt": float,
}
# Fields that occur once per protocol layer instance, so tunnels (outer + inner IP, ICMP errors
# quoting a packet) and coalesced QUIC packets in one datagram give several comma-separated
# values. Always returned as lists, outermost/first first; [] when empty. The lists of one row
# need not have equal lengths (e.g. quic.dcid can have more entries than quic.version).
TSHARK_MULTI = {
    "ip.src": norm_addr, "ip.dst": norm_addr, "ipv6.src": norm_addr, "ipv6.dst": norm_addr,
    "quic.long.packet_type": int, "quic.version": lambda s: int(s, 16),
    "quic.dcid": str, "quic.scid": str, "quic.spin_bit": int,
    "tls.handshake.extensions_server_name": str,
}
# Expert-info flags: the cell is non-empty when set. Its content is not a count:
# tcp.analysis.duplicate_ack is written as "1,1" because Wireshark adds the field twice.
TSHARK_FLAGS = tuple(f for f in TSHARK_FIELDS if f.startswith("tcp.analysis.") and f != "tcp.analysis.ack_rtt")


def _tshark_cell(name: str, cell: str) -> Any:
    if name in TSHARK_FLAGS:
        return cell != ""
    if name in TSHARK_MULTI:
        return [TSHARK_MULTI[name](v) for v in cell.split(",")] if cell else []
    if "," in cell:
        raise ValueError(f"{name}: unexpected multi-valued cell {cell!r}")
    return _TSHARK_SINGLE[name](cell) if cell else None


def tshark_packets(pcap_name: str, decode_as_quic: bool = False) -> list[dict[str, Any]]:
    """Typed rows of ``peers/tshark/<pcap>.csv``, keyed by tshark field name, in frame order.

    Types: ``frame.number`` int; ``frame.time_epoch`` int nanoseconds (parsed from the decimal
    text; tshark prints 9 digits even for microsecond captures); ports, ``tcp.stream``,
    ``tcp.seq_raw``/``ack_raw``/``len`` int or None; ``tcp.flags`` int (from hex) or None;
    :data:`TSHARK_FLAGS` bool; ``tcp.analysis.ack_rtt`` float seconds or None; the fields in
    :data:`TSHARK_MULTI` lists (``quic.version`` as ints). ``decode_as_quic`` selects the extra
    ``<pcap>.decode-as-quic.csv`` (only exists for quicdoq.pcap: tshark 4.0 reads UDP/853 as DTLS).
    """
    suffix = ".decode-as-quic.csv" if decode_as_quic else ".csv"
    with open(_peer("tshark", pcap_name + suffix), newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = tuple(next(reader))
        if header != TSHARK_FIELDS:
            raise ValueError(f"{pcap_name}{suffix}: unexpected header {header}")
        rows = []
        for lineno, cells in enumerate(reader, 2):
            if len(cells) != len(header):
                raise ValueError(f"{pcap_name}{suffix}:{lineno}: {len(cells)} cells")
            try:
                rows.append({n: _tshark_cell(n, c) for n, c in zip(header, cells)})
            except ValueError as exc:
                raise ValueError(f"{pcap_name}{suffix}:{lineno}: {exc}") from None
    return rows


# --------------------------------------------------------------------------------------------
# tcptrace -l -r -n (peers/tcptrace/<pcap>.txt)
# --------------------------------------------------------------------------------------------


@dataclass
class TcptraceConn:
    """One ``TCP connection N:`` block.

    ``a2b``/``b2a`` map snake_case stat names to values: int or float as printed, ``None`` for
    ``NA``/``N/A``, bool for the Y/N fields. Times keep tcptrace's unit, named in the key
    (``rtt_avg_ms``, ``idletime_max_ms``, ``data_xmit_time_s``; ``throughput_bytes_per_s``);
    ``initial window`` is printed twice and becomes ``initial_window_bytes``/``_pkts``;
    ``SYN/FIN pkts sent: 1/1`` becomes ``syn_pkts_sent``/``fin_pkts_sent`` and
    ``req 1323 ws/ts: Y/N`` ``req_1323_ws``/``req_1323_ts``. Some keys exist only in some
    connections: ``resets_sent``, ``hardware_dups`` and the ambiguous-ACK block
    (``ambiguous_acks``, ``rtt_min_last_ms``, ...).
    """

    index: int
    addr_a: str
    port_a: int
    addr_b: str
    port_b: int
    complete: bool  # "complete conn: yes"
    reset: bool  # "complete conn: RESET"
    syns: int | None  # "(SYNs: N)", printed only when not complete
    fins: int | None
    first_packet_ns: int
    last_packet_ns: int
    elapsed_ns: int
    total_packets: int
    filename: str
    a2b: dict[str, Any] = field(default_factory=dict)
    b2a: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # warnings printed inside the block
    raw_addr_a: str = ""
    raw_addr_b: str = ""

    @property
    def key(self) -> tuple[Endpoint, Endpoint]:
        return endpoint_key(self.addr_a, self.port_a, self.addr_b, self.port_b)


@dataclass
class TcptraceOutput:
    """The whole file: header summary, diagnostics and connections.

    ``messages`` are the diagnostic lines (tcptrace writes them to stderr, which is unbuffered,
    so they mostly come before the buffered stdout report). ``error`` is set when tcptrace did not
    produce a report at all (no ``packets seen`` line), and holds those messages.
    ``connections_traced`` is None when tcptrace printed ``no traced TCP packets``.
    """

    pcap: str
    packets_seen: int | None = None
    tcp_packets_traced: int | None = None
    trace_elapsed_ns: int | None = None
    connections_traced: int | None = None
    messages: list[str] = field(default_factory=list)
    error: str | None = None
    connections: list[TcptraceConn] = field(default_factory=list)


_TT_MESSAGES = re.compile(
    r"Warning: .*|TCP packet \d+: .*|\tFurther warnings disabled.*"
    r"|\*\*\* \d+ packets were too short to process at some point|\t\(use -w option to show details\)"
)
_TT_STAT = re.compile(
    r" +(?P<k1>\S.*?): +(?P<v1>\S+)(?: (?P<u1>pkts|bytes|times|secs|ms|Bps|segs))?"
    r" +(?P<k2>\S.*?): +(?P<v2>\S+)(?: (?P<u2>pkts|bytes|times|secs|ms|Bps|segs))? *"
)
_TT_UNIT_SUFFIX = {"ms": "_ms", "secs": "_s", "Bps": "_bytes_per_s"}
# "throughput: NA" is printed without its unit; the key must still get its unit suffix.
_TT_UNIT_WHEN_NA = {"throughput": "Bps"}


def _tt_elapsed_ns(text: str) -> int:
    """``H:MM:SS.ffffff`` -> nanoseconds."""
    h, m, s = text.split(":")
    return (int(h) * 3600 + int(m) * 60) * 10**9 + _decimal_ns(s)


def _tt_time_ns(text: str) -> int:
    """``Thu Mar  7 21:42:06.869344 2013`` (ctime style, UTC in this corpus) -> epoch ns."""
    t = dt.datetime.strptime(text, "%a %b %d %H:%M:%S.%f %Y")
    return calendar.timegm(t.timetuple()) * 10**9 + t.microsecond * 1000


def _tt_addr(text: str) -> tuple[str, int]:
    """Split ``addr:port``; repair tcptrace's IPv6 text, e.g. ``:0001`` for ``::1``.

    tcptrace 6.6.7 prints every IPv6 group with 4 hex digits and compresses zero runs itself;
    a leading zero run loses one of its two colons.
    """
    addr, _, port = text.rpartition(":")
    if addr.startswith(":") and not addr.startswith("::"):
        addr = ":" + addr
    return norm_addr(addr), int(port)


def _tt_value(text: str) -> Any:
    if text in ("NA", "N/A"):
        return None
    if text in ("Y", "N"):
        return text == "Y"
    return float(text) if "." in text else int(text)


def _tt_stats(key: str, value: str, unit: str | None, into: dict[str, Any]) -> None:
    if "/" in key and "/" in value:  # "SYN/FIN pkts sent: 1/1", "req 1323 ws/ts: Y/N"
        head, _, rest = key.partition("/")
        *prefix, first = head.split(" ")
        second, *suffix = rest.split(" ")
        pairs = zip((first, second), value.split("/"))
        items = [(" ".join([*prefix, k, *suffix]), v) for k, v in pairs]
    else:
        if key == "initial window":
            key = f"{key} {unit}"
        items = [(key, value)]
    for k, v in items:
        name = re.sub(r"[^a-z0-9]+", "_", k.lower()).strip("_") + _TT_UNIT_SUFFIX.get(unit, "")
        if name in into:
            raise ValueError(f"duplicate tcptrace stat {name!r}")
        into[name] = _tt_value(v)


def tcptrace_output(pcap_name: str) -> TcptraceOutput:
    """Parse ``peers/tcptrace/<pcap>.txt`` (``tcptrace -l -r -n``, stdout and stderr together)."""
    out = TcptraceOutput(pcap_name)
    conn: TcptraceConn | None = None
    hdr: dict[str, Any] = {}
    in_report = False
    lines = _peer("tcptrace", f"{pcap_name}.txt").read_text().splitlines()
    for lineno, line in enumerate(lines, 1):
        try:
            if m := re.fullmatch(r"(\d+) packets seen, (\d+) TCP packets traced", line):
                out.packets_seen, out.tcp_packets_traced = int(m[1]), int(m[2])
                in_report = True
            elif _TT_MESSAGES.fullmatch(line):
                out.messages.append(line.strip())
            elif re.fullmatch(r"\d+ args? remaining, starting with .*|Ostermann's tcptrace .*|", line):
                pass
            elif not in_report:
                out.messages.append(line.strip())  # e.g. the "unknown link format" error text
            elif m := re.fullmatch(r"trace file elapsed time: (\S+)", line):
                out.trace_elapsed_ns = _tt_elapsed_ns(m[1])
            elif m := re.fullmatch(r"(\d+) TCP connections? traced:", line):
                out.connections_traced = int(m[1])
            elif re.fullmatch(r"elapsed wallclock time: .*|TCP connection info:|no traced TCP packets|=+", line):
                pass
            elif m := re.fullmatch(r"TCP connection (\d+):", line):
                conn, hdr = None, {"index": int(m[1])}
            elif m := re.fullmatch(r"\thost [a-z]+:\s+(\S+)", line):
                hdr.setdefault("hosts", []).append(m[1])
            elif m := re.fullmatch(r"\t(complete conn|first packet|last packet|elapsed time"
                                   r"|total packets|filename):\s+(.*)", line):
                hdr[m[1]] = m[2]
            elif re.fullmatch(r"   [a-z]+->[a-z]+:\t+ *[a-z]+->[a-z]+:", line):
                conn = _tt_conn(hdr)
                out.connections.append(conn)
            elif conn is not None and (m := _TT_STAT.fullmatch(line)):
                if m["k1"] != m["k2"] or m["u1"] != m["u2"] and "NA" not in (m["v1"], m["v2"]):
                    raise ValueError("a->b and b->a columns disagree on name/unit")
                unit = m["u1"] or m["u2"] or _TT_UNIT_WHEN_NA.get(m["k1"])
                _tt_stats(m["k1"], m["v1"], unit, conn.a2b)
                _tt_stats(m["k2"], m["v2"], unit, conn.b2a)
            elif conn is not None and (m := re.fullmatch(r" +\*\* WARNING: (.*?) *", line)):
                conn.notes.append(m[1])
            elif conn is not None and line.startswith("\t  "):  # "For the following 5 RTT ..."
                if line.startswith("\t  For "):
                    conn.notes.append("")
                conn.notes[-1] = (conn.notes[-1] + " " + line.strip()).strip()
            else:
                raise ValueError("unexpected line")
        except (ValueError, KeyError) as exc:
            raise ValueError(f"tcptrace/{pcap_name}.txt:{lineno}: {exc}: {line!r}") from None
    if out.packets_seen is None:
        out.error = "\n".join(out.messages) or "no output"
    return out


def _tt_conn(hdr: dict[str, Any]) -> TcptraceConn:
    m = re.fullmatch(r"(yes|no|RESET)(?:\t\(SYNs: (\d+)\)  \(FINs: (\d+)\))?", hdr["complete conn"])
    if not m:
        raise ValueError(f"bad 'complete conn' {hdr['complete conn']!r}")
    (addr_a, port_a), (addr_b, port_b) = (_tt_addr(h) for h in hdr["hosts"])
    return TcptraceConn(
        index=hdr["index"], addr_a=addr_a, port_a=port_a, addr_b=addr_b, port_b=port_b,
        complete=m[1] == "yes", reset=m[1] == "RESET",
        syns=int(m[2]) if m[2] else None, fins=int(m[3]) if m[3] else None,
        first_packet_ns=_tt_time_ns(hdr["first packet"]),
        last_packet_ns=_tt_time_ns(hdr["last packet"]),
        elapsed_ns=_tt_elapsed_ns(hdr["elapsed time"]),
        total_packets=int(hdr["total packets"]), filename=hdr["filename"],
        raw_addr_a=hdr["hosts"][0], raw_addr_b=hdr["hosts"][1],
    )


def tcptrace_connections(pcap_name: str) -> list[TcptraceConn]:
    """The connections of :func:`tcptrace_output` (empty when tcptrace errored or traced none)."""
    return tcptrace_output(pcap_name).connections


# --------------------------------------------------------------------------------------------
# Zeek baselines (peers/zeek/baselines.tsv and peers/zeek/<pcap>/<test>/<file>)
# --------------------------------------------------------------------------------------------

CANONIFIED_TS = "XXXXXXXXXX.XXXXXX"

# Types of columns that only occur in headerless/zeek-cut baselines (no #types anywhere in the
# corpus); every other column's type is borrowed from the corpus's full logs of the same kind.
_EXTRA_TYPES = {
    "conn": {"vlan": "int", "inner_vlan": "int", "id.ctx.vlan": "int", "id.ctx.inner_vlan": "int",
             "pppoe_session_id": "count", "community_id": "string"},
}


@dataclass
class ZeekLog:
    """One baseline file. ``rows`` map column name -> typed value.

    ``header`` says how the columns were known: ``"zeek"`` (full ASCII log with ``#fields`` and
    ``#types``), ``"names"`` (``zeek-cut -m`` / ``btest-diff-cut``: one line of column names) or
    ``"none"`` (plain ``zeek-cut``: no header; names from baselines.tsv). ``types`` come from
    ``#types`` or, for the other two, are borrowed (see :func:`zeek_column_types`).
    ``missing_columns``: requested by the test but unknown to that log; zeek-cut -m then prints
    an empty name and empty cells (the ``quic.log.*-discarded-packets`` files ask for
    ``service_name``, which quic.log does not have).
    """

    pcap: str
    test: str
    file: str
    log: str
    path: Path
    header: str
    columns: list[str]
    types: dict[str, str]
    rows: list[dict[str, Any]]
    full: bool  # baselines.tsv columns == "(all columns)"
    bare_mode: bool
    test_script: bool
    zeek_cmd: str
    missing_columns: list[str] = field(default_factory=list)


def zeek_baselines() -> list[dict[str, str]]:
    """Rows of ``peers/zeek/baselines.tsv`` as str dicts."""
    with open(_peer("zeek", "baselines.tsv"), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))


def zeek_requested_columns(columns: str) -> list[str] | None:
    """The column names in a baselines.tsv ``columns`` cell; None for ``(all columns)``."""
    names = columns.split()
    if names and names[0] == "-m":
        names = names[1:]
    return None if names == ["(all", "columns)"] else names


def _zeek_value(zeek_type: str | None, text: str, set_sep: str) -> Any:
    if text in ("-", "(empty)", ""):
        return None
    if zeek_type is None or zeek_type in ("string", "addr", "subnet", "enum", "pattern"):
        return text
    if m := re.fullmatch(r"(?:set|vector)\[(.+)\]", zeek_type):
        return [_zeek_value(m[1], v, set_sep) for v in text.split(set_sep)]
    if zeek_type in ("count", "int", "port"):
        return int(text)
    if zeek_type in ("double", "interval"):
        return float(text)
    if zeek_type == "time":
        return text if text == CANONIFIED_TS else float(text)
    if zeek_type == "bool":
        if text not in ("T", "F"):
            raise ValueError(f"bad bool {text!r}")
        return text == "T"
    raise ValueError(f"unknown Zeek type {zeek_type!r}")


def _zeek_read(path: Path) -> tuple[str, list[str], dict[str, str], list[list[str]], str]:
    """Return (header kind, names, #types, data rows as cell lists, set separator)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or not lines[0].startswith("### BTest baseline data"):
        raise ValueError(f"{path}: missing btest header line")
    lines = lines[1:]
    names: list[str] = []
    types: list[str] = []
    set_sep = ","
    data = []
    kind = "zeek" if lines and lines[0].startswith("#separator") else None
    for line in lines:
        if kind == "zeek" and line.startswith("#"):
            key, _, value = line[1:].partition("\t" if "\t" in line else " ")
            if key == "separator" and value != "\\x09":
                raise ValueError(f"{path}: separator {value!r}")
            if key == "set_separator":
                set_sep = value
            elif key == "fields":
                names = value.split("\t")
            elif key == "types":
                types = value.split("\t")
        else:
            data.append(line.split("\t"))
    return kind or "", names, dict(zip(names, types)), data, set_sep


def zeek_column_types(log: str) -> dict[str, str]:
    """Column -> Zeek type for a log kind, from the ``#types`` of the corpus's full logs
    (plus ``_EXTRA_TYPES``). Raises if two baselines disagree about a column's type.
    """
    return dict(_zeek_column_types(log))


@functools.cache
def _zeek_column_types(log: str) -> dict[str, str]:
    types = dict(_EXTRA_TYPES.get(log, {}))
    for row in zeek_baselines():
        if row["log"] == log:
            path = corpus_dir() / "peers" / "zeek" / row["pcap"] / row["test"] / row["file"]
            for name, t in _zeek_read(path)[2].items():
                if types.setdefault(name, t) != t:
                    raise ValueError(f"{log}.{name}: types {types[name]!r} and {t!r} in the corpus")
    return types


def _zeek_log(row: dict[str, str]) -> ZeekLog:
    path = corpus_dir() / "peers" / "zeek" / row["pcap"] / row["test"] / row["file"]
    kind, names, types, data, set_sep = _zeek_read(path)
    requested = zeek_requested_columns(row["columns"])
    if kind != "zeek":
        kind = "names" if row["columns"].startswith("-m") else "none"
        if kind == "names":
            names, data = data[0], data[1:]
        else:
            names = list(requested or [])
        if requested is not None and len(requested) == len(names):
            missing = [r for r, n in zip(requested, names) if n == ""]
            names = [n or r for r, n in zip(requested, names)]
        else:
            missing = []
        known = _zeek_column_types(row["log"])
        types = {n: known[n] for n in names if n in known}
    else:
        missing = []
    rows = []
    for cells in data:
        if len(cells) != len(names):
            raise ValueError(f"{path}: {len(cells)} cells for {len(names)} columns: {cells}")
        rows.append({n: _zeek_value(types.get(n), c, set_sep) for n, c in zip(names, cells)})
    return ZeekLog(
        pcap=row["pcap"], test=row["test"], file=row["file"], log=row["log"], path=path,
        header=kind, columns=names, types=types, rows=rows, full=requested is None,
        bare_mode=row["bare_mode"] == "yes", test_script=row["test_script"] == "yes",
        zeek_cmd=row["zeek_cmd"], missing_columns=missing,
    )


def zeek_logs(pcap_name: str, log: str | None = "conn") -> list[ZeekLog]:
    """Every Zeek baseline for ``pcap_name`` of the given log kind (``None``: all kinds).

    Baselines are btest-canonified: the first epoch-like time on each line (normally ``ts``) is
    the string :data:`CANONIFIED_TS`, other times are floats. ``-`` (unset) and ``(empty)`` are
    None. Returns [] for a capture without baselines.
    """
    return [_zeek_log(r) for r in zeek_baselines()
            if r["pcap"] == pcap_name and (log is None or r["log"] == log)]


def zeek_conn_full(pcap_name: str) -> list[dict[str, Any]] | None:
    """Rows of the complete conn.log for ``pcap_name`` (all columns), or None if none exists.

    Mind ``ZeekLog.bare_mode``/``test_script`` (via :func:`zeek_logs`): e.g. retry.pcap's full
    conn.log comes from ``core.ppp`` run with ``-b``.
    """
    full = [z for z in zeek_logs(pcap_name, "conn") if z.full]
    if len(full) > 1:
        raise ValueError(f"{pcap_name}: {len(full)} full conn.log baselines")
    return full[0].rows if full else None

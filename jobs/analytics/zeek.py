"""A Zeek `conn.log` from the flows view, so Zeek users can join tailscope's flows to their logs.

Field by field (Zeek's base/protocols/conn/main.zeek names; `community_id` as the
policy/protocols/conn/community-id-logging script adds it):

- `id.orig_*` is tailscope's client and `id.resp_*` its server (docs/schemas.md: the side that
  sent the SYN, or the QUIC Initial, else the port heuristic), as Zeek's originator is.
- `orig_bytes`/`resp_bytes` are payload bytes and `*_ip_bytes` IP bytes, as in Zeek.
- `conn_state` and `history` are derived from the flow's counters (SYN, FIN and RST per direction,
  payload bytes), not from the packet order Zeek follows: the states are Zeek's (S0, S1, SF, REJ,
  RSTO, RSTR, RSTOS0, RSTRH, SH, SHR, S2, S3, OTH) and the history letters appear in Zeek's canonical
  order (ShADadFfRr) rather than in the order they happened.
- `service` is the flows table's `service`: named as Zeek's dynamic protocol detection names it
  (http, ssl and ssh when both sides' first bytes speak it; dns and dhcp by port; quic).
- `uid` is `T` + the flow's Community ID hash, truncated: stable across runs (Zeek's are random).
"""
from __future__ import annotations

import datetime as dt
from typing import TextIO

FIELDS = [
    ("ts", "time"), ("uid", "string"), ("id.orig_h", "addr"), ("id.orig_p", "port"), ("id.resp_h", "addr"),
    ("id.resp_p", "port"), ("proto", "enum"), ("service", "string"), ("duration", "interval"),
    ("orig_bytes", "count"), ("resp_bytes", "count"), ("conn_state", "string"), ("local_orig", "bool"),
    ("local_resp", "bool"), ("missed_bytes", "count"), ("history", "string"), ("orig_pkts", "count"),
    ("orig_ip_bytes", "count"), ("resp_pkts", "count"), ("resp_ip_bytes", "count"),
    ("tunnel_parents", "set[string]"), ("community_id", "string"),
]
UNSET = "-"

QUERY = """
SELECT epoch_ns("start") AS start_ns, duration_ns, community_id, client_ip, client_port, server_ip, server_port,
       ip_proto, protocol, service, alpn, c2s_payload_bytes, s2c_payload_bytes, c2s_packets, s2c_packets,
       c2s_ip_bytes, s2c_ip_bytes, c2s_syn, s2c_syn, c2s_fin, s2c_fin, c2s_rst, s2c_rst
FROM flows ORDER BY "start", capture_id, flow_id
"""


def _endpoint(sent: dict, other_syn: bool, prefix: str, is_orig: bool) -> str:
    """An endpoint's last TCP state as Zeek's analyzer would leave it, from its counters."""
    if sent[f"{prefix}_rst"]:
        return "RESET"
    if sent[f"{prefix}_fin"]:
        return "CLOSED"
    if not sent[f"{prefix}_packets"]:
        return "INACTIVE"
    if not sent[f"{prefix}_syn"]:
        return "PARTIAL"
    if is_orig:
        return "ESTABLISHED" if other_syn else "SYN_SENT"
    return "ESTABLISHED" if other_syn else "SYN_ACK_SENT"


def conn_state(ip_proto: int, r: dict) -> str:
    """Zeek's conn_state (base/protocols/conn/main.zeek) over endpoint states rebuilt from the
    counters (see the module docstring)."""
    if ip_proto != 6:
        return "SF" if r["s2c_packets"] else "S0"
    os_ = _endpoint(r, r["s2c_syn"] > 0, "c2s", True)
    rs = _endpoint(r, r["c2s_syn"] > 0, "s2c", False)
    o_inactive = os_ in ("INACTIVE", "PARTIAL")
    r_inactive = rs in ("INACTIVE", "PARTIAL")
    if rs == "RESET":
        if os_ in ("SYN_SENT", "SYN_ACK_SENT") or (os_ == "RESET" and not r["c2s_payload_bytes"] and not r["s2c_payload_bytes"]):
            return "REJ"
        return "RSTRH" if o_inactive else "RSTR"
    if os_ == "RESET":
        if r_inactive:
            return "RSTOS0" if r["c2s_syn"] and not r["c2s_fin"] else "OTH"
        return "RSTO"
    if rs == "CLOSED" and os_ == "CLOSED":
        return "SF"
    if os_ == "CLOSED":
        return "SH" if r_inactive else "S2"
    if rs == "CLOSED":
        return "SHR" if o_inactive else "S3"
    if os_ == "SYN_SENT" and rs == "INACTIVE":
        return "S0"
    if os_ == "ESTABLISHED" and rs == "ESTABLISHED":
        return "S1"
    return "OTH"


def history(ip_proto: int, r: dict) -> str:
    h = ""
    if ip_proto == 6:
        h += "S" if r["c2s_syn"] else ""
        h += "h" if r["s2c_syn"] else ""
        h += "A" if r["c2s_packets"] > r["c2s_syn"] else ""
    h += "D" if r["c2s_payload_bytes"] else ""
    h += "d" if r["s2c_payload_bytes"] else ""
    if ip_proto == 6:
        h += ("F" if r["c2s_fin"] else "") + ("f" if r["s2c_fin"] else "")
        h += ("R" if r["c2s_rst"] else "") + ("r" if r["s2c_rst"] else "")
    return h or UNSET


def _service(r: dict) -> str:
    return r["service"] or UNSET


def _proto(ip_proto: int) -> str:
    return {6: "tcp", 17: "udp", 1: "icmp", 58: "icmp"}.get(ip_proto, "unknown_transport")


def _uid(community_id: str | None, start_ns: int) -> str:
    if community_id:
        return "T" + community_id.split(":", 1)[-1].replace("+", "").replace("/", "").replace("=", "")[:17]
    return f"T{start_ns:x}"


def _interval(ns) -> str:
    # Zeek leaves the duration of a connection seen at a single instant unset
    return UNSET if not ns else f"{ns / 1e9:.6f}"


def write_conn_log(con, out: TextIO, opened: dt.datetime | None = None) -> int:
    """Write the flows of `con` (a connection with the dataset's views) as conn.log; returns the
    number of connections."""
    opened = opened or dt.datetime.now(dt.timezone.utc)
    stamp = opened.strftime("%Y-%m-%d-%H-%M-%S")
    out.write("#separator \\x09\n#set_separator\t,\n#empty_field\t(empty)\n#unset_field\t-\n#path\tconn\n")
    out.write(f"#open\t{stamp}\n")
    out.write("#fields\t" + "\t".join(f for f, _ in FIELDS) + "\n")
    out.write("#types\t" + "\t".join(t for _, t in FIELDS) + "\n")
    cur = con.execute(QUERY)
    names = [d[0] for d in cur.description]
    n = 0
    while batch := cur.fetchmany(10_000):
        for row in batch:
            r = dict(zip(names, row))
            proto = int(r["ip_proto"])
            values = [
                f"{r['start_ns'] / 1e9:.6f}", _uid(r["community_id"], r["start_ns"]), r["client_ip"], r["client_port"],
                r["server_ip"], r["server_port"], _proto(proto), _service(r), _interval(r["duration_ns"]),
                r["c2s_payload_bytes"], r["s2c_payload_bytes"], conn_state(proto, r), UNSET, UNSET, 0, history(proto, r),
                r["c2s_packets"], r["c2s_ip_bytes"], r["s2c_packets"], r["s2c_ip_bytes"], UNSET, r["community_id"] or UNSET,
            ]
            out.write("\t".join(UNSET if v is None else str(v) for v in values) + "\n")
            n += 1
    out.write(f"#close\t{dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d-%H-%M-%S')}\n")
    return n

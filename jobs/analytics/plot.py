"""A flow drill-down to look at: tcptrace/xplot's time-sequence graph and the RTT over time.

Time-sequence graph (tcptrace -S, as xplot draws it): for the data direction, each segment is a
vertical bar from its first to its last sequence number at the time it was seen; the other
direction's cumulative ACK is a step line below it and ACK + receive window a step line above it
(the sender may not go past it); SACK blocks the receiver reported are short bars at the time of
the ACK that carried them. Retransmissions are coloured by the cause tailscope judged. Sequence
numbers are relative to the direction's initial sequence number, as in Wireshark and tcptrace.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# One colour per retransmission cause (jobs/ and docs/schemas.md `retx_cause`); first
# transmissions are black, as in xplot.
CAUSE_COLOURS = {
    "rto": "#d62728",
    "fast_retransmit": "#ff7f0e",
    "tlp": "#9467bd",
    "spurious": "#7f7f7f",
    "network_duplicate": "#17becf",
    "packet_threshold": "#ff7f0e",
    "time_threshold": "#bcbd22",
    "pto": "#d62728",
    "unknown": "#8c564b",
}
ACK_COLOUR = "#2ca02c"
WINDOW_COLOUR = "#e6b800"
SACK_COLOUR = "#1f77b4"

PACKETS_SQL = """
SELECT epoch_ns(ts) AS ts_ns, direction, rel_seq, rel_ack, seq, ack, payload_len, flags, "window", sack,
       retx_cause, rtt_ns, ip_proto
FROM read_parquet(?, hive_partitioning = true, union_by_name = true)
WHERE flow_id = ? AND capture_id = ?
ORDER BY ts, frame
"""


class PlotError(ValueError):
    pass


@dataclass
class FlowPackets:
    capture_id: str
    flow_id: int
    client: str
    server: str
    rows: list[dict]


def load_flow(dataset: Path, flow_id: int, capture_id: str | None = None) -> FlowPackets:
    import duckdb

    dataset = Path(dataset)
    flows_glob = str(dataset / "flows" / "*" / "*.parquet")
    packets_glob = str(dataset / "packets" / "*" / "*.parquet")
    if not list(dataset.glob("flows/*/*.parquet")):
        raise PlotError(f"{dataset}: no flows (run tailscope analyze first)")
    con = duckdb.connect()
    try:
        where = "flow_id = ?" + (" AND capture_id = ?" if capture_id else "")
        params = [flow_id] + ([capture_id] if capture_id else [])
        found = con.execute(
            f"SELECT capture_id, client_ip, client_port, server_ip, server_port, ip_proto FROM read_parquet(?, hive_partitioning = true, "
            f"union_by_name = true) WHERE {where}",
            [flows_glob, *params],
        ).fetchall()
        if not found:
            raise PlotError(f"{dataset}: no flow {flow_id}" + (f" in capture {capture_id!r}" if capture_id else ""))
        if len({r[0] for r in found}) > 1:
            raise PlotError(f"flow {flow_id} is in several captures ({', '.join(sorted({r[0] for r in found}))}): pick one with --capture")
        cap, cip, cport, sip, sport, ip_proto = found[0]
        if ip_proto != 6:
            raise PlotError(f"flow {flow_id} is not TCP: the time-sequence graph needs sequence numbers")
        if not list(dataset.glob("packets/*/*.parquet")):
            raise PlotError(f"{dataset}: no packets table (analysed with --packets none?)")
        cur = con.execute(PACKETS_SQL, [packets_glob, flow_id, cap])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        con.close()
    return FlowPackets(cap, flow_id, f"{cip}:{cport}", f"{sip}:{sport}", rows)


def _data_direction(rows: list[dict]) -> str:
    sent = {"c2s": 0, "s2c": 0}
    for r in rows:
        if r["direction"] in sent:
            sent[r["direction"]] += r["payload_len"] or 0
    return "s2c" if sent["s2c"] >= sent["c2s"] else "c2s"


def _sack_relative(sack, isn: int) -> list[tuple[int, int]]:
    return [((b["left"] - isn) % 2**32, (b["right"] - isn) % 2**32) for b in (sack or [])]


def _time_sequence(ax, rows: list[dict], data_dir: str, secs) -> None:
    """One direction's time-sequence graph on `ax`: its data segments, the other side's ACKs,
    ACK + receive window and SACK blocks."""
    from matplotlib.collections import LineCollection

    ack_dir = "c2s" if data_dir == "s2c" else "s2c"
    # the data direction's ISN, to make the SACK edges (absolute) relative like rel_seq/rel_ack
    isn = next(((r["seq"] - r["rel_seq"]) % 2**32 for r in rows if r["direction"] == data_dir and r["rel_seq"] is not None), 0)
    segments = {"first": []}
    for r in rows:
        if r["direction"] == data_dir and r["payload_len"]:
            x = secs(r)
            segments.setdefault(r["retx_cause"] or "first", []).append([(x, r["rel_seq"]), (x, r["rel_seq"] + r["payload_len"])])
    acks, windows, sacks = [], [], []
    for r in rows:
        if r["direction"] != ack_dir or r["rel_ack"] is None or not (r["flags"] or 0) & 0x10:
            continue
        x = secs(r)
        acks.append((x, r["rel_ack"]))
        if r["window"] is not None:
            windows.append((x, r["rel_ack"] + r["window"]))
        for left, right in _sack_relative(r["sack"], isn):
            sacks.append([(x, left), (x, right)])
    for key, segs in segments.items():
        if segs:
            colour = "black" if key == "first" else CAUSE_COLOURS.get(key, "#8c564b")
            label = "data" if key == "first" else f"retransmission: {key}"
            ax.add_collection(LineCollection(segs, colors=colour, linewidths=1.6, label=label))
    if acks:
        ax.step(*zip(*acks), where="post", color=ACK_COLOUR, linewidth=1, label="ACK")
    if windows:
        ax.step(*zip(*windows), where="post", color=WINDOW_COLOUR, linewidth=1, label="ACK + receive window")
    if sacks:
        ax.add_collection(LineCollection(sacks, colors=SACK_COLOUR, linewidths=2.5, label="SACK blocks"))
    ax.autoscale()
    ax.set_ylabel(f"{data_dir}: relative sequence number")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)


def draw(flow: FlowPackets, out: Path, direction: str | None = None) -> Path:
    """The time-sequence graph of each direction that sent data (the one that sent more first;
    only `direction` when given), and the RTT samples below."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    rows = flow.rows
    if not rows:
        raise PlotError(f"flow {flow.flow_id}: no packets in the packets table (analysed with --packets tagged/none?)")
    first = direction or _data_direction(rows)
    other = "c2s" if first == "s2c" else "s2c"
    dirs = [first] if direction or not any(r["direction"] == other and r["payload_len"] for r in rows) else [first, other]
    t0 = rows[0]["ts_ns"]

    def secs(r):
        return (r["ts_ns"] - t0) / 1e9

    fig, axes = plt.subplots(len(dirs) + 1, 1, figsize=(11, 5 + 3 * len(dirs)), height_ratios=[3] * len(dirs) + [1], sharex=True)
    axes[0].set_title(f"flow {flow.flow_id} ({flow.capture_id}): {flow.client} → {flow.server}")
    for ax, d in zip(axes, dirs):
        _time_sequence(ax, rows, d, secs)
    ax_rtt = axes[-1]
    rtt = {"c2s": [], "s2c": []}
    for r in rows:
        if r["rtt_ns"] is not None and r["rtt_ns"] > 0:
            rtt[r["direction"]].append((secs(r), r["rtt_ns"] / 1e6))
    # a sample sits on the ACK that produced it: ACKs sent c2s time the server's data
    for acker, colour, label in (("c2s", "#1f77b4", "RTT of server data (client ACKs)"), ("s2c", "#ff7f0e", "RTT of client data (server ACKs)")):
        if rtt[acker]:
            ax_rtt.plot(*zip(*rtt[acker]), "o", markersize=3, color=colour, label=label)
    ax_rtt.set_ylabel("RTT (ms)")
    ax_rtt.set_xlabel("time since the flow's first packet (s)")
    if rtt["s2c"] or rtt["c2s"]:
        ax_rtt.legend(loc="upper left", fontsize="small")
    ax_rtt.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, format=out.suffix.lstrip(".").lower() or "png", dpi=120)
    plt.close(fig)
    return out

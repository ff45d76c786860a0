"""A flow drill-down to look at: tcptrace/xplot's time-sequence graph and the RTT over time.

Time-sequence graph (tcptrace -S, as xplot draws it): for one data direction, each segment is a
vertical bar from its first to its last sequence number at the time it was seen; the other
direction's cumulative ACK is a step line below it and ACK + receive window a step line above it
(the sender may not go past it); SACK blocks the receiver reported are short bars at the time of
the ACK that carried them. Retransmissions are marked "R" over their bar, as xplot does, in one
colour per cause tailscope judged (a resend of a few hundred bytes is below one pixel as a bar);
the silence before a timeout's resend (RTO, TLP) is drawn and labelled with its length. The
y-axis spans the data's sequence range: the window line, far above it on a fast path, would squash
the data into the bottom of the plot. Sequence numbers are relative to the direction's initial
sequence number, as in Wireshark and tcptrace.

Output: PNG, SVG, or HTML - the SVG inside one self-contained page (no network: the zoom is a few
lines of inline script) that zooms with the mouse wheel and pans by dragging.
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

# Over the packets staging view (db.packets_view): retx_cause is derived, not stored.
PACKETS_SQL = """
SELECT ts_ns, direction, rel_seq, rel_ack, seq, ack, payload_len, flags, "window", sack,
       retx_cause, rtt_ns, ip_proto
FROM packets
WHERE flow_id = ? AND capture_id = ?
ORDER BY ts_ns, frame
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
        from tailscope.jobs.analytics.db import packets_view

        quoted = "'" + packets_glob.replace("'", "''") + "'"
        packets_view(con, f"read_parquet({quoted}, hive_partitioning = true, union_by_name = true)")
        cur = con.execute(PACKETS_SQL, [flow_id, cap])
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


def seq_range(rows: list[dict], data_dir: str) -> tuple[int, int] | None:
    """The sequence numbers the direction's data spans (from 0, its ISN), or None without data."""
    ends = [r["rel_seq"] + r["payload_len"] for r in rows
            if r["direction"] == data_dir and r["payload_len"] and r["rel_seq"] is not None]
    return (0, max(ends)) if ends else None


# Causes whose resend a timer fired, and the name their silence is labelled with.
TIMEOUT_CAUSES = {"rto": "RTO", "tlp": "TLP"}


@dataclass
class TimeoutGap:
    start_s: float  # the flow's last packet before the resend
    resend_s: float
    seq: int  # where the resend starts
    cause: str

    @property
    def label(self) -> str:
        return f"{TIMEOUT_CAUSES[self.cause]} {self.resend_s - self.start_s:.2g} s"


def timeout_gaps(rows: list[dict], data_dir: str, secs) -> list[TimeoutGap]:
    """The direction's resends a timer sent (RTO, TLP), with the silence before each: since the
    flow's previous packet, either direction (the timer fires when nothing moves). Only a silence
    of at least the flow's minimum RTT is one: the resends that follow an RTO in slow start go out
    as ACKs arrive (no gap), while each backed-off repeat of a timeout has its own."""
    floor = min((r["rtt_ns"] for r in rows if r["rtt_ns"]), default=0) / 1e9
    gaps, prev = [], None
    for r in rows:
        if r["direction"] == data_dir and r["payload_len"] and r["retx_cause"] in TIMEOUT_CAUSES and prev is not None \
                and secs(r) - secs(prev) >= floor:
            gaps.append(TimeoutGap(secs(prev), secs(r), r["rel_seq"], r["retx_cause"]))
        prev = r
    return gaps


def _time_sequence(ax, rows: list[dict], data_dir: str, secs) -> None:
    """One direction's time-sequence graph on `ax`: its data segments, the other side's ACKs,
    ACK + receive window and SACK blocks; retransmissions marked by cause, timeouts labelled."""
    from matplotlib.collections import LineCollection

    ack_dir = "c2s" if data_dir == "s2c" else "s2c"
    # the data direction's ISN, to make the SACK edges (absolute) relative like rel_seq/rel_ack
    isn = next(((r["seq"] - r["rel_seq"]) % 2**32 for r in rows if r["direction"] == data_dir and r["rel_seq"] is not None), 0)
    segments, marks = {"first": []}, {}
    for r in rows:
        if r["direction"] == data_dir and r["payload_len"]:
            x, top = secs(r), r["rel_seq"] + r["payload_len"]
            segments.setdefault(r["retx_cause"] or "first", []).append([(x, r["rel_seq"]), (x, top)])
            if r["retx_cause"]:
                marks.setdefault(r["retx_cause"], []).append((x, top))
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
            colour = "black" if key == "first" else CAUSE_COLOURS.get(key, CAUSE_COLOURS["unknown"])
            label = "data" if key == "first" else None  # the R marker carries the cause's legend entry
            ax.add_collection(LineCollection(segs, colors=colour, linewidths=1.6, label=label))
    if acks:
        ax.step(*zip(*acks), where="post", color=ACK_COLOUR, linewidth=1, label="ACK")
    if windows:
        ax.step(*zip(*windows), where="post", color=WINDOW_COLOUR, linewidth=1, label="ACK + receive window")
    if sacks:
        ax.add_collection(LineCollection(sacks, colors=SACK_COLOUR, linewidths=2.5, label="SACK blocks"))
    for cause, points in marks.items():
        ax.scatter(*zip(*points), marker="$R$", s=60, color=CAUSE_COLOURS.get(cause, CAUSE_COLOURS["unknown"]),
                   zorder=5, label=f"R retransmission: {cause}", gid=f"retx-{cause}")
    ax.autoscale()
    span = seq_range(rows, data_dir)
    if span:
        lo, hi = span
        margin = max((hi - lo) * 0.04, 1)
        ax.set_ylim(lo - margin, hi + margin)
    for g in timeout_gaps(rows, data_dir, secs):
        colour = CAUSE_COLOURS[g.cause]
        ax.plot([g.start_s, g.resend_s], [g.seq, g.seq], linestyle="--", linewidth=1, color=colour)
        ax.annotate(g.label, (g.resend_s, g.seq), xytext=(-4, 8), textcoords="offset points", ha="right",
                    fontsize="small", color=colour, fontweight="bold")
    ax.set_ylabel(f"{data_dir}: relative sequence number")
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)


def figure(flow: FlowPackets, direction: str | None = None):
    """The time-sequence graph of one data direction (`direction`, or the one that sent more) and
    the RTT samples below it, as a matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    rows = flow.rows
    if not rows:
        raise PlotError(f"flow {flow.flow_id}: no packets in the packets table (analysed with --packets tagged/none?)")
    data_dir = direction or _data_direction(rows)
    t0 = rows[0]["ts_ns"]

    def secs(r):
        return (r["ts_ns"] - t0) / 1e9

    fig, (ax, ax_rtt) = plt.subplots(2, 1, figsize=(11, 8), height_ratios=[3, 1], sharex=True)
    arrow = f"{flow.client} → {flow.server}" if data_dir == "c2s" else f"{flow.server} → {flow.client}"
    ax.set_title(f"flow {flow.flow_id} ({flow.capture_id}): data {arrow}")
    _time_sequence(ax, rows, data_dir, secs)
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
    return fig


FORMATS = (".png", ".svg", ".html")

# The page around the SVG: wheel zooms around the pointer, dragging pans, double-click resets
# (the SVG's viewBox is all that changes). Inline, so the file opens offline.
_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{margin:0;font:13px sans-serif}} #plot{{width:100%;height:calc(100vh - 24px);cursor:grab}}
#plot svg{{width:100%;height:100%}} p{{margin:4px 8px;color:#555}}</style></head>
<body><p>{title} &mdash; wheel: zoom, drag: pan, double-click: reset</p><div id="plot">{svg}</div>
<script>
(function () {{
  var svg = document.querySelector("#plot svg");
  var home = svg.getAttribute("viewBox").split(/[ ,]+/).map(Number), vb = home.slice(), drag = null;
  svg.removeAttribute("width"); svg.removeAttribute("height");
  function set() {{ svg.setAttribute("viewBox", vb.join(" ")); }}
  function at(e) {{
    var r = svg.getBoundingClientRect(), s = Math.max(vb[2] / r.width, vb[3] / r.height);
    return [vb[0] + (e.clientX - r.left - (r.width - vb[2] / s) / 2) * s, vb[1] + (e.clientY - r.top - (r.height - vb[3] / s) / 2) * s, s];
  }}
  svg.addEventListener("wheel", function (e) {{
    e.preventDefault();
    var p = at(e), k = e.deltaY < 0 ? 0.8 : 1.25;
    vb = [p[0] - (p[0] - vb[0]) * k, p[1] - (p[1] - vb[1]) * k, vb[2] * k, vb[3] * k]; set();
  }}, {{passive: false}});
  svg.addEventListener("mousedown", function (e) {{ drag = [e.clientX, e.clientY, vb[0], vb[1], at(e)[2]]; }});
  window.addEventListener("mouseup", function () {{ drag = null; }});
  window.addEventListener("mousemove", function (e) {{
    if (!drag) return;
    vb[0] = drag[2] - (e.clientX - drag[0]) * drag[4]; vb[1] = drag[3] - (e.clientY - drag[1]) * drag[4]; set();
  }});
  svg.addEventListener("dblclick", function () {{ vb = home.slice(); set(); }});
}})();
</script></body></html>
"""


def check_out(out: Path) -> Path:
    """The output file, if its suffix names a format we write."""
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise PlotError(f"--out {out}: the file name must end in .png, .svg or .html")
    return out


def draw(flow: FlowPackets, out: Path, direction: str | None = None) -> Path:
    """Write the flow's plot to `out`: .png, .svg, or .html (the SVG with zoom and pan)."""
    import html
    import io

    import matplotlib.pyplot as plt

    out = check_out(out)
    kind = out.suffix.lower()
    fig = figure(flow, direction)
    try:
        if kind == ".html":
            buf = io.StringIO()
            fig.savefig(buf, format="svg")
            svg = buf.getvalue()
            svg = svg[svg.index("<svg"):]  # the XML declaration and DOCTYPE do not belong inside HTML
            out.write_text(_HTML.format(title=html.escape(f"tailscope plot: flow {flow.flow_id} ({flow.capture_id})"), svg=svg))
        else:
            fig.savefig(out, format=kind.lstrip("."), dpi=120)
    finally:
        plt.close(fig)
    return out

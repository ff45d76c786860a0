"""Ground truth and precision/recall for tailscope's QUIC signatures and the quic_fallback view.

    sudo python -m tests.lab.quic_eval --out /tmp/quic-eval        # run the QUIC scenarios, score
    python -m tests.lab.quic_eval --reuse /tmp/quic-eval             # re-score finished runs (no root)

The QUIC scenarios (scenarios.QUIC_SCENARIOS: aioquic client and server, quic_apps.py) run
through the same relay as the TCP lab, with the capture at the server. tailscope analyses each
pcap into its own dataset, builds its database (the quic_fallback view) and is scored here
against labels derived from the lab's own records - never from tailscope's parsers:

* the client log (quic_apps.py): every session, QUIC attempt (4-tuple, original DCID, handshake
  done / timeout / cancelled), TCP connection and request, with the client's clock;
* the client's qlog (aioquic): per attempt, every datagram it sent and which carried a ClientHello
  (an Initial packet with a CRYPTO frame at offset 0); the server's qlog likewise for the
  ServerHello;
* the emulator log: every datagram the relay forwarded or dropped (`udp_flow`, `dgram_n`: the
  n-th datagram of the flow in that direction, the same order as the endpoint's qlog), and the
  nftables records of drops in the server namespace (`kernel_stats` with `udp_drop`: the 4-tuples).

Labelling rules
---------------
Hello datagrams.  aioquic logs each flush as its packets, then its datagrams; a flush's first
    datagram starts with its first packet, so a flush whose packets include a ClientHello
    Initial marks its first datagram. The k-th datagram of the qlog is the relay's `dgram_n` k
    (payload lengths are checked; a mismatch is a warning).
quic_initial_loss (per attempt; target).  The signature's contract (docs/schemas.md:
    quic_initial_loss_delay_ns is "first ClientHello to the repeat the server answered, 0 when
    none"; docs/signatures.md: like SYN loss): a ClientHello was lost *after* the capture point
    and a later copy got an answer. Positive: the attempt's 4-tuple is in the server-namespace
    drop set (mode first: its first datagram was dropped after tcpdump saw it) and the server
    sent something on the 4-tuple. Negative: everything else - including attempts whose UDP was
    blocked altogether (mode all, or a relay drop of every reply): those never got an answer
    and are scored as a handshake failure class instead. Not observable (neither): a ClientHello
    datagram the relay dropped *before* the capture point (rule or random loss), the server-side
    twin of a SYN lost before the capture (syn_loss_invisible in truth.py).
quic_server_initial_loss (per attempt; reported).  The relay dropped a server datagram that
    carried the ServerHello (server qlog), so the server had to send its first flight again.
    Always visible at the server. A ServerHello re-sent without such a drop (the server's PTO
    firing before the client's ACK arrived) is listed as spurious in the details.
Handshake class (per attempt; target for the failure classes).  complete: the client's handshake
    finished (HandshakeCompleted in the client log). Otherwise no_server_reply when the server
    sent nothing on the 4-tuple (the relay logs every server datagram: the capture is before it),
    version_negotiation_failed when all it sent were Version Negotiation packets (the relay's
    `quic` = vn), else no_client_handshake.
Fallback outcome (per attempt; target).  From the client's session: if the session opened a TCP
    connection *before the QUIC attempt ended* (handshake done, given up or cancelled) it is a
    race; else a TCP connection after a failed attempt is a fallback (also when the attempt
    failed at once - ICMP port unreachable, Version Negotiation without a common version - and
    TCP followed within a round trip) and after a completed one tcp_after_quic; no TCP: quic_ok
    or quic_failed. A TCP connection the client opened without
    trying QUIC because an earlier attempt failed (session effective mode cached_broken) is a
    cached_broken positive (per TCP connection); every other TCP connection is a negative.
QUIC-first sessions ending on TCP (per scenario and overall).  A session is QUIC-first when its
    first attempt was QUIC (effective mode quic_first, race, quic_only); it ended on TCP when its
    response came over TCP. A cached_broken session is not QUIC-first: the client did not try QUIC
    (the view reports those TCP connections as cached_broken, outside the share). tailscope's
    answer is docs/signatures.md's share over the view: QUIC attempts with `ended_on_tcp` (a
    fallback, or a race whose QUIC handshake did not complete) / QUIC attempts.
Clean.  In quic_clean no flow may carry a signature and no packet a tag, but for
    quic_initial_retransmission on as many Initials as the endpoints' qlogs show re-sent (a probe
    timeout that fired before the answer on a busy machine re-sends the hello on a clean path).
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .evaluate import TARGET, Row, _fmt, _read
from .harness import ScenarioResult, load_finished, run_scenarios
from .scenarios import QUIC_SCENARIOS

QUIC_EVAL_SCENARIOS = list(QUIC_SCENARIOS.values())
HANDSHAKE_CLASSES = ["complete", "no_server_reply", "no_client_handshake", "version_negotiation_failed"]
OUTCOMES = ["fallback", "race", "quic_ok", "quic_failed", "tcp_after_quic"]
OUTCOME_TARGET = {"fallback": TARGET, "race": TARGET, "quic_ok": TARGET, "quic_failed": TARGET}


# ---- truth -------------------------------------------------------------------------------

@dataclass
class Attempt:
    session: int
    key: tuple                       # (client ip, client port, server ip, server port)
    odcid: str
    ok: bool                         # client: handshake done
    client_outcome: str              # handshake_done | timeout | cancelled | error
    t_start_ns: int
    t_end_ns: int
    mode: str                        # the session's effective mode
    c2s: int = 0                     # datagrams the client sent (relay records)
    s2c: int = 0                     # datagrams the server sent (relay records = captured)
    vn: int = 0                      # of those, Version Negotiation packets
    hello_dgrams: list = field(default_factory=list)        # client dgram_n carrying a ClientHello
    hello_drops_before: list = field(default_factory=list)  # of those, dropped by the relay (before capture)
    after_capture: str | None = None                         # server-namespace drop: first | all
    sh_dgrams: list = field(default_factory=list)            # server dgram_n carrying a ServerHello
    sh_drops: list = field(default_factory=list)             # of those, dropped by the relay
    initial_loss: bool | None = None                         # None: not observable at the server
    server_initial_loss: bool = False
    handshake: str = ""
    outcome: str = ""
    tcp_key: tuple | None = None     # the session's first TCP connection
    why: str = ""


@dataclass
class TcpConn:
    session: int
    key: tuple
    t_start_ns: int
    ok: bool
    tls_sent: bool                   # TCP established, so the ClientHello (SNI) went out
    cached_broken: bool


@dataclass
class Session:
    index: int
    mode: str
    effective: str
    transport: str | None
    ok: bool
    quic_first: bool
    ended_on_tcp: bool


@dataclass
class QuicTruth:
    name: str
    attempts: list
    tcp: list
    sessions: list
    t0_ns: int
    clean: bool
    warnings: list = field(default_factory=list)

    def share(self) -> tuple[int, int]:
        """(QUIC-first sessions that ended on TCP, QUIC-first sessions)."""
        qf = [s for s in self.sessions if s.quic_first]
        return sum(s.ended_on_tcp for s in qf), len(qf)


def _qlog_datagrams(trace: dict) -> list[dict]:
    """An aioquic trace's sent datagrams in order: {t_ns, len, hello}. Each flush logs its packets,
    then its datagrams; the flush's first datagram starts with its first packet."""
    out, pending = [], []
    for e in trace.get("events", []):
        if e["name"] == "transport:packet_sent":
            pending.append(e["data"])
        elif e["name"] == "transport:datagrams_sent":
            for raw in e["data"].get("raw", []):
                hello = any(p["header"]["packet_type"] == "initial"
                            and any(f.get("frame_type") == "crypto" and f.get("offset") == 0
                                    for f in p.get("frames", []))
                            for p in pending)
                out.append({"t_ns": int(e["time"] * 1e6), "len": raw.get("payload_length"), "hello": hello})
                pending = []
    return out


def _load_qlog(path: Path | None) -> list:
    if path is None or not Path(path).exists():
        return []
    return json.loads(Path(path).read_text()).get("traces", [])


def derive(res: ScenarioResult) -> QuicTruth:
    recs = res.emulator_records()
    client = res.client_records()
    warnings: list = []
    t0 = next((r["ts_ns"] for r in recs if r.get("action") == "traffic_start"), 0)
    sc = res.params

    # relay datagram records per 4-tuple (client ip, port, server ip, port) and direction
    dgrams: dict = collections.defaultdict(lambda: {"c2s": {}, "s2c": {}})
    for r in recs:
        if r.get("proto") != "udp" or r.get("action") not in ("forward", "drop"):
            continue
        k = ((r["src"], r["sport"], r["dst"], r["dport"]) if r["dir"] == "c2s"
             else (r["dst"], r["dport"], r["src"], r["sport"]))
        dgrams[k][r["dir"]][r["dgram_n"]] = r
    after: dict = {}
    for r in recs:
        if r.get("action") == "kernel_stats" and r.get("udp_drop"):
            for ip, port in r.get("dropped", []):
                after[(ip, port)] = r["udp_drop"]["mode"]

    cq = {tuple(t["title"].split()[-1].rsplit(":", 1)): t for t in _load_qlog(res.files.get("client_qlog"))
          if t.get("title")}
    sq = {t["common_fields"]["ODCID"]: t for t in _load_qlog(res.files.get("server_qlog"))}

    sessions = {r["session"]: r for r in client if r["kind"] == "session"}
    tcp_by_session: dict = collections.defaultdict(list)
    tcp: list = []
    for r in client:
        if r["kind"] == "connect":
            key = (r["src"], r["sport"], r["dst"], r["dport"])
            s = sessions.get(r["session"], {})
            c = TcpConn(r["session"], key, r["t_start_ns"], bool(r.get("ok")), "t_tcp_ns" in r,
                        s.get("effective") == "cached_broken")
            tcp.append(c)
            tcp_by_session[r["session"]].append(c)

    attempts: list = []
    for r in client:
        if r["kind"] != "quic_attempt":
            continue
        key = (r["src"], r["sport"], r["dst"], r["dport"])
        s = sessions.get(r["session"], {})
        a = Attempt(r["session"], key, r["odcid"], bool(r.get("ok")), r.get("outcome", "?"), r["t_start_ns"],
                    r["t_end_ns"], s.get("effective", "?"))
        d = dgrams.get(key, {"c2s": {}, "s2c": {}})
        a.c2s, a.s2c = len(d["c2s"]), len(d["s2c"])
        a.after_capture = after.get((key[0], key[1]))
        vn = [n for n, rr in d["s2c"].items() if rr.get("quic") == "vn"]
        a.vn = len(vn)
        # Hello datagrams: the endpoint's qlog order = relay dgram_n. A Version Negotiation is sent
        # by aioquic's server socket, not by a connection: no qlog event, so skipped on that side.
        seq = {"c2s": [d["c2s"][n] for n in sorted(d["c2s"])],
               "s2c": [d["s2c"][n] for n in sorted(d["s2c"]) if n not in vn]}
        for side, trace, hello, drops in (("c2s", cq.get((key[0], str(key[1]))), a.hello_dgrams, a.hello_drops_before),
                                          ("s2c", sq.get(a.odcid), a.sh_dgrams, a.sh_drops)):
            if trace is None:
                if side == "c2s" or seq["s2c"]:
                    warnings.append(f"session {a.session} port {key[1]}: no {'client' if side == 'c2s' else 'server'} "
                                    f"qlog trace")
                continue
            ql = _qlog_datagrams(trace)
            for n, q in enumerate(ql, 1):
                rr = seq[side][n - 1] if n <= len(seq[side]) else None
                if rr is None:
                    if side == "c2s":
                        warnings.append(f"port {key[1]}: client datagram {n} not in the relay log")
                    continue
                if rr["len"] != q["len"]:
                    warnings.append(f"port {key[1]} {side} datagram {n}: qlog {q['len']} B, relay {rr['len']} B")
                if q["hello"]:
                    hello.append(rr["dgram_n"])
                    if rr["action"] == "drop":
                        drops.append(rr["dgram_n"])

        answered = a.s2c > 0
        if a.after_capture and answered:
            a.initial_loss = True
            a.why = (f"first datagram dropped in the server namespace after the capture; server answered "
                     f"(ClientHello datagrams {a.hello_dgrams})")
        elif a.hello_drops_before:
            a.initial_loss = None
            a.why = f"ClientHello datagram(s) {a.hello_drops_before} dropped by the relay, before the capture point"
        else:
            a.initial_loss = False
            a.why = ("UDP blocked: no answer" if not answered else "no ClientHello lost")
        a.server_initial_loss = bool(a.sh_drops)
        if a.ok:
            a.handshake = "complete"
        elif not answered:
            a.handshake = "no_server_reply"
        elif len(vn) == a.s2c:
            a.handshake = "version_negotiation_failed"
        else:
            a.handshake = "no_client_handshake"
        conns = sorted(tcp_by_session.get(a.session, []), key=lambda c: c.t_start_ns)
        if conns:
            a.tcp_key = conns[0].key
            if conns[0].t_start_ns < a.t_end_ns:
                a.outcome = "race"
            else:
                a.outcome = "tcp_after_quic" if a.ok else "fallback"
        else:
            a.outcome = "quic_ok" if a.ok else "quic_failed"
        attempts.append(a)

    sess = []
    for i, s in sorted(sessions.items()):
        quic_first = s["effective"] in ("quic_first", "race", "quic_only")
        sess.append(Session(i, s["mode"], s["effective"], s.get("transport"), bool(s.get("ok")), quic_first,
                            s.get("transport") == "tcp"))
    clean = not (sc.get("rules") or sc.get("loss") or sc.get("police") or sc.get("bottleneck") or sc.get("kernel")
                 or sc.get("workload", {}).get("server_options")
                 or any(s.get("quic_versions") for s in sc.get("workload", {}).get("sessions", [])))
    return QuicTruth(res.name, attempts, tcp, sess, t0, clean, warnings)


# ---- tailscope's side --------------------------------------------------------------------

@dataclass
class QuicOutputs:
    flows: list
    packets: list
    view: list                   # quic_fallback rows + q_key / t_key (flow 4-tuples)


def _fk(f: dict) -> tuple:
    return (f["client_ip"], f["client_port"], f["server_ip"], f["server_port"])


def analyze(res: ScenarioResult, work_dir: Path) -> QuicOutputs:
    import duckdb

    from tailscope.jobs.analytics.db import build
    from tailscope.jobs.run.local import AnalyzeOptions
    from tailscope.jobs.run.local import analyze as ts_analyze

    out = Path(work_dir) / f"ts-{res.name}"
    if out.exists():
        import shutil
        shutil.rmtree(out)
    ts_analyze([str(res.pcap)], out, AnalyzeOptions(progress=False))
    flows, packets = _read(out, "flows"), _read(out, "packets")
    db = build(out)
    con = duckdb.connect(str(db))
    try:
        by_id = {f["flow_id"]: _fk(f) for f in flows}

        def rows(view: str) -> list:
            rel = con.sql(f"SELECT * FROM {view}")
            cols = [f'epoch_ns("{c}") AS "{c}"' if str(t).startswith("TIMESTAMP") else f'"{c}"'
                    for c, t in zip(rel.columns, rel.types)]
            rel = con.sql(f"SELECT {', '.join(cols)} FROM {view}")
            out_rows = []
            for r in rel.fetchall():
                d = dict(zip(rel.columns, r))
                d["q_key"], d["t_key"] = by_id.get(d.get("quic_flow_id")), by_id.get(d.get("tcp_flow_id"))
                out_rows.append(d)
            return out_rows
        view = rows("quic_fallback")
    finally:
        con.close()
    return QuicOutputs(flows, packets, view)


# ---- scoring -----------------------------------------------------------------------------

@dataclass
class QuicEvaluation:
    rows: list
    truths: dict
    outputs: dict
    warnings: list
    shares: dict                     # scenario -> {truth: (n, d), view: (n, d)}
    confusion: dict                  # "handshake" | "outcome" -> Counter
    results: dict = field(default_factory=dict)
    table: str = ""
    table_path: Path | None = None

    def row(self, signature: str) -> Row:
        return next(r for r in self.rows if r.signature == signature)

    def share_total(self, which: str) -> tuple[int, int]:
        n = sum(s[which][0] for s in self.shares.values())
        d = sum(s[which][1] for s in self.shares.values())
        return n, d


def _ms(t: int | None, t0: int) -> str:
    return "-" if t is None else f"t+{(t - t0) / 1e6:.0f}ms"


def _flow_desc(f: dict | None, packets: list, t0: int) -> str:
    if f is None:
        return "tailscope: no QUIC flow"
    tagged = [f"frame {p['frame']} {_ms(p['ts'], t0)} {p['direction']} {list(p.get('tag_names') or [])}"
              for p in packets if p["flow_id"] == f["flow_id"] and p.get("tag_names")][:4]
    d = f.get("quic_initial_loss_delay_ns")
    return (f"tailscope: {f.get('quic_handshake')} c2s/s2c pkts {f.get('c2s_packets')}/{f.get('s2c_packets')} "
            f"initial_retx {f.get('quic_initial_retx')} server_initial_retx {f.get('quic_server_initial_retx')} "
            f"initial_loss_delay {'-' if d is None else f'{d / 1e6:.0f}ms'} signatures {list(f.get('signatures') or [])}"
            + (f"; {', '.join(tagged)}" if tagged else ""))


def _view_share(rows: list) -> tuple[int, int]:
    """docs/signatures.md: QUIC attempts whose session ended on TCP (ended_on_tcp) / QUIC attempts."""
    att = [r for r in rows if r.get("quic_flow_id") is not None]
    return sum(1 for r in att if r["ended_on_tcp"]), len(att)


def evaluate(results: dict, work_dir: Path, outputs: dict | None = None) -> QuicEvaluation:
    work_dir = Path(work_dir)
    warnings: list = []
    ok = {n: r for n, r in results.items() if isinstance(r, ScenarioResult)}
    for n, r in results.items():
        if not isinstance(r, ScenarioResult):
            warnings.append(f"{n}: did not run: {r!r}")
    outs: dict = dict(outputs or {})
    todo = [n for n in ok if n not in outs]
    with ThreadPoolExecutor(max_workers=2) as ex:
        for n, o in zip(todo, ex.map(lambda n: analyze(ok[n], work_dir), todo)):
            outs[n] = o
    truths = {n: derive(r) for n, r in ok.items()}
    for n, t in truths.items():
        warnings += [f"{n}: {w}" for w in t.warnings]

    il = Row("quic_initial_loss", "attempt", TARGET,
             note="a ClientHello lost after the capture point and answered later; attempts that never got an "
                  "answer are negatives (schema: loss delay 0 when none answered)")
    il_ans = Row("quic_initial_loss (answered attempts only)", "attempt", None,
                 note="the same, scored only over attempts the server answered")
    il_unobs = Row("quic_initial_loss (ClientHello dropped before the capture point)", "attempt", None,
                   kind="unobservable", note="the server only sees the retransmitted ClientHello")
    sil = Row("quic_server_initial_loss", "attempt", None, note="relay dropped a datagram with the ServerHello")
    hs = {c: Row(f"handshake={c}", "attempt", TARGET if c != "complete" else None) for c in HANDSHAKE_CLASSES}
    oc = {c: Row(f"outcome={c}", "attempt", OUTCOME_TARGET.get(c)) for c in OUTCOMES}
    cb = Row("outcome=cached_broken", "tcp conn", TARGET,
             note="TCP the client opened without trying QUIC, after a failed attempt (session cached_broken)")
    clean = Row("no QUIC signature in quic_clean", "flow", None, kind="clean")
    confusion = {k: collections.Counter() for k in ("handshake", "outcome")}
    shares: dict = {}

    for n in ok:
        t, o = truths[n], outs[n]
        t0 = t.t0_ns
        qflows = {_fk(f): f for f in o.flows if f.get("protocol") == "quic"}
        vq = {r["q_key"]: r for r in o.view if r.get("q_key")}
        seen = set()
        for a in t.attempts:
            f = qflows.get(a.key)
            seen.add(a.key)
            if f is None:
                warnings.append(f"{n}: tailscope has no QUIC flow for session {a.session} port {a.key[1]}")
            elif f.get("quic_ocid") and f["quic_ocid"] != a.odcid:
                warnings.append(f"{n}: port {a.key[1]}: quic_ocid {f['quic_ocid']} != client's {a.odcid}")
            sigs = set((f or {}).get("signatures") or [])
            desc = (f"session {a.session} ({a.mode}) port {a.key[1]} {_ms(a.t_start_ns, t0)}: client {a.client_outcome}, "
                    f"c2s/s2c datagrams {a.c2s}/{a.s2c}; {_flow_desc(f, o.packets, t0)}")
            pred_il = "quic_initial_loss" in sigs
            if a.initial_loss is None:
                il_unobs.add(n, True, pred_il, f"{desc}; truth: {a.why}")
            else:
                il.add(n, a.initial_loss, pred_il, f"{desc}; truth: {a.why}")
                if a.s2c:
                    il_ans.add(n, a.initial_loss, pred_il, f"{desc}; truth: {a.why}")
            sil.add(n, a.server_initial_loss, "quic_server_initial_loss" in sigs,
                    f"{desc}; truth: ServerHello datagrams {a.sh_dgrams}, relay dropped {a.sh_drops}"
                    + (" (re-sent without a loss: spurious)" if len(a.sh_dgrams) > 1 and not a.sh_drops else ""))
            pred_hs = (f or {}).get("quic_handshake") or "-"
            confusion["handshake"][(a.handshake, pred_hs)] += 1
            for c, row in hs.items():
                row.add(n, a.handshake == c, pred_hs == c, f"{desc}; truth: {a.handshake}")
            v = vq.get(a.key)
            pred = (v or {}).get("outcome", "-")
            confusion["outcome"][(a.outcome, pred)] += 1
            vdesc = (f"view: {pred}, paired TCP "
                     + (f"port {v['t_key'][1]} at {_ms(v.get('tcp_start'), t0)}" if v and v.get("t_key") else "none")
                     + f"; truth: {a.outcome}, session's TCP "
                     + (f"port {a.tcp_key[1]}" if a.tcp_key else "none"))
            for c, row in oc.items():
                row.add(n, a.outcome == c, pred == c, f"session {a.session} ({a.mode}) QUIC port {a.key[1]} "
                        f"{_ms(a.t_start_ns, t0)} (handshake {a.handshake}, client gave up/finished at "
                        f"{_ms(a.t_end_ns, t0)}); {vdesc}")
        for k, f in qflows.items():
            if k not in seen:
                warnings.append(f"{n}: tailscope QUIC flow port {k[1]} is no client attempt")
        # cached_broken, per TCP connection
        flagged = {r["t_key"]: r for r in o.view if r["outcome"] == "cached_broken" and r.get("t_key")}
        for c in t.tcp:
            cb.add(n, c.cached_broken, c.key in flagged,
                   f"session {c.session} TCP port {c.key[1]} {_ms(c.t_start_ns, t0)} "
                   f"({'ClientHello sent' if c.tls_sent else 'cancelled before TLS: no SNI'}); "
                   f"view {'cached_broken' if c.key in flagged else 'not cached_broken'}")
        shares[n] = {"truth": t.share(), "view": _view_share(o.view)}
        if t.clean:
            flow_ids = {f["flow_id"]: _fk(f) for f in o.flows}
            # A clean path still sees an Initial re-sent when a probe timeout fires before the
            # answer (a busy machine: CI's quic_clean, port 44177, frame 4): the endpoints' qlogs
            # log the hello twice, so that tag is true. Anything beyond their count is not.
            resent = {a.key: max(len(a.hello_dgrams) - 1, 0) + max(len(a.sh_dgrams) - 1, 0) for a in t.attempts}
            tags = collections.defaultdict(list)
            for p in o.packets:
                names = list(p.get("tag_names") or [])
                k = flow_ids.get(p["flow_id"])
                if names == ["quic_initial_retransmission"] and resent.get(k, 0) > 0:
                    resent[k] -= 1
                elif names:
                    tags[k].append(f"frame {p['frame']} {names}")
            for f in o.flows:
                bad = [f"signature {s}" for s in (f.get("signatures") or [])] + tags.get(_fk(f), [])
                clean.pos_scenarios.add(n)
                if bad:
                    clean.fp += 1
                    clean.fp_scenarios.add(n)
                    clean.details.append(f"FP {n}: {f.get('protocol')} port {f['client_port']}: " + "; ".join(bad[:6]))
                else:
                    clean.tp += 1

    rows = [il, il_ans, il_unobs, sil, *hs.values(), *oc.values(), cb, clean]
    return QuicEvaluation(rows, truths, outs, warnings, shares, confusion, dict(results))


def format_table(ev: QuicEvaluation, details: int = 8) -> str:
    from .evaluate import Evaluation
    from .evaluate import format_table as _tcp_table

    text = _tcp_table(Evaluation(ev.rows, ev.truths, ev.outputs, [], {}), details=0)
    out = [text, ""]
    for k, c in ev.confusion.items():
        if c:
            out.append(f"* {k} confusion (truth -> tailscope: count): "
                       + ", ".join(f"{a}->{b}: {v}" for (a, b), v in sorted(c.items())))
    out.append("")
    out.append("QUIC-first sessions that ended on TCP (truth | docs/signatures.md's share over quic_fallback):")
    for n, s in ev.shares.items():
        out.append(f"   {n:22s} " + "  ".join(f"{w} {s[w][0]}/{s[w][1]}" for w in ("truth", "view")))
    tot = {w: ev.share_total(w) for w in ("truth", "view")}
    out.append(f"   {'all':22s} " + "  ".join(f"{w} {tot[w][0]}/{tot[w][1]} = "
                                               f"{_fmt(tot[w][0] / tot[w][1] if tot[w][1] else None)}"
                                               for w in tot))
    if details:
        out.append("")
        for r in ev.rows:
            if r.details:
                more = f" (first {details})" if len(r.details) > details else ""
                out.append(f"## {r.signature}: {len(r.details)} FP/FN{more}")
                out += ["   " + d for d in r.details[:details]]
    if ev.warnings:
        out += ["", "truth warnings:"] + ["   " + w for w in ev.warnings[:40]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.quic_eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="quic-eval", help="output directory")
    ap.add_argument("--reuse", help="score the finished runs in this directory instead of running")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="scenario names (default: all QUIC scenarios)")
    ap.add_argument("--details", type=int, default=8, help="FP/FN evidence lines per row")
    a = ap.parse_args(argv)
    scs = [s for s in QUIC_EVAL_SCENARIOS if not a.only or s.name in a.only]
    if a.reuse:
        out = Path(a.reuse)
        results = load_finished(out, scs)
    else:
        out = Path(a.out)
        results = run_scenarios(scs, out, max_parallel=a.parallel, return_exceptions=True)
    ev = evaluate(results, out)
    print(format_table(ev, a.details))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Named lab scenarios, as data.

A Scenario says what traffic the client generates (workload), what the path
does to it (delay, rules, loss model, policer, bottleneck) and which Linux TCP
settings the hosts use. `intends` names the DESIGN.md §4 signatures the
scenario is built to produce - a hint for test authors; the ground truth is
always the emulator log of the actual run.

Workload sizes are whole protocol messages in bytes (16-byte header included):
a response of 15000 is 15000 bytes of server payload.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


def conn(*requests, start_s: float = 0.0) -> dict:
    """One client connection: requests are (req_bytes, resp_bytes[, think_s])."""
    return {"start_s": start_s,
            "requests": [{"req": r[0], "resp": r[1], "think_s": r[2] if len(r) > 2 else 0.0} for r in requests]}


def workload(*connections, parallel: bool = False) -> dict:
    return {"connections": list(connections), "parallel": parallel}


def sessions(*groups, gap_s: float = 0.3, handshake_timeout_s: float = 1.0, race_delay_s: float = 0.1,
             cache_broken: bool = False, server: dict | None = None) -> dict:
    """QUIC-app workload (quic_apps.py): groups are (count, mode[, resp_bytes[, quic_versions]])
    run one after the other; sessions are sequential, `gap_s` apart. resp_bytes may instead be a
    list of requests (req_bytes, resp_bytes[, think_s]) sent one after the other on the session's
    connection (quic_apps.py `requests`). quic_versions: the versions
    the client offers (names in quic_apps.VERSIONS). server: server options, {"quic_versions":
    [...]} (the versions it accepts) or {"quic": False} (no UDP listener: ICMP port unreachable)."""
    out = []
    for g in groups:
        n, mode = g[0], g[1]
        sess = {"mode": mode, "resp": g[2] if len(g) > 2 else 20000, "req": 300}
        if isinstance(sess["resp"], (list, tuple)):
            sess["requests"] = [{"req": r[0], "resp": r[1], "think_s": r[2] if len(r) > 2 else 0.0}
                                for r in sess.pop("resp")]
        if len(g) > 3:
            sess["quic_versions"] = list(g[3])
        out += [dict(sess) for _ in range(n)]
    w = {"sessions": out, "gap_s": gap_s, "handshake_timeout_s": handshake_timeout_s,
         "race_delay_s": race_delay_s, "cache_broken": cache_broken}
    if server:
        w["server_options"] = dict(server)
    return w


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    workload: dict
    intends: tuple = ()
    delay_ms: float = 20.0            # one-way, each direction (RTT = 2 x delay_ms + ~0.3 ms)
    jitter_ms: float = 0.0            # Gaussian sd per direction; never reorders (models.Delay)
    rules: tuple = ()                 # relay drop/reorder rules (README: Drop rules)
    loss: dict | None = None          # relay loss model: bernoulli {p} | gilbert {p, r, h, k}; dir
    police: dict | None = None        # relay token bucket {dir, rate_kbit, burst_bytes}
    bottleneck: dict | None = None    # {dir, rate_kbit, queue_bytes}: tbf if available, else relay
    bottleneck_backend: str = "auto"  # auto | tbf | relay
    kernel: dict | None = None        # nftables impairments {loss: {pct, dir}, police: {...}} in the router;
                                      # server_syn_drop {every}, server_udp_drop {every, mode} in the
                                      # server, after the capture point
    sysctls: dict = field(default_factory=dict)   # {"client"|"server"|"router": {key: value}}
    cc: str = "cubic"                 # congestion control of client and server sockets
    family: int = 4
    seed: int = 1
    port: int = 8443
    snaplen: int = 0                  # 0 = whole packets
    ts_precision: str = "micro"       # pcap timestamps: micro | nano
    linger_s: float = 0.4             # after the client exits, so FIN/ACKs are captured
    deadline_s: float = 20.0          # client gives up after this
    app: str = "tcp"                  # tcp: apps.py (workload: connections) | quic: quic_apps.py (sessions)
    vantage: str = "server"           # where tcpdump captures: the server's eth0 | the client's eth0
    offloads: str = ""                # "server": TSO/GSO (and tx checksum) on at the server's eth0, so a
                                      # server-side capture holds super-segments; "" = all offloads off
    axes: tuple = ()                  # draws.py: the stack/capture axes this draw has (a label)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **kw) -> "Scenario":
        return dataclasses.replace(self, **kw)


# Linux without TLP: a lost tail waits for the RTO, as in Flach et al.'s
# pre-TLP measurements. tcp_early_retrans=0 disables TLP (RFC 8985 probe).
NO_TLP = {"server": {"net.ipv4.tcp_early_retrans": "0"}}

_SCENARIOS = [
    Scenario(
        "clean", "No impairment, 40 ms RTT: two sequential connections, three requests each.",
        workload(conn((200, 30000), (200, 5000, 0.05), (300, 60000, 0.05)),
                 conn((200, 30000), (200, 5000, 0.05), (300, 60000, 0.05))),
        intends=()),
    Scenario(
        "clean_ipv6", "As clean, over IPv6 (ULA fd00:7473:1::/64 <-> fd00:7473:2::/64).",
        workload(conn((200, 20000), (200, 5000, 0.05))), family=6),
    Scenario(
        "syn_loss", "First SYN of connection 0 dropped: the client retransmits it after the 1 s "
                    "initial RTO. Connection 1 is clean for contrast.",
        workload(conn((200, 10000), (200, 10000)), conn((200, 10000))),
        intends=("syn_loss",),
        rules=({"kind": "syn", "conn": 0, "nth": [1]},)),
    Scenario(
        "syn_loss_at_server", "First SYN of every 2nd connection dropped inside the server namespace "
                              "(nftables input hook), i.e. after the capture point, as a full SYN backlog "
                              "would: the capture shows the SYN and, ~1 s later, its retransmission. (The "
                              "relay's syn rule drops it before the capture: invisible at the server.)",
        workload(*[conn((200, 10000), start_s=0.02 * i) for i in range(6)], parallel=True),
        intends=("syn_loss",),
        kernel={"server_syn_drop": {"every": 2}}),
    Scenario(
        "synack_loss", "First SYN-ACK of connection 0 dropped: the server sees the SYN again (client "
                       "retransmission) and/or re-sends its SYN-ACK after ~1 s.",
        workload(conn((200, 10000), (200, 10000)), conn((200, 10000))),
        intends=("synack_loss",),
        rules=({"kind": "synack", "conn": 0, "nth": [1]},)),
    Scenario(
        "tail_loss", "Last segment of responses 1 and 3 dropped (15 kB responses): recovered by the "
                     "tail loss probe ~2 SRTT later.",
        workload(conn(*[(200, 15000, 0.1)] * 5)),
        intends=("tail_loss", "retransmission:tlp"),
        rules=({"kind": "tail", "conn": 0, "msg": [1, 3], "count": 1},)),
    Scenario(
        "tail_loss_rto", "Tail of response 1 dropped twice (original and first retransmission) with TLP "
                         "disabled on the server: recovered by RTO, then a doubled RTO.",
        workload(conn(*[(200, 15000, 0.1)] * 3)),
        intends=("tail_loss", "retransmission:rto"),
        rules=({"kind": "tail", "conn": 0, "msg": [1], "count": 1, "transmissions": 2},),
        sysctls=NO_TLP),
    Scenario(
        "midburst_loss", "Segment 5 of 60 kB responses 1 and 2 dropped: later segments draw dupACKs/SACKs "
                         "and fast retransmit repairs it within about one RTT.",
        workload(conn((200, 60000), (200, 60000, 0.1), (200, 60000, 0.1))),
        intends=("retransmission:fast_retransmit",),
        rules=({"kind": "segment", "conn": 0, "msg": [1, 2], "index": [5]},)),
    Scenario(
        "request_loss", "Segment 3 of a 30 kB upload (client->server) dropped: the server-side capture "
                        "sees a hole in the client's stream, filled by the client's fast retransmit.",
        workload(conn((30000, 2000), (30000, 2000, 0.1))),
        intends=("lost_segment_at_vantage", "retransmission:fast_retransmit"),
        rules=({"kind": "segment", "dir": "c2s", "conn": 0, "msg": [0], "index": [3]},)),
    Scenario(
        "random_loss_3pct", "3% independent loss in both directions (seeded), two parallel connections.",
        workload(conn(*[(300, 40000, 0.05)] * 4), conn(*[(300, 40000, 0.05)] * 4), parallel=True),
        intends=("retransmission", "lost_segment_at_vantage"),
        loss={"model": "bernoulli", "p": 0.03, "dir": "both"}, seed=3),
    Scenario(
        "bursty_loss", "Gilbert-Elliott loss server->client: p=2%, r=35% (mean burst ~3 packets), "
                       "80% loss in the bad state.",
        workload(conn(*[(300, 40000, 0.05)] * 4), conn(*[(300, 40000, 0.05)] * 4), parallel=True),
        intends=("retransmission",),
        loss={"model": "gilbert", "p": 0.02, "r": 0.35, "h": 0.8, "k": 0.0, "dir": "s2c"}, seed=5),
    Scenario(
        "reordering", "No loss. Every 12th server data segment is held back by 2 packets; every 3rd client "
                      "data segment is held 5 ms (visible at the server as a hole filled quickly).",
        workload(conn(*[(8000, 40000, 0.05)] * 4)),
        intends=("out_of_order",),
        rules=({"kind": "reorder", "dir": "s2c", "every": 12, "by_packets": 2},
               {"kind": "reorder", "dir": "c2s", "every": 3, "by_ms": 5})),
    Scenario(
        "policing", "Token-bucket policer server->client, 3 Mbit/s with a 24 kB bucket: slow start "
                    "overruns it and the excess is dropped (not queued).",
        workload(conn((200, 150000), (200, 150000, 0.1), (200, 150000, 0.1))),
        intends=("policing", "retransmission"),
        police={"dir": "s2c", "rate_kbit": 3000, "burst_bytes": 24000}),
    Scenario(
        "policing_nft", "Policer as nftables `limit rate over` in the router (kernel backend; drops are "
                        "counted, not logged per packet). nft's bucket holds one second of rate plus the "
                        "burst, so the rate is low (512 kbit/s) to make the 80 kB bucket run dry.",
        workload(conn((200, 120000), (200, 60000, 0.1))),
        intends=("policing", "retransmission"),
        kernel={"police": {"dir": "s2c", "rate_kbit": 512, "burst_bytes": 16000}}),
    Scenario(
        "bufferbloat", "4 Mbit/s bottleneck server->client with a 600 kB FIFO (1.2 s of queue): a bulk "
                       "connection queues up to ~80 kB (cubic's HyStart leaves slow start early), and a "
                       "second connection's small requests wait behind it: RTT 40 ms -> ~200 ms.",
        workload(conn((200, 300000), (200, 300000)),
                 conn(*[(200, 2000, 0.1)] * 8, start_s=0.2), parallel=True),
        intends=("bufferbloat",),
        bottleneck={"dir": "s2c", "rate_kbit": 4000, "queue_bytes": 600000}),
    Scenario(
        "bufferbloat_deep", "As bufferbloat with a Reno sender: no HyStart, so slow start keeps growing "
                            "until the 600 kB FIFO holds ~300 kB (RTT 40 ms -> ~600 ms), still without loss.",
        workload(conn((200, 300000), (200, 300000)),
                 conn(*[(200, 2000, 0.1)] * 8, start_s=0.2), parallel=True),
        intends=("bufferbloat",), cc="reno",
        bottleneck={"dir": "s2c", "rate_kbit": 4000, "queue_bytes": 600000}),
    Scenario(
        "mobile_mixed", "Mobile-like path: 350 ms RTT, 25 ms jitter each way, 1% random loss both ways, "
                        "first SYN lost on connections 1 and 3; four parallel connections.",
        workload(*[conn(*[(500, 20000, 0.2)] * 3, start_s=0.1 * i) for i in range(4)], parallel=True),
        intends=("syn_loss", "retransmission", "tail_loss"),
        delay_ms=175, jitter_ms=25,
        rules=({"kind": "syn", "conn": [1, 3], "nth": [1]},),
        loss={"model": "bernoulli", "p": 0.01, "dir": "both"}, seed=7,
        linger_s=1.2, deadline_s=40),
]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in _SCENARIOS}

# QUIC (quic_apps.py: aioquic + TLS/TCP fallback on port 443, SNI lab.tailscope.test). Kept out of
# SCENARIOS (the TCP catalogue, run by the smoke tests) because they need aioquic; `get` finds both.
# Sessions are sequential; a failed QUIC handshake costs the 1 s handshake timeout. Drops "after the
# capture point" are nftables rules in the server namespace (impair.ServerUdpDrop), so the
# server-side capture sees the dropped datagram, as for SYN loss (syn_loss_at_server).
_QUIC = [
    Scenario(
        "quic_clean", "QUIC, no impairment, 40 ms RTT: six sessions, each one handshake and one 30 kB response.",
        sessions((6, "quic_first", 30000)), app="quic", port=443),
    Scenario(
        "quic_initial_drop", "The client's first datagram (its first Initial: the ClientHello) of every 2nd QUIC "
                             "connection is dropped in the server namespace, after the capture: the capture shows "
                             "it and, one PTO (~200 ms) later, its retransmission, which the server answers. On "
                             "UDP flows 3, 7 and 11 the relay drops the first Initial instead, before the capture "
                             "point (invisible at the server, like syn_loss).",
        sessions((16, "quic_first", 20000), gap_s=0.2), app="quic", port=443,
        intends=("quic_initial_loss",),
        rules=({"kind": "datagram", "dir": "c2s", "flow": [3, 7, 11], "nth": [1]},),
        kernel={"server_udp_drop": {"every": 2, "mode": "first"}}),
    Scenario(
        "quic_loss", "2% random loss both ways (seeded) on twelve QUIC sessions with 50 kB responses, and the "
                     "first datagram of each handshake lost with probability 0.3 each way: the client's "
                     "ClientHello (before the capture point: invisible) and the server's Initial + ServerHello "
                     "(the server re-sends its first flight).",
        sessions((12, "quic_first", 50000), gap_s=0.1), app="quic", port=443,
        intends=("quic_server_initial_loss",),
        rules=({"kind": "datagram", "dir": "c2s", "nth": [1], "prob": 0.3},
               {"kind": "datagram", "dir": "s2c", "nth": [1], "prob": 0.3}),
        loss={"model": "bernoulli", "p": 0.02, "dir": "both"}, seed=11),
    Scenario(
        "quic_reordering", "No loss. Every 5th server datagram held back by 2 datagrams, every 3rd client "
                           "datagram held 5 ms: QUIC must not see Initial loss or a failed handshake.",
        sessions((6, "quic_first", 60000)), app="quic", port=443,
        rules=({"kind": "reorder", "dir": "s2c", "every": 5, "by_packets": 2, "proto": "udp"},
               {"kind": "reorder", "dir": "c2s", "every": 3, "by_ms": 5, "proto": "udp"})),
    Scenario(
        "quic_udp_blocked", "All UDP to the server dropped in its namespace (a firewall in front of it, after "
                            "the capture): the capture shows the client's Initials and no reply; after the 1 s "
                            "handshake timeout each session falls back to TLS over TCP. The last session is "
                            "QUIC-only (no fallback).",
        sessions((4, "quic_first", 20000), (1, "quic_only"), gap_s=0.5), app="quic", port=443,
        intends=("quic_no_server_reply", "fallback"),
        kernel={"server_udp_drop": {"every": 1, "mode": "all"}}),
    Scenario(
        "quic_reply_blocked", "Every datagram from the server on every 2nd QUIC connection dropped by the relay "
                              "(the server answers, the client never hears it): no client handshake, the server "
                              "re-sends its first flight, the client falls back to TCP after 1 s.",
        sessions((8, "quic_first", 20000), gap_s=0.5), app="quic", port=443,
        intends=("quic_no_client_handshake", "quic_server_initial_loss", "fallback"),
        rules=({"kind": "datagram", "dir": "s2c", "flow_every": 2},)),
    Scenario(
        "quic_udp_closed", "Nothing listens on UDP 443: the server's kernel answers each Initial with ICMP port "
                           "unreachable, the client (a connected UDP socket, as browsers use) gives up at once and "
                           "falls back to TLS over TCP within a round trip.",
        sessions((4, "quic_first", 20000), gap_s=0.5, server={"quic": False}), app="quic", port=443,
        intends=("quic_no_server_reply", "fallback")),
    Scenario(
        "quic_version_mismatch", "The server speaks QUIC v1 only. Sessions 0-2 offer v2 only: Version "
                                 "Negotiation, no common version, the client falls back to TCP at once. Sessions "
                                 "3-5 offer v2 then v1: Version Negotiation, then a v1 handshake that completes.",
        sessions((3, "quic_first", 20000, ["v2"]), (3, "quic_first", 20000, ["v2", "v1"]), gap_s=0.5,
                 server={"quic_versions": ["v1"]}), app="quic", port=443,
        intends=("quic_version_negotiation_failed", "fallback")),
    Scenario(
        "quic_race", "Browser race: TCP starts 150 ms after QUIC without waiting (RTT 200 ms, so QUIC is not "
                     "done yet); the first handshake to finish wins. UDP of every 2nd QUIC connection dropped in the "
                     "server namespace: TCP wins those; elsewhere QUIC wins (~205 ms) and the TCP is cancelled in "
                     "SYN_SENT (its SYN-ACK is due at ~350 ms), so it never sends a ClientHello.",
        sessions((6, "race", 20000), gap_s=0.5, race_delay_s=0.15), app="quic", port=443, delay_ms=100,
        intends=("race",),
        kernel={"server_udp_drop": {"every": 2, "mode": "all"}}),
    Scenario(
        "quic_cached_broken", "UDP to the server blocked (server namespace); the client remembers the failed QUIC "
                              "attempt: session 0 falls back after the 1 s timeout, sessions 1-4 go straight to TCP.",
        sessions((5, "quic_first", 20000), gap_s=0.5, cache_broken=True), app="quic", port=443,
        intends=("fallback", "cached_broken"),
        kernel={"server_udp_drop": {"every": 1, "mode": "all"}}),
    Scenario(
        "quic_mixed_fallback", "Eight sessions, UDP of every 2nd QUIC connection blocked in the server namespace: "
                               "sessions 0, 2, 4, 6 fall back to TCP after the 1 s timeout, 1, 3, 5, 7 stay on QUIC.",
        sessions((8, "quic_first", 20000), gap_s=0.5), app="quic", port=443,
        intends=("fallback",),
        kernel={"server_udp_drop": {"every": 2, "mode": "all"}}),
]
QUIC_SCENARIOS: dict[str, Scenario] = {s.name: s for s in _QUIC}

# HTTP/3-like request/response: several sequential requests of different sizes per connection, the
# same workload over QUIC and over TLS/TCP in one run (tests/lab/quic_queries_eval.py scores the
# queries tailscope infers from the encrypted packets against the client's request log). Also the
# QUIC samples (tests/lab/samples.py), captured headers only.
PAGE = ((300, 20000), (200, 5000, 0.05), (400, 60000, 0.05), (250, 2000, 0.1))


def alternating_sessions() -> dict:
    """Three QUIC-only and three TLS/TCP sessions, alternating, each the page's four requests."""
    return sessions(*[(1, m, PAGE) for m in ("quic_only", "tcp") * 3], gap_s=0.2, handshake_timeout_s=3.0)


_QUIC_QUERIES = [
    Scenario(
        "quic_queries_clean", "No impairment, 40 ms RTT: sessions alternate QUIC (quic_first) and TLS over TCP, "
                              "four sequential requests each (20 kB, 5 kB, 60 kB, 2 kB responses).",
        sessions((1, "quic_first", PAGE), (1, "tcp", PAGE), (1, "quic_first", PAGE), (1, "tcp", PAGE),
                 (1, "quic_first", PAGE), (1, "tcp", PAGE), gap_s=0.2), app="quic", port=443),
    Scenario(
        "quic_queries_loss", "3% random loss server to client (seeded), 40 ms RTT: sessions alternate QUIC and "
                             "TLS over TCP, four sequential requests each; losses of response tails stall a "
                             "response until the sender's probe timeout. (Client to server losses happen before "
                             "a server-side capture: a lost request's wait is invisible there, as a lost SYN's.)",
        alternating_sessions(),
        app="quic", port=443, loss={"model": "bernoulli", "p": 0.03, "dir": "s2c"}, seed=13, deadline_s=40.0),
    Scenario(
        "quic_queries_queue", "4 Mbit/s bottleneck server->client with a 100 kB FIFO (200 ms of queue), 40 ms "
                              "RTT: responses queue behind each other; sessions alternate QUIC and TLS over TCP.",
        alternating_sessions(),
        app="quic", port=443, bottleneck={"dir": "s2c", "rate_kbit": 4000, "queue_bytes": 100000},
        deadline_s=40.0),
    Scenario(
        "quic_queries_policing", "Token-bucket policer server->client, 4 Mbit/s with a 32 kB bucket, 40 ms RTT: "
                                 "a response beyond the bucket loses its excess at once and is repaired at the "
                                 "policed rate; sessions alternate QUIC and TLS over TCP.",
        alternating_sessions(),
        app="quic", port=443, police={"dir": "s2c", "rate_kbit": 4000, "burst_bytes": 32000},
        deadline_s=40.0),
    Scenario(
        "quic_queries_reordering", "No loss. Every 5th server datagram / TCP segment held back by 2 packets, every "
                                   "3rd client one held 5 ms; sessions alternate QUIC and TLS over TCP.",
        alternating_sessions(),
        app="quic", port=443,
        rules=({"kind": "reorder", "dir": "s2c", "every": 5, "by_packets": 2},
               {"kind": "reorder", "dir": "c2s", "every": 3, "by_ms": 5})),
    Scenario(
        "quic_fallback", "UDP of every 2nd QUIC connection blocked in the server namespace (after the capture): "
                         "those sessions fall back to TLS over TCP after the 1 s handshake timeout, the others "
                         "stay on QUIC; three requests per session.",
        sessions((4, "quic_first", PAGE[:3]), gap_s=0.3), app="quic", port=443,
        intends=("fallback",),
        kernel={"server_udp_drop": {"every": 2, "mode": "all"}}),
]
QUIC_QUERY_SCENARIOS: dict[str, Scenario] = {s.name: s for s in _QUIC_QUERIES}

# QUIC with a key log (tests/lab/quic_keylog_eval.py): every QUIC run writes the client's
# SSLKEYLOGFILE and both endpoints' qlogs; these put the loss and reordering on 1-RTT data, with
# responses large enough for several packets in flight, and a handshake timeout long enough that
# a lost handshake packet does not end the attempt.
_QUIC_KEYLOG = [
    Scenario(
        "quic_keylog_loss", "3% random loss both ways (seeded) on eight QUIC sessions with 300 kB responses, "
                            "40 ms RTT: the server's and the client's 1-RTT packets are lost after and before "
                            "the capture point; recovery by packet threshold, time threshold and PTO.",
        sessions((8, "quic_only", 300000), gap_s=0.1, handshake_timeout_s=3.0), app="quic", port=443,
        intends=("quic_packet_lost", "retransmission"),
        loss={"model": "bernoulli", "p": 0.03, "dir": "both"}, seed=5, deadline_s=40.0),
    Scenario(
        "quic_keylog_tail", "Gilbert-Elliott bursts (p 5%, r 50%) server to client on twenty sessions with 6 kB "
                            "responses (five packets): a burst that takes a response's last packets leaves nothing "
                            "after them to trigger the threshold rules, so the server's probe timeout recovers them.",
        sessions((20, "quic_only", 6000), gap_s=0.05, handshake_timeout_s=3.0), app="quic", port=443,
        intends=("quic_packet_lost", "pto"),
        loss={"model": "gilbert", "p": 0.05, "r": 0.5, "h": 1.0, "k": 0.0, "dir": "s2c"}, seed=7, deadline_s=40.0),
    Scenario(
        "quic_keylog_reordering", "No loss. Every 7th client datagram held back by 2 datagrams (reordered before "
                                  "the capture point) and every 5th server datagram held 5 ms, on six sessions "
                                  "with 200 kB responses (the client sends an ACK every other packet).",
        sessions((6, "quic_only", 200000), gap_s=0.1, handshake_timeout_s=3.0), app="quic", port=443,
        intends=("out_of_order",),
        rules=({"kind": "reorder", "dir": "c2s", "every": 7, "by_packets": 2, "proto": "udp"},
               {"kind": "reorder", "dir": "s2c", "every": 5, "by_ms": 5, "proto": "udp"})),
]
QUIC_KEYLOG_SCENARIOS: dict[str, Scenario] = {s.name: s for s in _QUIC_KEYLOG}


def get(name: str, **overrides) -> Scenario:
    sc = (SCENARIOS.get(name) or QUIC_SCENARIOS.get(name) or QUIC_KEYLOG_SCENARIOS.get(name)
          or QUIC_QUERY_SCENARIOS.get(name))
    if sc is None:
        raise KeyError(f"unknown scenario {name!r}; known: "
                       f"{', '.join([*SCENARIOS, *QUIC_SCENARIOS, *QUIC_KEYLOG_SCENARIOS, *QUIC_QUERY_SCENARIOS])}")
    return sc.replace(**overrides) if overrides else sc

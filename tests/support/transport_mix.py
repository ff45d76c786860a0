"""A small dataset with QUIC and TCP side by side, for the QUIC-vs-TCP marts (tests/test_quic_vs_tcp.py),
built without root or the lab and deterministic:

- QUIC: real aioquic endpoints in simulated time (tests/support/quicsim.py), with the clients' key
  log, so the core finds their queries (one per request stream; docs/signatures.md#quic-with-a-key-log).
  Some connections lose server datagrams (recovered by QUIC's loss detection).
- TCP: synthetic keep-alive connections whose server think time is drawn from a seeded
  log-normal, so the two transports' latency distributions differ.
- A fallback: a client whose QUIC attempt gets no answer through (every server datagram lost
  after the capture) and who connects over TCP to the same server a second later.
- Enrichment: two carriers (by client prefix), three hexagons and three network types (one
  session record per client).

    info = build(tmp / "mix")                 # pcaps, keys.log, prefixes.csv, sessions.csv
    ds = analyze(info, tmp / "ds")            # the dataset
"""
from __future__ import annotations

import random
from pathlib import Path

from tests.support import quicsim
from tests.support.pcapgen import ipv4, tcp, write_pcap

DAY0_NS = 1_795_392_000 * 10**9            # 2026-11-23 (Monday of 2026-W48), 00:00 UTC
WEEK = "2026-W48"
SERVER = quicsim.SERVER[0]
CARRIERS = {"Northwind Mobile": "198.18.1.0/25", "Contoso Telecom": "198.18.1.128/25"}
CELLS = {  # lat, lng inside three res-7 cells
    "a": (52.370, 4.900), "b": (52.400, 4.850), "c": (51.920, 4.480),
}
SEED = 18


def _tcp_connection(client: str, sport: int, start_ns: int, think_ns: list[int], rtt_ns: int,
                    request: int = 300, response: int = 1200) -> list[tuple[int, bytes]]:
    """A TCP connection at the server: handshake, one request/response per think time (the server
    answers after it, the client's ACK one RTT later), then FIN/ACK."""
    frames, t = [], start_ns
    cs, ss = 1000, 7_000_000

    def send(ts, c2s, seq, ack, flags, n=0):
        src, dst, sp, dp = (client, SERVER, sport, 443) if c2s else (SERVER, client, 443, sport)
        frames.append((ts, ipv4(src, dst, 6, tcp(sp, dp, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, payload=b"x" * n))))

    send(t, True, cs, 0, 0x02)
    send(t + 100_000, False, ss, cs + 1, 0x12)
    cs, ss = cs + 1, ss + 1
    t += 100_000 + rtt_ns
    send(t, True, cs, ss, 0x10)
    for think in think_ns:
        t += 1_000_000
        send(t, True, cs, ss, 0x18, request)
        cs += request
        t += think
        send(t, False, ss, cs, 0x18, response)
        ss += response
        t += rtt_ns
        send(t, True, cs, ss, 0x10)
    t += 1_000_000
    send(t, True, cs, ss, 0x11)
    send(t + 100_000, False, ss, cs + 1, 0x11)
    send(t + 100_000 + rtt_ns, True, cs + 1, ss + 1, 0x10)
    return frames


def build(out: Path) -> dict:
    """Write the captures and enrichment inputs under ``out``; returns what was put in."""
    rng = random.Random(SEED)
    out.mkdir(parents=True, exist_ok=True)
    caps = out / "captures"
    caps.mkdir(exist_ok=True)
    keys, sessions, expected = [], [], {"quic_connections": 0, "tcp_connections": 0, "fallback_clients": []}
    hour = 3600 * 10**9

    def session(ip, t0, cell, net):
        lat, lng = CELLS[cell]
        sessions.append(f"{ip},{_iso(t0 - 60 * 10**9)},{_iso(t0 + 1800 * 10**9)},{lat},{lng},{net}")

    # QUIC: 8 clients in both carriers and three cells; 2 lose server datagrams mid-response
    plan = [("198.18.1.10", "a", "LTE", 70, set()), ("198.18.1.11", "a", "5G", 70, {30, 31}),
            ("198.18.1.12", "b", "LTE", 70, set()), ("198.18.1.13", "c", "Wi-Fi", 70, {60}),
            ("198.18.1.140", "a", "LTE", 70, set()), ("198.18.1.141", "b", "5G", 70, {25, 90}),
            ("198.18.1.142", "c", "LTE", 70, set()), ("198.18.1.143", "c", "Wi-Fi", 70, set())]
    for k, (ip, cell, net, n, drops) in enumerate(plan):
        t0 = DAY0_NS + (k + 1) * hour
        sim = quicsim.run(out / f"quic{k}", requests=n, response_bytes=8_000, owd_s=0.02 + 0.01 * (k % 3),
                          drop_s2c=drops, client=(ip, 50000 + k), t0_ns=t0)
        (caps / f"quic{k}.pcap").write_bytes(sim.pcap.read_bytes())
        keys.append(sim.keylog.read_text())
        session(ip, t0, cell, net)
        expected["quic_connections"] += 1

    # TCP: 8 clients, 70 exchanges each, think time log-normal around 60 ms (a heavier tail)
    frames = []
    tcp_plan = [("198.18.1.20", "a", "LTE"), ("198.18.1.21", "a", "5G"), ("198.18.1.22", "b", "LTE"),
                ("198.18.1.23", "c", "Wi-Fi"), ("198.18.1.150", "a", "LTE"), ("198.18.1.151", "b", "5G"),
                ("198.18.1.152", "c", "LTE"), ("198.18.1.153", "c", "Wi-Fi")]
    for k, (ip, cell, net) in enumerate(tcp_plan):
        t0 = DAY0_NS + (k + 1) * hour + 30 * 60 * 10**9
        think = [int(rng.lognormvariate(17.9, 0.8)) for _ in range(70)]  # e^17.9 ns ~ 59 ms
        frames += _tcp_connection(ip, 40000 + k, t0, think, rtt_ns=40_000_000 + 10_000_000 * (k % 3))
        session(ip, t0, cell, net)
        expected["tcp_connections"] += 1

    # a fallback: QUIC gets nothing through (server datagrams all lost past the capture), TCP 1 s later
    ip, t0 = "198.18.1.30", DAY0_NS + 12 * hour
    sim = quicsim.run(out / "blocked", requests=1, drop_s2c=set(range(1, 1000)), client=(ip, 51000), t0_ns=t0)
    (caps / "blocked.pcap").write_bytes(sim.pcap.read_bytes())
    frames += _tcp_connection(ip, 41000, t0 + 10**9, [30_000_000] * 3, rtt_ns=40_000_000)
    session(ip, t0, "b", "LTE")
    expected["fallback_clients"].append(ip)
    expected["quic_connections"] += 1
    expected["tcp_connections"] += 1

    frames.sort(key=lambda f: f[0])
    write_pcap(caps / "tcp.pcap", frames, linktype=101)
    (out / "keys.log").write_text("".join(keys))
    (out / "prefixes.csv").write_text("prefix,carrier,asn\n" + "".join(
        f"{p},{name},{64500 + i}\n" for i, (name, p) in enumerate(CARRIERS.items())))
    (out / "sessions.csv").write_text("client_ip,start,end,lat,lng,network_type\n" + "\n".join(sessions) + "\n")
    return {"dir": out, **expected}


def _iso(ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def analyze(info: dict, ds: Path) -> Path:
    from tailscope.jobs.enrichment.enrich import EnrichmentOptions
    from tailscope.jobs.run.local import AnalyzeOptions, analyze as run

    d = info["dir"]
    run([str(d / "captures")], ds, AnalyzeOptions(progress=False, keylogs=[str(d / "keys.log")], enrichment=EnrichmentOptions(
        prefixes=[d / "prefixes.csv"], sessions=[d / "sessions.csv"], site="lab")))
    return ds



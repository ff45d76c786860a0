#!/usr/bin/env python3
"""Build the demo weeks: two ISO weeks of server-side captures with carriers, hexagons and a
regression to find, like traffic: every connection draws its own path and exchanges, so
percentiles and their intervals behave as on real traffic. Deterministic and offline.

What it writes under OUT (default demo-week/):

- captures/edge-ams1/trace-YYYYMMDD.pcap: one file per day for 14 days (2026-W46 and 2026-W47),
  each a rotation file of one capture. Connections start at times drawn from a diurnal load curve
  (busiest around 20:00 UTC, quietest around 04:00), from clients of three carriers (one /16
  each) in 24 hexagons of two regions (each region's centre busiest: CELL_WEIGHTS), to one server (the lab's address and port).
- TCP connections are synthesized packet by packet (scripts/demo_tcp.py: handshake, requests,
  ACK-clocked responses, SACK, fast retransmit, tail loss probes, RTOs, as a Linux server and
  client do; headers only). Each draws, for itself alone (PATHS, NETWORK, EXCHANGES below): a base
  RTT (lognormal, median per carrier and region, scaled by the network type and up to 20 % in the
  busy hours), jitter, a loss rate (per carrier, higher in the busy hours), an access rate;
  1-10 exchanges with lognormal response sizes (median 14 kB, a heavy tail to 4 MB), server
  times and think times. The same distributions draw both weeks.
- QUIC: about a third of the connections are sessions of an HTTP/3-capable app, taken one client
  session at a time from the QUIC lab's samples (quic_clean, quic_loss, quic_fallback) with their
  times stretched by the drawn RTT / the lab's 40 ms: mostly QUIC-first sessions, some over
  TLS/TCP (an app that did not try QUIC), and QUIC attempts that fell back to TCP - 3 % of
  QUIC-first sessions, 15 % on "Plover Net", a carrier throttling UDP; from quic_loss with a chance
  growing with the carrier's loss rate. Without those samples in samples/ the demo is TCP only
  (truth.json: app_sessions all 0).
- prefixes.csv: three carriers, one /16 each. sessions.csv: one app-telemetry record per client
  (where it was: a point inside one of 24 H3 cells in two regions; its network type).
  regions.csv: the two regions' cells.
- truth.json: what was injected (carrier, region, hexagon, week, parameters, how many
  connections) and the distributions, for tests and for the reader of the report.

The regression: in the second week 70 % of carrier "Kestrel Mobile"'s TCP connections in the
north region pass a token-bucket policer (rate lognormal around 3 Mbit/s, bucket 16-64 kB) that
drops what exceeds it, and every TCP connection of "Heron Telecom" in the busiest southern
hexagon a deep FIFO (6-12 Mbit/s, 800 ms of buffer) that other users' traffic keeps between empty
and full; the first week has neither. (Only TCP: the lab's QUIC sessions cannot be re-run through
them; so the mix of QUIC and TCP stays the same in both weeks.) Those slices' p95 and p99 rise beyond their bootstrap intervals, the
other slices' stay within theirs, and tailscope's detectors tag policing and bufferbloat there
(tests/test_demo_week.py).

    python3 scripts/make-demo-week.py --out demo-week
"""
from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import math
import random
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import make_trace as mt  # noqa: E402  (the rewriting primitives: one implementation)

sys.path.insert(0, str(ROOT / "scripts"))
import demo_tcp  # noqa: E402  (one TCP connection, synthesized)

SEED = 20261109
FIRST_DAY = dt.date(2026, 11, 9)  # Monday of 2026-W46
DAYS = 14
CARRIERS = [  # name, prefix (a /16: 10.<b>.0.0), asn, share of clients
    ("Kestrel Mobile", 41, 64611, 0.45),
    ("Heron Telecom", 42, 64612, 0.35),
    ("Plover Net", 43, 64613, 0.20),
]
REGIONS = {"north": (52.37, 4.90), "south": (51.92, 4.48)}  # two metro areas
H3_RES = 7
CELLS_PER_REGION = 12
CELL_WEIGHTS = [1 / math.sqrt(i + 1) for i in range(CELLS_PER_REGION)]  # the centre busiest (~20 %)
NETWORK_TYPES = [("LTE", 0.55), ("5G", 0.25), ("Wi-Fi", 0.20)]
CONNECTIONS_PER_HOUR = 14  # at the daily mean; the curve runs from ~0.3x to ~1.7x
SERVER, SERVER_PORT = bytes((198, 18, 2, 2)), 8443  # the lab's server: QUIC samples and TCP alike
# What a connection's path and exchanges are drawn from (each connection its own draws; the same
# distributions in both weeks). Per carrier: the base RTT's median per region (ms) and its
# lognormal spread, the mean extra downstream delay (jitter, ms), the chance a server data
# segment is lost, the access link's median rate (Mbit/s). The network type scales the RTT and
# the rate; the busy hours (diurnal load) raise RTT and loss.
PATHS = {
    "Kestrel Mobile": {"rtt_ms": {"north": 46, "south": 52}, "rtt_sigma": 0.35, "jitter_ms": 1.2, "loss": 0.004, "mbps": 30},
    "Heron Telecom": {"rtt_ms": {"north": 38, "south": 41}, "rtt_sigma": 0.30, "jitter_ms": 0.8, "loss": 0.002, "mbps": 45},
    "Plover Net": {"rtt_ms": {"north": 60, "south": 66}, "rtt_sigma": 0.45, "jitter_ms": 2.0, "loss": 0.007, "mbps": 20},
}
NETWORK = {"LTE": {"rtt": 1.0, "mbps": 1.0}, "5G": {"rtt": 0.8, "mbps": 2.5}, "Wi-Fi": {"rtt": 0.7, "mbps": 1.5}}
EXCHANGES = {  # per connection: 1 + geometric(p) queries (at most 10); per query, lognormal draws
    "more_queries_p": 0.6,  # chance of each further query
    "request_bytes": (150, 1200),  # uniform
    "response_kb_median": 14.0, "response_sigma": 1.4, "response_kb_max": 4000,
    "server_ms_median": 12.0, "server_sigma": 0.8, "server_ms_max": 2000,
    "think_s_median": 0.3, "think_sigma": 1.0, "think_s_max": 20,
}
SYNACK_LOSS = 0.002  # SYN-ACKs lost downstream (the server repeats them after 1 s)
# The regression of the second week (truth.json): a policer on part of Kestrel Mobile's north
# subscribers, a deep queue shared with other users in one of Heron Telecom's southern hexagons.
POLICER = {"carrier": "Kestrel Mobile", "region": "north", "share": 1.0,
           "rate_mbps_median": 2.0, "rate_sigma": 0.3, "burst_kb": (8, 40)}
QUEUE = {"carrier": "Heron Telecom", "region": "south", "cell_index": 0, "rate_mbps": (6, 12),
         "buffer_ms": 800, "backlog_ms": (0, 250), "load": (0.75, 1.05)}
# QUIC (the QUIC lab's samples, split into client sessions): the share of connections that are an
# HTTP/3-capable app's sessions; of those, the share trying QUIC first (the rest use TLS/TCP);
# of QUIC-first sessions, the share whose QUIC attempt fails and falls back to TCP, per carrier.
# A session is the lab's (a 40 ms path) with its times scaled by the connection's drawn RTT / 40 ms;
# it comes from quic_loss with the chance its carrier's loss rate gives (lossy paths), else
# quic_clean.
QUIC_SAMPLES = {"clean": "quic_clean", "loss": "quic_loss", "fallback": "quic_fallback"}
LAB_RTT = 0.040
APP_SHARE = 0.35
QUIC_FIRST = 0.85
FALLBACK = {"Kestrel Mobile": 0.03, "Heron Telecom": 0.03, "Plover Net": 0.15}
LOSSY_SHARE_PER_LOSS = 20  # chance of a quic_loss session = 20 x the carrier's loss rate (Plover: 14 %)


def diurnal(hour: int) -> float:
    return 1.0 + 0.7 * math.cos((hour - 20) / 24 * 2 * math.pi)


def pick(rng: random.Random, weighted):
    x, acc = rng.random() * sum(w for _, w in weighted), 0.0
    for item, w in weighted:
        acc += w
        if x < acc:
            return item
    return weighted[-1][0]


def cells():
    import h3

    out = {}
    for region, (lat, lng) in REGIONS.items():
        center = h3.latlng_to_cell(lat, lng, H3_RES)
        ring = sorted(h3.grid_disk(center, 2))  # 19 cells; the first 12 in a fixed order
        out[region] = [center] + [c for c in ring if c != center][: CELLS_PER_REGION - 1]
    return out


def _client_port(p) -> tuple[int, int] | None:
    """(IP protocol, client port) of a sample packet (IPv4 over Ethernet, as the lab writes them)."""
    d = p.data
    if len(d) < 38 or (d[12], d[13]) != (8, 0) or not p.addrs:
        return None
    ihl, proto = (d[14] & 0x0F) * 4, d[23]
    l4 = 14 + ihl
    if proto not in (6, 17) or len(d) < l4 + 4:
        return None
    sport, dport = struct.unpack_from("!HH", d, l4)
    return proto, (sport if p.addrs[0][0] == 26 else dport)  # the client address is the source at offset 26


def quic_sessions(sample: dict, client_log: Path) -> dict[str, list[dict]]:
    """A QUIC-lab sample split into its client sessions, by the ports the client's log gives each
    session: {"quic": [...], "tcp": [...], "fallback": [...]} of sub-samples (the sample's dict
    shape, times from the session's first packet). A fallback session holds the failed QUIC
    attempt and the TCP connection that followed."""
    ports, kind = {}, {}
    for line in client_log.read_text().splitlines():
        r = json.loads(line)
        if r.get("sport") is not None and r.get("session") is not None:
            ports[({"tcp": 6, "udp": 17}[r["proto"]], r["sport"])] = r["session"]
        if r.get("kind") == "session":
            kind[r["session"]] = ("fallback" if r["mode"] == "quic_first" and r["transport"] == "tcp"
                                  else "quic" if r["transport"] == "quic" else "tcp")
    packets: dict[int, list] = {}
    for p in sample["packets"]:
        s = ports.get(_client_port(p))
        if s is not None:
            packets.setdefault(s, []).append(p)
    out: dict[str, list[dict]] = {"quic": [], "tcp": [], "fallback": []}
    for s in sorted(packets):
        pk = packets[s]
        t0 = pk[0].ts_us
        sub = [mt.Packet(q.ts_us - t0, q.data, q.orig_len, q.addrs, q.ipck, q.l4ck) for q in pk]
        out[kind[s]].append({**sample, "name": f"{sample['name']}#{s}", "packets": sub})
    return out


def lognormal(rng: random.Random, median: float, sigma: float, cap: float = math.inf) -> float:
    return min(cap, median * math.exp(rng.gauss(0, sigma)))


def draw_path(rng: random.Random, carrier: str, region: str, network: str, hour: int) -> dict:
    """One connection's path (PATHS): base RTT and access rate by carrier, region, network type
    and hour; jitter and loss by carrier and hour."""
    p, n = PATHS[carrier], NETWORK[network]
    busy = (diurnal(hour) - 0.3) / 1.4  # 0 at the quietest hour, 1 at the busiest
    return {
        "rtt": lognormal(rng, p["rtt_ms"][region] * n["rtt"] * (1 + 0.2 * busy), p["rtt_sigma"]) / 1e3,
        "jitter": p["jitter_ms"] / 1e3,
        "loss": p["loss"] * (0.6 + 0.8 * busy),
        "rate": lognormal(rng, p["mbps"] * n["mbps"] * (1 - 0.3 * busy), 0.5) * 1e6 / 8,
    }


def draw_queries(rng: random.Random) -> list[tuple[int, float, int, float]]:
    """One connection's exchanges (EXCHANGES): [(request bytes, server time s, response bytes,
    think time s before the request)]."""
    e, out = EXCHANGES, []
    while True:
        out.append((rng.randint(*e["request_bytes"]),
                    lognormal(rng, e["server_ms_median"], e["server_sigma"], e["server_ms_max"]) / 1e3,
                    max(200, round(lognormal(rng, e["response_kb_median"], e["response_sigma"], e["response_kb_max"]) * 1000)),
                    lognormal(rng, e["think_s_median"], e["think_sigma"], e["think_s_max"]) if out else 0.0))
        if len(out) == 10 or rng.random() >= e["more_queries_p"]:
            return out


def build(out: Path, seed: int = SEED, quiet: bool = False, days: int = DAYS, scale: float = 1.0) -> dict:
    """Write the demo weeks under `out`; `days` (from the first Monday; 14 = both weeks, the
    regression from day 8) and `scale` (connections per hour x scale) make a smaller one."""
    import h3

    t0 = time.perf_counter()
    rng = random.Random(seed)
    samples, snaplen = mt.load_samples(ROOT / "samples", None)
    by_name = {s["name"]: s for s in samples}
    # the app's sessions (none when the QUIC samples are not bundled: the demo is then TCP only)
    quic = {k: quic_sessions(by_name[name], ROOT / "samples" / f"{name}.client.jsonl")
            for k, name in QUIC_SAMPLES.items() if name in by_name}
    region_cells = cells()
    hot_cell = region_cells[QUEUE["region"]][QUEUE["cell_index"]]
    cap_dir = out / "captures" / "edge-ams1"
    cap_dir.mkdir(parents=True, exist_ok=True)
    sessions, injected = [], {"policing": 0, "policed_10": 0, "bufferbloat": 0}
    app = {"quic": 0, "tcp": 0, "fallback": 0}
    host = {c[1]: 0 for c in CARRIERS}
    connections = packets = queries = 0
    for day in range(days):
        date = FIRST_DAY + dt.timedelta(days=day)
        second_week = day >= 7
        todays = []  # per connection: its packets [(time_us, bytes, original length)] in time order
        for hour in range(24):
            for _ in range(max(0, round(rng.gauss(CONNECTIONS_PER_HOUR * scale * diurnal(hour), 2 * scale)))):
                crng = random.Random(rng.getrandbits(64))  # the connection's own draws
                carrier, b, _, _ = pick(crng, [(c, c[3]) for c in CARRIERS])
                region = "north" if crng.random() < 0.5 else "south"
                cell = crng.choices(region_cells[region], CELL_WEIGHTS)[0]
                network = pick(crng, NETWORK_TYPES)
                path = draw_path(crng, carrier, region, network, hour)
                start = dt.datetime.combine(date, dt.time(hour), dt.timezone.utc) + dt.timedelta(seconds=crng.uniform(0, 3600))
                t_start = start.timestamp()
                # an HTTP/3 app's session (the QUIC lab's, re-timed) or a synthesized TCP connection;
                # the regression meets the TCP connections only (the lab's QUIC sessions cannot be
                # re-run through a policer or queue), so each week has the same mix of both
                is_app = len(quic) == len(QUIC_SAMPLES) and crng.random() < APP_SHARE
                policer = queue = None
                if not is_app and second_week and carrier == POLICER["carrier"] and region == POLICER["region"] \
                        and crng.random() < POLICER["share"]:
                    policer = demo_tcp.Policer(lognormal(crng, POLICER["rate_mbps_median"], POLICER["rate_sigma"]) * 1e6 / 8,
                                               crng.randint(*POLICER["burst_kb"]) * 1000)
                    injected["policing"] += 1
                elif not is_app and second_week and carrier == QUEUE["carrier"] and cell == hot_cell:
                    rate = crng.uniform(*QUEUE["rate_mbps"]) * 1e6 / 8
                    queue = demo_tcp.DeepQueue(crng, rate, int(rate * QUEUE["buffer_ms"] / 1e3),
                                               rate * crng.uniform(*QUEUE["backlog_ms"]) / 1e3, crng.uniform(*QUEUE["load"]))
                    injected["bufferbloat"] += 1
                if is_app:
                    lossy = quic["loss" if crng.random() < LOSSY_SHARE_PER_LOSS * path["loss"] else "clean"]
                    if crng.random() < QUIC_FIRST:
                        how = "fallback" if crng.random() < FALLBACK[carrier] else "quic"
                        sess = crng.choice(quic["fallback"]["fallback"] if how == "fallback" else lossy["quic"])
                    else:
                        how, sess = "tcp", crng.choice(lossy["tcp"])
                    app[how] += 1
                    host[b] += 1
                    client = bytes((10, b, (host[b] >> 8) & 0xFF, host[b] & 0xFF))
                    (orig,) = sess["clients"]
                    rw = {orig: (client, mt.csum_delta(orig, client))}
                    f = path["rtt"] / LAB_RTT  # the lab's times, stretched to this path's round trip
                    t_us = round(t_start * 1e6)
                    pk = [(t_us + round(q.ts_us * f), _rewritten(q, rw), q.orig_len) for q in sess["packets"]]
                else:
                    qs = draw_queries(crng)
                    queries += len(qs)
                    host[b] += 1
                    client = bytes((10, b, (host[b] >> 8) & 0xFF, host[b] & 0xFF))
                    pk = demo_tcp.synthesize(crng, client=client, server=SERVER, sport=crng.randint(32768, 60999),
                                             dport=SERVER_PORT, start=t_start, queries=qs, policer=policer, queue=queue,
                                             synack_lost=crng.random() < SYNACK_LOSS, close_after=crng.uniform(0.2, 5), **path)
                todays.append(pk)
                connections += 1
                if policer is not None and policer.drops >= 10:  # Flach et al.'s minimum to judge a flow
                    injected["policed_10"] += 1
                lat, lng = h3.cell_to_latlng(cell)
                dur_s = (pk[-1][0] - pk[0][0]) / 1e6
                sessions.append({
                    "client_ip": ".".join(map(str, client)),
                    "start": (start - dt.timedelta(seconds=30)).isoformat().replace("+00:00", "Z"),
                    "end": (start + dt.timedelta(seconds=dur_s + 30)).isoformat().replace("+00:00", "Z"),
                    "lat": round(lat, 6), "lng": round(lng, 6), "network_type": network,
                })
        path = cap_dir / f"trace-{date.strftime('%Y%m%d')}.pcap"
        with open(path, "wb", buffering=1 << 20) as fh:
            fh.write(struct.pack("<IHHiIII", mt.PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, mt.LINKTYPE_ETHERNET))
            for ts, data, orig_len in heapq.merge(*todays, key=lambda p: p[0]):
                fh.write(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(data), orig_len))
                fh.write(data)
                packets += 1
    (out / "prefixes.csv").write_text(
        "# Demo carriers (synthetic; scripts/make-demo-week.py)\nprefix,carrier,asn\n"
        + "".join(f"10.{b}.0.0/16,{name},{asn}\n" for name, b, asn, _ in CARRIERS))
    (out / "sessions.csv").write_text(
        "# Demo app-telemetry sessions (synthetic; scripts/make-demo-week.py)\nclient_ip,start,end,lat,lng,network_type\n"
        + "".join(f"{r['client_ip']},{r['start']},{r['end']},{r['lat']},{r['lng']},{r['network_type']}\n" for r in sessions))
    (out / "regions.csv").write_text(
        "# Demo regions (synthetic; scripts/make-demo-week.py)\nh3_cell,region\n"
        + "".join(f"{c},{region}\n" for region, cs in region_cells.items() for c in cs))
    truth = {
        "weeks": ["2026-W46", "2026-W47"][: 1 + (days > 7)],
        "connections": connections, "packets": packets, "clients": len(sessions), "tcp_queries_drawn": queries,
        "cells": sum(len(c) for c in region_cells.values()),
        "regression": {
            "week": "2026-W47",
            # connections behind the policer, and those it dropped 10 segments or more of
            "policing": {**POLICER, "connections": injected["policing"], "dropped_10_or_more": injected["policed_10"]},
            "bufferbloat": {**QUEUE, "h3_cell": hot_cell, "connections": injected["bufferbloat"]},
        },
        "distributions": {"paths": PATHS, "network": NETWORK, "exchanges": EXCHANGES, "synack_loss": SYNACK_LOSS},
        # the HTTP/3 app's sessions: QUIC-first (of which fell back to TCP) and over TLS/TCP
        "app_sessions": {"quic_first": app["quic"] + app["fallback"], "fallback": app["fallback"], "tcp": app["tcp"]},
        "seed": seed, "scale": scale, "generator": "scripts/make-demo-week.py",
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    if not quiet:
        print(f"demo week: {out}: {connections:,} connections, {packets:,} packets over {days} days, "
              f"{len(sessions):,} clients in {truth['cells']} hexagons; built in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return json.loads(json.dumps(truth))


def _rewritten(p, rw) -> bytes:
    if not p.addrs:
        return p.data
    b = bytearray(p.data)
    delta = 0
    for off, ln, orig in p.addrs:
        new, d = rw[orig]
        b[off : off + ln] = new
        delta += d
    for ck in (p.ipck, p.l4ck):
        if ck >= 0:
            c = mt.fold(((~((b[ck] << 8) | b[ck + 1])) & 0xFFFF) + delta)
            c = ~c & 0xFFFF
            b[ck], b[ck + 1] = c >> 8, c & 0xFF
    return bytes(b)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "demo-week", help="output directory (default demo-week/)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--days", type=int, default=DAYS, help="days from 2026-11-09 (default 14: both weeks)")
    ap.add_argument("--scale", type=float, default=1.0, help="connections per hour x SCALE (default 1)")
    args = ap.parse_args(argv)
    build(args.out, args.seed, days=args.days, scale=args.scale)
    return 0


if __name__ == "__main__":
    sys.exit(main())

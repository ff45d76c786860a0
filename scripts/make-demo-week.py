#!/usr/bin/env python3
"""Build the demo weeks: two ISO weeks of server-side captures with carriers, hexagons and a
regression to find, made from the lab's sample captures (samples/). Deterministic and offline.

What it writes under OUT (default demo-week/):

- captures/edge-ams1/trace-YYYYMMDD.pcap: one file per day for 14 days (2026-W46 and 2026-W47),
  each a rotation file of one capture. Every connection is an "instance" of a lab sample (its
  packets, spacing and behaviour as the lab recorded them) with its client address rewritten into
  a carrier's prefix and its start moved to a time drawn from a diurnal load curve (busiest around
  20:00 UTC, quietest around 04:00). Servers keep their addresses. Checksums are updated
  incrementally, as benchmarks/make_trace.py does (its primitives are reused).
- prefixes.csv: three carriers, one /16 each. sessions.csv: one app-telemetry record per client
  (where it was: a point inside one of 24 H3 cells in two regions; its network type).
  regions.csv: the two regions' cells.
- truth.json: what was injected, for tests and for the reader of the report.

QUIC: about a third of the connections are sessions of an HTTP/3-capable app, taken one client
session at a time from the QUIC lab's samples (quic_clean, quic_loss, quic_fallback; each session
gets its own client address, as the TCP instances do): mostly QUIC-first sessions, some over TLS/TCP
(an app that did not try QUIC), and QUIC attempts that fell back to TCP - 3 % of QUIC-first sessions,
15 % on "Plover Net", a carrier throttling UDP. A session on a lossy path (the TCP mix drew a loss
sample) is taken from quic_loss, else from quic_clean: both transports meet the same paths.
Without those samples in samples/ the demo is TCP only (truth.json: app_sessions all 0).

The regression: in the second week, clients of carrier "Kestrel Mobile" in the north region meet
a policer (their connections are the lab's policing sample), and clients of "Heron Telecom" in one
southern hexagon meet a deep queue (the bufferbloat sample); the first week's mix is the same
without them. `tailscope stats` and the report must name policing and bufferbloat as what moved the
p99 of those slices.

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
from itertools import repeat
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import make_trace as mt  # noqa: E402  (the rewriting primitives: one implementation)

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
NETWORK_TYPES = [("LTE", 0.55), ("5G", 0.25), ("Wi-Fi", 0.20)]
# The usual mix: mostly clean exchanges, some of every loss pattern.
BASE_MIX = [("clean", 0.80), ("mobile_mixed", 0.005), ("request_loss", 0.03), ("tail_loss", 0.03),
            ("reordering", 0.08), ("tail_loss_rto", 0.01), ("midburst_loss", 0.01), ("syn_loss", 0.0015),
            ("synack_loss", 0.0015)]
CONNECTIONS_PER_HOUR = 14  # at the daily mean; the curve runs from ~0.3x to ~1.7x
# QUIC (the QUIC lab's samples, split into client sessions): the share of connections that are an
# HTTP/3-capable app's sessions; of those, the share trying QUIC first (the rest use TLS/TCP);
# of QUIC-first sessions, the share whose QUIC attempt fails and falls back to TCP, per carrier
QUIC_SAMPLES = {"clean": "quic_clean", "loss": "quic_loss", "fallback": "quic_fallback"}
APP_SHARE = 0.35
QUIC_FIRST = 0.85
FALLBACK = {"Kestrel Mobile": 0.03, "Heron Telecom": 0.03, "Plover Net": 0.15}
CLEAN_PATHS = {"clean", "reordering"}  # TCP mix draws whose app sessions come from quic_clean


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


def build(out: Path, seed: int = SEED, quiet: bool = False) -> dict:
    import h3

    t0 = time.perf_counter()
    rng = random.Random(seed)
    samples, snaplen = mt.load_samples(ROOT / "samples", None)
    by_name = {s["name"]: s for s in samples}
    for s in samples:
        if any(len(c) != 4 for c in s["clients"]):
            by_name.pop(s["name"])  # IPv6 samples: the carriers' prefixes here are IPv4
    # the app's sessions (none when the QUIC samples are not bundled: the demo is then TCP only)
    quic = {k: quic_sessions(by_name[name], ROOT / "samples" / f"{name}.client.jsonl")
            for k, name in QUIC_SAMPLES.items() if name in by_name}
    region_cells = cells()
    hot_cell = region_cells["south"][3]
    # instances: (start_us, sample, {orig client: new client}); sessions per client
    instances, sessions, injected = [], [], {"policing": 0, "bufferbloat": 0}
    app = {"quic": 0, "tcp": 0, "fallback": 0}
    host = {c[1]: 0 for c in CARRIERS}
    for day in range(DAYS):
        date = FIRST_DAY + dt.timedelta(days=day)
        second_week = day >= 7
        for hour in range(24):
            for _ in range(max(0, round(rng.gauss(CONNECTIONS_PER_HOUR * diurnal(hour), 2)))):
                carrier, b, _, _ = pick(rng, [(c, c[3]) for c in CARRIERS])
                region = "north" if rng.random() < 0.5 else "south"
                cell = rng.choice(region_cells[region])
                name = pick(rng, BASE_MIX)
                s, how = by_name[name], None
                if len(quic) == len(QUIC_SAMPLES) and rng.random() < APP_SHARE:
                    path = quic["clean" if name in CLEAN_PATHS else "loss"]
                    if rng.random() < QUIC_FIRST:
                        how = "fallback" if rng.random() < FALLBACK[carrier] else "quic"
                        s = rng.choice(quic["fallback"]["fallback"] if how == "fallback" else path["quic"])
                    else:
                        how, s = "tcp", rng.choice(path["tcp"])
                if second_week and carrier == "Kestrel Mobile" and region == "north" and rng.random() < 0.7:
                    name, injected["policing"] = "policing", injected["policing"] + 1
                    s, how = by_name[name], None
                elif second_week and carrier == "Heron Telecom" and cell == hot_cell:
                    name, injected["bufferbloat"] = "bufferbloat", injected["bufferbloat"] + 1
                    s, how = by_name[name], None
                if how:
                    app[how] += 1
                start = dt.datetime.combine(date, dt.time(hour), dt.timezone.utc) + dt.timedelta(seconds=rng.uniform(0, 3600))
                start_us = int(start.timestamp() * 1e6)
                rewrite = {}
                for orig in s["clients"]:
                    host[b] += 1
                    n = host[b]
                    new = bytes((10, b, (n >> 8) & 0xFF, n & 0xFF))
                    rewrite[orig] = (new, mt.csum_delta(orig, new))
                    lat, lng = h3.cell_to_latlng(cell)
                    dur_s = (s["packets"][-1].ts_us if s["packets"] else 0) / 1e6
                    sessions.append({
                        "client_ip": ".".join(map(str, new)),
                        "start": (start - dt.timedelta(seconds=30)).isoformat().replace("+00:00", "Z"),
                        "end": (start + dt.timedelta(seconds=dur_s + 30)).isoformat().replace("+00:00", "Z"),
                        "lat": round(lat, 6), "lng": round(lng, 6), "network_type": pick(rng, NETWORK_TYPES),
                    })
                instances.append((day, start_us, s, rewrite))
    cap_dir = out / "captures" / "edge-ams1"
    cap_dir.mkdir(parents=True, exist_ok=True)
    packets = 0
    for day in range(DAYS):
        todays = [i for i in instances if i[0] == day]
        iters = [_timeline(st, s["packets"], k) for k, (_, st, s, _) in enumerate(todays)]
        path = cap_dir / f"trace-{(FIRST_DAY + dt.timedelta(days=day)).strftime('%Y%m%d')}.pcap"
        with open(path, "wb", buffering=1 << 20) as fh:
            fh.write(struct.pack("<IHHiIII", mt.PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, mt.LINKTYPE_ETHERNET))
            for ts, k, j in heapq.merge(*iters):
                _, _, s, rw = todays[k]
                p = s["packets"][j]
                data = _rewritten(p, rw)
                fh.write(struct.pack("<IIII", ts // 1_000_000, ts % 1_000_000, len(data), p.orig_len))
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
        "weeks": ["2026-W46", "2026-W47"],
        "connections": len(instances), "packets": packets, "clients": len(sessions),
        "cells": sum(len(c) for c in region_cells.values()),
        "regression": {
            "week": "2026-W47",
            "policing": {"carrier": "Kestrel Mobile", "region": "north", "connections": injected["policing"]},
            "bufferbloat": {"carrier": "Heron Telecom", "h3_cell": hot_cell, "connections": injected["bufferbloat"]},
        },
        # the HTTP/3 app's sessions: QUIC-first (of which fell back to TCP) and over TLS/TCP
        "app_sessions": {"quic_first": app["quic"] + app["fallback"], "fallback": app["fallback"], "tcp": app["tcp"]},
        "seed": seed, "generator": "scripts/make-demo-week.py",
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    if not quiet:
        print(f"demo week: {out}: {len(instances):,} connections, {packets:,} packets over {DAYS} days, "
              f"{len(sessions):,} clients in {truth['cells']} hexagons; built in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    return truth


def _timeline(start_us: int, packets, k: int):
    """(time, instance, packet index) of one instance, in time order (bound now, not lazily)."""
    return zip([start_us + p.ts_us for p in packets], repeat(k), range(len(packets)))


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
    args = ap.parse_args(argv)
    build(args.out, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())

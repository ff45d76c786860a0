"""Regenerate the bundled sample captures in samples/ (scripts/make-samples.sh).

A handful of lab scenarios, captured headers-only (snaplen 128, as the edge
agent would), each with its ground truth: <name>.pcap, <name>.emulator.jsonl,
<name>.client.jsonl, <name>.scenario.json, plus index.json and README.md.
Size budget: each pcap < 300 kB, all pcaps < 1.5 MB (checked, not hoped).

    sudo python -m tests.lab.samples --out samples
    sudo python -m tests.lab.samples --out samples --only quic_clean quic_loss   # just these

`--only` regenerates the named samples and keeps the others (other tests pin their captures):
index.json and README.md are rewritten with the others' entries as they were, and the new
captures and their logs are moved by whole days to the kept samples' capture day (time of day
kept; every absolute timestamp moves alike, so the ground truth still lines up), so the bundle
stays one day and one week, as the tests and the demo week built from it expect.

The QUIC samples (aioquic and TLS/TCP clients, tests/lab/quic_apps.py) are captured headers-only
too: 128 bytes keep every QUIC header (long headers with their connection IDs, the short header's
first byte and DCID) and the UDP length, which is what tailscope reads without keys; the Initials'
ClientHello (SNI) is cut, so their flows carry no SNI, and QUIC-to-TCP pairing falls back to the
server's address (docs/signatures.md#quic-to-tcp-fallback). The run's key log and qlogs are not
kept (nothing in a 128-byte capture can be decrypted).
"""
from __future__ import annotations

import argparse
import collections
import json
import struct
import sys
from pathlib import Path

from .harness import ScenarioResult, lab_available, run_scenarios
from .pcapread import read_pcap, tcp_connections
from .scenarios import get

SNAPLEN = 128
MAX_PCAP = 300_000
MAX_TOTAL = 1_500_000
# name -> overrides. One sample uses nanosecond timestamps so the parsers'
# other pcap flavour is covered by a real capture too.
SAMPLES = {
    "clean": {},
    "clean_ipv6": {"ts_precision": "nano"},
    "syn_loss": {},
    "synack_loss": {},
    "tail_loss": {},
    "tail_loss_rto": {},
    "midburst_loss": {},
    "request_loss": {},
    "reordering": {},
    "policing": {},
    "bufferbloat": {},
    "mobile_mixed": {},
    # QUIC (tests/lab/scenarios.py QUIC_QUERY_SCENARIOS, renamed for the demo week)
    "quic_clean": {"scenario": "quic_queries_clean"},
    "quic_loss": {"scenario": "quic_queries_loss", "loss": {"model": "bernoulli", "p": 0.02, "dir": "both"},
                  "description": "2% random loss both ways (seeded), 40 ms RTT: sessions alternate QUIC and TLS "
                                 "over TCP, four sequential requests each; losses of response tails stall a "
                                 "response until the sender's probe timeout."},
    "quic_fallback": {},
}
SUFFIXES = (".pcap", ".emulator.jsonl", ".client.jsonl", ".scenario.json")
# what a QUIC run writes besides (key log, qlogs, server log): not kept in samples/
QUIC_EXTRAS = (".keys.log", ".client.qlog", ".server.jsonl", ".server.qlog")


def scenario_of(name: str, overrides: dict):
    ov = dict(overrides)
    base = ov.pop("scenario", name)
    sc = get(base, snaplen=SNAPLEN, **ov)
    return sc.replace(name=name) if base != name else sc


DAY_NS = 86_400 * 10**9
# absolute CLOCK_REALTIME ns (after 2001); durations in the logs are far below it
_EPOCH_NS_MIN = 10**18


def _capture_day(pcap: Path) -> int | None:
    """The day (ns since the epoch // DAY_NS) of a capture's first packet."""
    frames = read_pcap(pcap)
    return frames[0].ts_ns // DAY_NS if frames else None


def _shift_json(v, delta: int):
    if isinstance(v, dict):
        return {k: (x + delta if k.endswith("_ns") and isinstance(x, int) and x > _EPOCH_NS_MIN
                    else _shift_json(x, delta)) for k, x in v.items()}
    if isinstance(v, list):
        return [_shift_json(x, delta) for x in v]
    return v


def shift_days(out: Path, name: str, days: int) -> None:
    """Move a sample's capture and logs by whole days (pcap record times, every absolute *_ns)."""
    if not days:
        return
    delta = days * DAY_NS
    pcap = out / f"{name}.pcap"
    data = bytearray(pcap.read_bytes())
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, orig = struct.unpack_from(endian + "IIII", data, off)
        struct.pack_into(endian + "I", data, off, sec + delta // 10**9)
        off += 16 + incl
    pcap.write_bytes(bytes(data))
    for suf in (".emulator.jsonl", ".client.jsonl"):
        p = out / f"{name}{suf}"
        lines = [json.dumps(_shift_json(json.loads(line), delta), separators=(",", ":"))
                 for line in p.read_text().splitlines() if line.strip()]
        p.write_text("\n".join(lines) + "\n")
    meta = out / f"{name}.scenario.json"
    meta.write_text(json.dumps(_shift_json(json.loads(meta.read_text()), delta), indent=1, default=str))


def _previous_index(out: Path) -> list[dict]:
    idx = out / "index.json"
    return json.loads(idx.read_text()).get("samples", []) if idx.exists() else []


def _remove_previous(out: Path, only: set | None = None) -> None:
    """Delete what an earlier run generated (and only that; with `only`, only those samples)."""
    names = set(SAMPLES) | {s["name"] for s in _previous_index(out)}
    if only is not None:
        names &= only
    for n in names:
        for suf in SUFFIXES + QUIC_EXTRAS:
            (out / f"{n}{suf}").unlink(missing_ok=True)


def describe(r: ScenarioResult) -> dict:
    frames = read_pcap(r.pcap)
    drops = collections.Counter(
        f"{d['reason']}{':' + d['rule_kind'] if d.get('rule_kind') else ''}/{d['dir']}" for d in r.drops())
    holds = sum(1 for e in r.emulator_records() if e.get("action") == "hold")
    return {
        "name": r.name,
        "description": r.params["description"],
        "intends": r.params["intends"],
        "files": {suf.lstrip("."): f"{r.name}{suf}" for suf in SUFFIXES},
        "pcap_bytes": r.pcap.stat().st_size,
        "packets": len(frames),
        "tcp_connections": len(tcp_connections(frames)),
        "quic_connections": len(r.quic_attempts()),
        "requests": len(r.requests()),
        "relay_drops": dict(drops),
        "relay_holds": holds,
        "snaplen": r.params["snaplen"],
        "ts_precision": r.params["ts_precision"],
        "rtt_ms": 2 * r.params["delay_ms"],
        "congestion_control": r.params["cc"],
        "backends": r.backends,
    }


def write_readme(out: Path, entries: list[dict]) -> None:
    lines = [
        "# Sample captures",
        "",
        "Generated by `scripts/make-samples.sh` with the ground-truth lab (`tests/lab/`, see its README for",
        "the topology, the impairments and the log formats). Each capture was taken with tcpdump at the",
        "server's interface, headers only (snaplen 128), and comes with its ground truth:",
        "",
        "- `<name>.pcap` - the capture (classic pcap, Ethernet; `clean_ipv6` has nanosecond timestamps)",
        "- `<name>.emulator.jsonl` - every decision of the lab's relay (drops, holds, delays) and kernel records",
        "- `<name>.client.jsonl` - the client's own log: connections and request timings",
        "- `<name>.scenario.json` - scenario parameters, hosts' TCP counters, capture statistics",
        "",
        "`index.json` lists the same in machine-readable form. Regenerating gives statistically similar,",
        "not byte-identical, captures (real TCP stacks, real timing).",
        "",
        "The `quic_*` samples come from the QUIC lab (`tests/lab/quic_apps.py`: aioquic, and TLS over TCP",
        "with the same request/response protocol and the same server name): their client log also lists",
        "the sessions, QUIC attempts and TLS connections; `conns` counts QUIC attempts and TCP connections.",
        "At 128 bytes the QUIC Initials' ClientHello (SNI) is cut: every header is kept.",
        "",
        "| sample | packets | conns | relay drops | what it shows |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        drops = ", ".join(f"{k} x{v}" for k, v in e["relay_drops"].items()) or "-"
        if e["relay_holds"]:
            drops += f"; {e['relay_holds']} held back"
        conns = e["tcp_connections"] + e.get("quic_connections", 0)
        lines.append(f"| `{e['name']}` | {e['packets']} | {conns} | {drops} | {e['description']} |")
    (out / "README.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.lab.samples")
    ap.add_argument("--out", default="samples")
    ap.add_argument("--parallel", type=int, default=3)
    ap.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(SAMPLES),
                    help="regenerate only these samples; keep the others and their index entries")
    a = ap.parse_args(argv)
    ok, why = lab_available()
    if not ok:
        print(f"lab unavailable: {why}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(a.only) if a.only else None
    kept = {e["name"]: e for e in _previous_index(out) if only is not None and e["name"] not in only}
    _remove_previous(out, only)
    todo = [n for n in SAMPLES if only is None or n in only]
    scs = [scenario_of(n, SAMPLES[n]) for n in todo]
    results = run_scenarios(scs, out, max_parallel=a.parallel)
    kept_day = next((d for e in kept.values() if (d := _capture_day(out / e["files"]["pcap"])) is not None), None)
    for n in todo:
        for suf in QUIC_EXTRAS:
            (out / f"{n}{suf}").unlink(missing_ok=True)
        day = _capture_day(out / f"{n}.pcap")
        if kept_day is not None and day is not None:
            shift_days(out, n, kept_day - day)
    bad = [f"{n}: {r.problems}" for n, r in results.items() if not r.ok]
    fresh = {n: describe(results[n]) for n in todo}
    entries = [fresh.get(n) or kept[n] for n in SAMPLES if n in fresh or n in kept]
    big = [f"{e['name']}: {e['pcap_bytes']} B" for e in entries if e["pcap_bytes"] >= MAX_PCAP]
    total = sum(e["pcap_bytes"] for e in entries)
    if total >= MAX_TOTAL:
        big.append(f"all pcaps: {total} B")
    (out / "index.json").write_text(json.dumps({"snaplen": SNAPLEN, "samples": entries}, indent=1) + "\n")
    write_readme(out, entries)
    for e in entries:
        print(f"{e['name']:16s} {e['pcap_bytes']:8d} B  {e['packets']:4d} pkts  drops {e['relay_drops'] or '-'}")
    print(f"total pcap bytes: {total}")
    for msg in bad + big:
        print(f"PROBLEM {msg}", file=sys.stderr)
    return 1 if bad or big else 0


if __name__ == "__main__":
    sys.exit(main())

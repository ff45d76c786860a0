#!/usr/bin/env python3
"""Write the synthetic enrichment fixture: tests/fixtures/enrichment/{prefixes,sessions,regions}.csv.

Deterministic: the same samples/ give the same files byte for byte. Nothing here is real: the
carriers, ASNs (private range 64496-64511 and 64512+) and places are made up.

- prefixes.csv: carriers over the lab's client ranges 198.18.1.0/24 and fd00:7473:1::/64, split
  into prefixes with overlaps (a more specific prefix inside a wider one), gaps (addresses no
  prefix covers -> carrier "unknown") and a row with an ASN but no carrier name.
- sessions.csv: app-telemetry session records. One per bundled sample capture (samples/*.pcap):
  the lab's client (198.18.1.2 / fd00:7473:1::2) "was" in some hexagon on some network while the
  sample was captured, its time range taken from the capture's first and last TCP packet. Some samples
  deliberately get no session (clean, request_loss), one gets a session without a location
  (synack_loss), and mobile_mixed gets two overlapping sessions (the later one wins for the flows
  that start after it began). Plus fixed records on 2024-01-15 for other lab client addresses,
  used by tests/test_enrichment.py with synthetic flows.
- regions.csv: region names for H3 resolution-6 parents of some of the hexagons (one hexagon's
  parent is left out: its region stays "unknown").

Run again after scripts/make-samples.sh regenerates the samples (tests/test_enrichment.py checks
that the committed fixture is current):

    python3 scripts/make-enrichment-fixture.py [--samples samples] [--out tests/fixtures/enrichment]
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Places (lat, lng) in a made-up service area; each falls in a different resolution-7 hexagon.
PLACES = {
    "central": (-6.1960, 106.8320),
    "south": (-6.2440, 106.7990),
    "east": (-6.1580, 106.9050),
    "west": (-6.1480, 106.7350),
}
# Resolution-6 parents of these places get a region name; "west" is deliberately not mapped.
REGIONS = {"central": "metro-central", "south": "metro-south", "east": "metro-east"}

PREFIXES = [
    # prefix, carrier, asn, comment
    ("198.18.1.0/25", "Northwind Mobile", "64501", "lab client 198.18.1.2 is here"),
    ("198.18.1.16/28", "Northwind MVNO", "64502", "overlap: more specific inside the /25 wins"),
    ("198.18.1.128/26", "Contoso Telecom", "64510", ""),
    ("198.18.1.160/27", "Tailspin Broadband", "64530", "overlap: inside Contoso's /26"),
    ("198.18.1.224/28", "", "AS64540", "ASN without a carrier name: carrier AS64540"),
    # gap: 198.18.1.192/27 and 198.18.1.240/28 are covered by nothing -> unknown
    ("fd00:7473:1::/65", "Fabrikam Wireless", "64520", "lab client fd00:7473:1::2 is here"),
    ("fd00:7473:1::100/120", "Contoso Telecom", "64510", "IPv6 overlap: more specific inside the /65"),
    # gap: fd00:7473:1:0:8000::/65 is covered by nothing -> unknown
]

# sample -> [(network type, place or None, fraction of the capture's duration where it starts)]
# Samples not listed have no session (deliberately).
SAMPLE_SESSIONS = {
    "clean_ipv6": [("wifi", "central", 0.0)],
    "syn_loss": [("lte", "south", 0.0)],
    "synack_loss": [("LTE", None, 0.0)],  # a session without a location: hexagon unknown
    "tail_loss": [("3g", "east", 0.0)],
    "tail_loss_rto": [("HSPA", "east", 0.0)],
    "midburst_loss": [("lte", "central", 0.0)],
    "reordering": [("wifi", "west", 0.0)],
    "policing": [("lte", "south", 0.0)],
    "bufferbloat": [("Wi-Fi", "west", 0.0)],
    # two overlapping sessions: flows starting after the second began take it (3G, east)
    "mobile_mixed": [("lte", "south", 0.0), ("umts", "east", 0.2)],
}
LAB_CLIENT = {4: "198.18.1.2", 6: "fd00:7473:1::2"}

# Fixed records for tests with synthetic flows (2024-01-15, UTC).
SYNTHETIC = [
    # client_ip, client_port, start, end, place, network type
    ("198.18.1.20", "", "2024-01-15T10:00:00Z", "2024-01-15T11:00:00Z", "central", "lte"),
    ("198.18.1.20", "40000", "2024-01-15T10:00:00Z", "2024-01-15T11:00:00Z", "east", "edge"),
    ("198.18.1.130", "", "2024-01-15T10:00:00Z", "2024-01-15T10:30:00Z", "east", "3g"),
    ("198.18.1.130", "", "2024-01-15T10:15:00Z", "2024-01-15T11:00:00Z", "west", "wifi"),
    ("198.18.1.170", "", "2024-01-15T10:00:00Z", "2024-01-15T11:00:00Z", "west", "wifi"),
    ("fd00:7473:1::105", "", "2024-01-15T10:00:00Z", "2024-01-15T11:00:00Z", "south", "lte"),
    ("fd00:7473:1:0:8000::9", "", "2024-01-15T10:00:00Z", "2024-01-15T11:00:00Z", "south", "lte"),
    ("198.18.1.200", "", "2024-01-15T12:00:00Z", "2024-01-15T13:00:00Z", "central", "lte"),
]


def pcap_time_range(path: Path) -> tuple[int, int, int]:
    """(first, last) timestamps in ns of the TCP packets of a classic pcap file (micro- or
    nanosecond, either byte order; Ethernet or raw IP), and their IP version."""
    data = path.read_bytes()
    formats = {
        b"\xd4\xc3\xb2\xa1": ("<", 1000),
        b"\xa1\xb2\xc3\xd4": (">", 1000),
        b"\x4d\x3c\xb2\xa1": ("<", 1),
        b"\xa1\xb2\x3c\x4d": (">", 1),
    }
    if data[:4] not in formats:
        raise SystemExit(f"{path}: not a classic pcap file")
    order, scale = formats[data[:4]]
    linktype = struct.unpack(order + "I", data[20:24])[0]
    pos, first, last, version = 24, None, None, None
    while pos + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(order + "IIII", data[pos : pos + 16])
        frame = data[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        ip = frame[14:] if linktype == 1 else frame  # skip the MLD/ND chatter: TCP only
        if len(ip) > 9 and ip[0] >> 4 == 4 and ip[9] == 6:
            v = 4
        elif len(ip) > 6 and ip[0] >> 4 == 6 and ip[6] == 6:
            v = 6
        else:
            continue
        ts = sec * 1_000_000_000 + frac * scale
        first = ts if first is None else min(first, ts)
        last = ts if last is None else max(last, ts)
        version = version or v
    if first is None:
        raise SystemExit(f"{path}: no TCP packets")
    return first, last, version


def iso(ns: int) -> str:
    t = dt.datetime.fromtimestamp(ns // 1_000_000 / 1000, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def render(rows: list[list[str]], header: list[str], comment: str) -> str:
    buf = io.StringIO()
    for line in comment.strip().splitlines():
        buf.write(f"# {line}\n")
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def build(samples: Path) -> dict[str, str]:
    import h3

    files = {}
    files["prefixes.csv"] = render(
        [[p, c, a, note] for p, c, a, note in PREFIXES],
        ["prefix", "carrier", "asn", "comment"],
        "Synthetic IP-prefix -> carrier table over the lab's client ranges (not real carriers).\n"
        "Written by scripts/make-enrichment-fixture.py; longest prefix wins on overlaps.",
    )

    rows = []
    for name, plan in sorted(SAMPLE_SESSIONS.items()):
        pcap = samples / f"{name}.pcap"
        if not pcap.is_file():
            raise SystemExit(f"{pcap}: missing (run from a checkout with the bundled samples)")
        first, last, version = pcap_time_range(pcap)
        start_ms = first // 1_000_000  # floor to the millisecond
        end_ms = -(-last // 1_000_000)  # ceil
        for nettype, place, frac in plan:
            s = start_ms + int((end_ms - start_ms) * frac)
            lat, lng = PLACES[place] if place else ("", "")
            rows.append([LAB_CLIENT[version], "", iso(s * 1_000_000), iso(end_ms * 1_000_000), str(lat), str(lng), nettype, f"sample {name}"])
    for ip, port, start, end, place, nettype in SYNTHETIC:
        lat, lng = PLACES[place]
        rows.append([ip, port, start, end, str(lat), str(lng), nettype, "synthetic"])
    files["sessions.csv"] = render(
        rows,
        ["client_ip", "client_port", "start", "end", "lat", "lng", "network_type", "note"],
        "Synthetic app-telemetry session records (written by scripts/make-enrichment-fixture.py).\n"
        "Samples without a session here (clean, request_loss) are deliberate: their flows stay unknown.",
    )

    regions = sorted(
        (h3.cell_to_parent(h3.latlng_to_cell(*PLACES[place], 7), 6), region) for place, region in REGIONS.items()
    )
    if len({cell for cell, _ in regions}) != len(regions):
        raise SystemExit("two regions share a resolution-6 cell; move the places apart")
    files["regions.csv"] = render(
        [list(r) for r in regions],
        ["h3_cell", "region"],
        "Region names for H3 cells (resolution 6 here; any resolution works).\n"
        "Written by scripts/make-enrichment-fixture.py; the 'west' place is deliberately unmapped.",
    )
    cells = {place: h3.latlng_to_cell(*ll, 7) for place, ll in PLACES.items()}
    if len(set(cells.values())) != len(cells):
        raise SystemExit("two places share a resolution-7 hexagon")
    return files


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=Path, default=ROOT / "samples")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "enrichment")
    ap.add_argument("--check", action="store_true", help="exit 1 when the committed files differ from what would be written")
    args = ap.parse_args(argv)
    files = build(args.samples)
    if args.check:
        stale = [n for n, text in files.items() if not (args.out / n).is_file() or (args.out / n).read_text() != text]
        if stale:
            print(f"stale: {', '.join(stale)} (run scripts/make-enrichment-fixture.py)", file=sys.stderr)
            return 1
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (args.out / name).write_text(text)
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The demo dataset of the mart, dashboard and report tests: the bundled samples analysed with the
enrichment fixture, and a synthetic previous week for week-over-week checks."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
FIXTURE = ROOT / "tests" / "fixtures" / "enrichment"
WEEK, PREV = "2026-W47", "2026-W46"       # the samples' week and the one before
DROPPED = "Fabrikam Wireless"              # a carrier left out of the synthetic previous week
FLOW_ID_XOR = 0x0F0F0F0F0F0F0F0F


def enrichment():
    from tailscope.jobs.enrichment.enrich import EnrichmentOptions

    return EnrichmentOptions(prefixes=[FIXTURE / "prefixes.csv"], sessions=[FIXTURE / "sessions.csv"],
                             regions=FIXTURE / "regions.csv", site="lab")


def analyze_demo(out: Path, *inputs: str) -> Path:
    """The samples (and any other inputs) through the local engine with the enrichment fixture."""
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    analyze([*inputs, str(SAMPLES)], out, AnalyzeOptions(progress=False, enrichment=enrichment()))
    return out


def add_previous_week(ds: Path) -> None:
    """Add a synthetic previous week to a dataset: its flows and queries 7 days earlier, under new
    flow ids, with every latency (and setup, time to first byte, time budget part) halved, and
    without DROPPED."""
    week = pa.scalar(dt.timedelta(days=7), pa.duration("ns"))
    for name in ("flows", "queries"):
        for part in sorted((ds / name).glob("*/*.parquet")):
            if part.name.startswith("part-shifted-"):
                continue
            t = pq.read_table(part, partitioning=None)
            t = t.filter(pc.not_equal(t["carrier"], DROPPED))
            cols = {"flow_id": pc.bit_wise_xor(t["flow_id"], pa.scalar(FLOW_ID_XOR, pa.int64()))}
            for c in ("start", "end", "first_byte", "last_byte"):
                if c in t.column_names:
                    cols[c] = pc.subtract(t[c], week)
            for c in ("latency_ns", "setup_ns", "ttfb_ns"):
                if c in t.column_names:
                    cols[c] = pc.divide(t[c], pa.scalar(2, pa.int64()))
            # the time budget halves with the latency and still adds up to it: the parts halved, the
            # latency their sum (less the setup a first query's budget includes)
            parts = [c for c in t.column_names if c.startswith("budget_")]
            if parts:
                for c in parts:
                    cols[c] = pc.divide(t[c], pa.scalar(2, pa.int64()))
                total = cols[parts[0]]
                for c in parts[1:]:
                    total = pc.add(total, cols[c])
                cols["latency_ns"] = pc.subtract(total, pc.fill_null(cols["setup_ns"], 0))
            for c, v in cols.items():
                t = t.set_column(t.column_names.index(c), c, v.cast(t.schema.field(c).type))
            day = part.parent.name.split("=", 1)[1]
            prev_day = (dt.date.fromisoformat(day) - dt.timedelta(days=7)).isoformat()
            out = ds / name / f"date={prev_day}"
            out.mkdir(exist_ok=True)
            pq.write_table(t, out / f"part-shifted-{part.stem.split('-')[-1]}.parquet")

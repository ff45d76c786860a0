"""What a run's enrichment reads (docs/enrichment.md), and the summary of a run without sources.

Kept apart from jobs/enrichment/enrich.py, which does the work over Arrow batches: a run without enrichment
sources never loads that module (nor pyarrow); the native core appends the unknown columns itself
(signatures/src/enrichment.rs).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_H3_RES = 7


class EnrichmentError(ValueError):
    """A source that cannot be used (missing file, bad row); the message names file and line."""


@dataclass
class EnrichmentOptions:
    """Where the enrichment comes from (all optional: without sources every value is unknown)."""

    prefixes: list[Path] = field(default_factory=list)  # IP-prefix → carrier/ASN CSV tables
    asn_db: Path | None = None  # MaxMind-format ASN (or ISP) database, .mmdb
    sessions: list[Path] = field(default_factory=list)  # app-telemetry session records (Parquet/CSV; globs ok)
    regions: Path | None = None  # CSV h3_cell,region (cells at any resolution)
    h3_res: int = DEFAULT_H3_RES
    site: str | None = None  # site of inputs that do not name one in an agent manifest

    def __post_init__(self) -> None:
        if isinstance(self.prefixes, (str, Path)):
            self.prefixes = [self.prefixes]
        if isinstance(self.sessions, (str, Path)):
            self.sessions = [self.sessions]
        self.prefixes = [Path(p) for p in self.prefixes]
        self.sessions = [Path(p) for p in self.sessions]
        self.asn_db = Path(self.asn_db) if self.asn_db else None
        self.regions = Path(self.regions) if self.regions else None
        if not isinstance(self.h3_res, int) or not 0 <= self.h3_res <= 15:
            raise EnrichmentError(f"h3 resolution must be an integer 0..15, got {self.h3_res!r}")


def default_site(options: EnrichmentOptions | None) -> str | None:
    """--site: the site of captures whose agent manifest names none."""
    return ((options.site if options else None) or "").strip() or None


def capture_site(options: EnrichmentOptions | None, manifest_site: str | None) -> str | None:
    """A capture's site: its agent manifest's, else --site."""
    return str(manifest_site or "").strip() or default_site(options)


def has_sources(options: EnrichmentOptions | None) -> bool:
    """Whether any source can fill a column (otherwise every value but the site is unknown)."""
    o = options or EnrichmentOptions()
    return bool(o.prefixes or o.asn_db or o.sessions or o.regions)


def unenriched_summary(options: EnrichmentOptions | None, flows: int, queries: int, flows_without_site: int) -> dict:
    """The manifest's enrichment summary of a run without sources (the keys of
    jobs/enrichment/enrich.EnrichmentContext.summary): every flow unknown but for its capture's site."""
    o = options or EnrichmentOptions()
    return {
        "sources": {"h3_res": o.h3_res, "site": default_site(o)},
        "flows": flows,
        "flows_carrier_from_prefixes": 0,
        "flows_carrier_from_asn_db": 0,
        "flows_carrier_unknown": flows,
        "flows_without_session": flows,
        "flows_network_type_unknown": flows,
        "flows_h3_unknown": flows,
        "flows_region_unknown": flows,
        "flows_site_unknown": flows_without_site,
        "queries": queries,
        "queries_flow_not_found": 0,
    }

"""The Python API over the native core: stream Arrow record batches out of captures.

    import tailscope.api as ts
    for table, batch in ts.batches(["trace.pcap.gz"]):
        ...                                   # table is packets | flows | queries | events

Batches come from Rust through the Arrow C data interface (no copy); decoding runs without the
GIL, so other Python threads keep running. For whole runs with Parquet output and manifests use
`tailscope.jobs.run.local.analyze` (what `tailscope analyze` runs).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pyarrow as pa

from tailscope import _native

CaptureFileError = _native.CaptureFileError
DEFAULTS = _native.defaults()  # the session defaults (signatures/src/defaults.rs)


def batches(
    paths: Iterable[str | Path],
    capture_id: str = "api",
    *,
    tcp_idle_timeout_s: float = DEFAULTS["tcp_idle_timeout_s"],
    udp_idle_timeout_s: float = DEFAULTS["udp_idle_timeout_s"],
    max_flows: int = DEFAULTS["max_flows"],
    batch_rows: int = DEFAULTS["batch_rows"],
    keylogs: Iterable[str | Path] = (),
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """Decode the files in the order given, as one capture (one flow table), yielding
    (table name, record batch). Raises CaptureFileError for a file that is not a capture; a file
    damaged midway yields what came before the damage (see `file_stats` for the error).
    `keylogs`: SSLKEYLOGFILE paths whose secrets decrypt QUIC connections (docs/signatures.md)."""
    session = _native.Session(
        capture_id,
        tcp_idle_timeout_s=tcp_idle_timeout_s,
        udp_idle_timeout_s=udp_idle_timeout_s,
        max_flows=max_flows,
        batch_rows=batch_rows,
    )
    for k in keylogs:
        session.add_keylog(str(k))
    def tables_only(out):
        # query_flows serves enrichment, which this API does not do (jobs/enrichment/enrich.py)
        return ((name, b) for name, b in out if name != "query_flows")

    for path in paths:
        cursor = session.open(str(path), str(path))
        while not cursor.done:
            yield from tables_only(session.step(cursor))
        yield from tables_only(session.flush())
    yield from tables_only(session.finish())


def tables(paths: Iterable[str | Path], capture_id: str = "api", **options) -> dict[str, pa.Table]:
    """All output of `batches` gathered into one table per name (for small inputs)."""
    schemas = {
        "packets": _native.packet_schema(),
        "flows": _native.flow_schema(),
        "queries": _native.query_schema(),
        "events": _native.event_schema(),
    }
    out: dict[str, list[pa.RecordBatch]] = {name: [] for name in schemas}
    for name, batch in batches(paths, capture_id, **options):
        out[name].append(batch)
    return {name: pa.Table.from_batches(bs, schema=schemas[name]) for name, bs in out.items()}

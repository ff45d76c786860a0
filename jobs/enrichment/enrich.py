"""Enrichment of the flows and queries tables: carrier, ASN, network type, H3 cell, region, site.

A Python step over Arrow batches between the native core and the Parquet writer. The rules
(sources, precedence, unknowns) are explained in docs/enrichment.md; in short:

- **carrier, asn**: the client address is looked up in the IP-prefix CSV tables (longest prefix
  wins; among equal prefixes the one listed last), then, for addresses no CSV prefix covers, in a
  MaxMind-format ASN database (GeoLite2-ASN / GeoIP2-ISP) read with the ``maxminddb`` reader.
- **network_type, h3_*, region**: the client's app-telemetry session records, joined by client
  address (and client port when the record names one) and time: the flow's start must lie within
  ``[start, end]`` of the session; of several such sessions a port-specific one wins, then the one
  that started last (latest start before the flow's start), then the one listed last.
- **site**: the edge site of the capture (from the agent's manifest when the input has one, else
  the ``--site`` option).

Nothing is dropped: a flow without a match gets the string ``"unknown"`` (``asn`` and the cell's
coordinates null), and every unknown is counted in :meth:`EnrichmentContext.summary`.

Typical use (the local engine)::

    ctx = open_enrichment(EnrichmentOptions(prefixes=[Path("prefixes.csv")], sessions=[...]))
    for table, batch in session.step(cursor):
        if (out := ctx.apply(table, batch)) is not None:  # None: query_flows, consumed here
            writer.write(table, out)
    manifest["totals"]["enrichment"] = ctx.summary()
"""
from __future__ import annotations

import collections
import csv
import glob
import io
import ipaddress
import json
import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tailscope import _native
from tailscope.jobs.enrichment.enrich_options import DEFAULT_H3_RES, EnrichmentError, EnrichmentOptions, default_site  # noqa: F401 - this module's API too

UNKNOWN = _native.ENRICHMENT_UNKNOWN

#: The columns enrichment adds to flows and queries, in this order (signatures/src/enrichment.rs).
ENRICHMENT_FIELDS = list(_native.enrichment_schema())
ENRICHMENT_COLUMNS = [f.name for f in ENRICHMENT_FIELDS]

# Canonical network types and the spellings app telemetry uses for them (case-insensitive).
NETWORK_TYPE_ALIASES = {
    "Wi-Fi": ["wifi", "wi-fi", "wi fi", "wlan", "802.11"],
    "5G": ["5g", "nr", "5g-nr", "5g nr", "nr-sa", "nr-nsa"],
    "LTE": ["lte", "4g", "4g-lte", "lte-a", "lte advanced", "lte-advanced"],
    "3G": ["3g", "umts", "hspa", "hspa+", "hsdpa", "hsupa", "wcdma", "evdo", "ev-do", "cdma2000", "td-scdma", "ehrpd"],
    "2G": ["2g", "edge", "gprs", "gsm", "cdma", "1xrtt", "iden"],
    "wired": ["ethernet", "wired", "lan"],
}
_NETWORK_TYPE = {alias: canon for canon, aliases in NETWORK_TYPE_ALIASES.items() for alias in aliases}
_UNKNOWN_SPELLINGS = {"", "unknown", "none", "null", "n/a", "na", "-", "?"}

# Accepted column names in session records (first one found wins).
SESSION_COLUMNS = {
    "client_ip": ["client_ip", "ip", "client_addr", "client_address", "src_ip"],
    "client_port": ["client_port", "port", "src_port"],
    "start": ["start", "session_start", "start_time", "started_at", "from"],
    "end": ["end", "session_end", "end_time", "ended_at", "to"],
    "lat": ["lat", "latitude"],
    "lng": ["lng", "lon", "long", "longitude"],
    "network_type": ["network_type", "net_type", "network", "connection_type", "radio"],
    "region": ["region", "city", "market"],
}


# ----------------------------------------------------------------------------------------------
# Addresses as 128-bit integers (IPv4 mapped into ::ffff:0:0/96), split into two uint64 halves
# for Arrow and recombined as DuckDB UHUGEINT.

_V4_MAPPED = 0xFFFF << 32
_MASK64 = (1 << 64) - 1
_UHUGE = "((CAST({0}_hi AS UHUGEINT) << 64) | CAST({0}_lo AS UHUGEINT))"


def address_key(text: str) -> int | None:
    """The address as a 128-bit integer (IPv4 in ::ffff:0:0/96), or None when not an address."""
    try:
        addr = ipaddress.ip_address(str(text).strip())
    except ValueError:
        return None
    if addr.version == 4:
        return _V4_MAPPED | int(addr)
    return int(addr)


def prefix_range(text: str) -> tuple[int, int, int]:
    """(first, last, prefix length) of a prefix in the 128-bit space; IPv4 lengths are +96.
    Host bits set are tolerated (198.18.1.5/24 means 198.18.1.0/24)."""
    net = ipaddress.ip_network(str(text).strip(), strict=False)
    if net.version == 4:
        first = _V4_MAPPED | int(net.network_address)
        return first, first + net.num_addresses - 1, net.prefixlen + 96
    return int(net.network_address), int(net.broadcast_address), net.prefixlen


def _halves(values: list[int | None]) -> tuple[pa.Array, pa.Array]:
    hi = pa.array([None if v is None else v >> 64 for v in values], pa.uint64())
    lo = pa.array([None if v is None else v & _MASK64 for v in values], pa.uint64())
    return hi, lo


def normalize_network_type(value) -> str:
    if value is None:
        return UNKNOWN
    text = str(value).strip()
    if text.lower() in _UNKNOWN_SPELLINGS:
        return UNKNOWN
    return _NETWORK_TYPE.get(text.lower(), text)


def _arrow(rel) -> pa.Table:
    """A DuckDB relation as an Arrow table (duckdb 1.x and 2.x)."""
    if hasattr(rel, "to_arrow_table"):
        return rel.to_arrow_table()
    out = rel.arrow()
    return out.read_all() if hasattr(out, "read_all") else out


# ----------------------------------------------------------------------------------------------
# Sources


def _read_csv_rows(path: Path) -> Iterable[tuple[int, dict]]:
    """Rows of a CSV file with a header; lines starting with # and blank lines are skipped."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise EnrichmentError(f"{path}: {exc.strerror or exc}") from exc
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise EnrichmentError(f"{path}: empty (a header line is needed)")
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in lines)))
    reader.fieldnames = [(f or "").strip().lower() for f in reader.fieldnames or []]
    for (lineno, _), row in zip(lines[1:], reader):
        yield lineno, {k: (v.strip() if isinstance(v, str) else v) for k, v in row.items() if k}


def _parse_asn(value, where: str) -> int | None:
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip().upper()
    text = text.removeprefix("AS")
    try:
        asn = int(text)
    except ValueError:
        raise EnrichmentError(f"{where}: asn {value!r} is not a number (e.g. 64500 or AS64500)") from None
    if not 0 <= asn < 1 << 32:
        raise EnrichmentError(f"{where}: asn {asn} out of range")
    return asn


def load_prefix_tables(paths: list[Path]) -> tuple[pa.Table, dict]:
    """Prefix CSVs → Arrow table (first/last as uint64 halves, plen, carrier, asn, ord)."""
    firsts, lasts, plens, carriers, asns, ords = [], [], [], [], [], []
    seen: dict[tuple[int, int], int] = {}
    duplicates = 0
    for path in paths:
        columns_checked = False
        for lineno, row in _read_csv_rows(path):
            where = f"{path}:{lineno}"
            if not columns_checked:
                if "prefix" not in row or ("carrier" not in row and "asn" not in row):
                    raise EnrichmentError(f"{path}: needs a header with columns prefix,carrier[,asn] (found {sorted(row)})")
                columns_checked = True
            try:
                first, last, plen = prefix_range(row["prefix"])
            except ValueError as exc:
                raise EnrichmentError(f"{where}: bad prefix {row.get('prefix')!r}: {exc}") from None
            asn = _parse_asn(row.get("asn"), where)
            carrier = (row.get("carrier") or "").strip()
            if carrier.lower() in _UNKNOWN_SPELLINGS:
                carrier = f"AS{asn}" if asn is not None else ""
            if not carrier:
                raise EnrichmentError(f"{where}: neither a carrier name nor an asn")
            if (first, plen) in seen:
                duplicates += 1
            seen[(first, plen)] = len(ords)
            firsts.append(first)
            lasts.append(last)
            plens.append(plen)
            carriers.append(carrier)
            asns.append(asn)
            ords.append(len(ords))
    f_hi, f_lo = _halves(firsts)
    l_hi, l_lo = _halves(lasts)
    table = pa.table(
        {
            "first_hi": f_hi,
            "first_lo": f_lo,
            "last_hi": l_hi,
            "last_lo": l_lo,
            "plen": pa.array(plens, pa.int32()),
            "carrier": pa.array(carriers, pa.string()),
            "asn": pa.array(asns, pa.int64()),
            "ord": pa.array(ords, pa.int64()),
        }
    )
    return table, {"prefixes": len(ords), "prefixes_duplicate": duplicates}


def load_regions(path: Path) -> dict[str, str]:
    """CSV h3_cell,region → {cell: region}; cells may be of any resolution."""
    import h3

    regions: dict[str, str] = {}
    for lineno, row in _read_csv_rows(path):
        cell = (row.get("h3_cell") or row.get("cell") or row.get("hexagon") or "").strip().lower()
        region = (row.get("region") or "").strip()
        if not cell or not region:
            raise EnrichmentError(f"{path}:{lineno}: needs columns h3_cell,region")
        if not h3.is_valid_cell(cell):
            raise EnrichmentError(f"{path}:{lineno}: {cell!r} is not an H3 cell")
        regions[cell] = region
    return regions


def _expand(paths: list[Path]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        text = str(p)
        if any(ch in text for ch in "*?["):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                raise EnrichmentError(f"{text}: no file matches")
            out.extend(Path(m) for m in matches)
        elif p.is_dir():
            found = sorted(q for q in p.rglob("*") if q.is_file() and _session_format(q))
            if not found:
                raise EnrichmentError(f"{p}: no .parquet or .csv files inside")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise EnrichmentError(f"{p}: no such file")
    return out


def _session_format(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    for comp in (".gz", ".zst"):  # DuckDB decompresses CSV by extension
        name = name.removesuffix(comp)
    if name.endswith((".csv", ".tsv", ".txt")):
        return "csv"
    return None


def _sql_str(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _time_expr(col: str, dtype: str) -> str:
    """SQL turning a session time column into epoch nanoseconds (UTC)."""
    q = f'"{col}"'
    numeric = (
        "CASE WHEN abs({v}) < 1e11 THEN {v} * 1e9 WHEN abs({v}) < 1e14 THEN {v} * 1e6 "
        "WHEN abs({v}) < 1e17 THEN {v} * 1e3 ELSE {v} END"
    )
    t = dtype.upper()
    if t.startswith("TIMESTAMP") or t == "DATE":
        return f"epoch_ns(CAST({q} AS TIMESTAMPTZ))" if not t.startswith("TIMESTAMP_NS") else f"epoch_ns({q})"
    if any(t.startswith(k) for k in ("BIGINT", "INTEGER", "HUGEINT", "DOUBLE", "FLOAT", "DECIMAL", "UBIGINT", "UINTEGER", "SMALLINT")):
        v = f"CAST({q} AS DOUBLE)"
        return f"CAST({numeric.format(v=v)} AS BIGINT)"
    # text: an ISO-8601 timestamp (offset or Z; none means UTC), else epoch seconds/ms/µs/ns
    v = f"TRY_CAST({q} AS DOUBLE)"
    return f"COALESCE(epoch_ns(TRY_CAST({q} AS TIMESTAMPTZ)), CAST({numeric.format(v=v)} AS BIGINT))"


def _session_column(path: Path, types: dict, key: str, required: bool = False) -> tuple[str, str] | None:
    """(name, DuckDB type) of the first accepted spelling of ``key`` among the file's columns."""
    for alias in SESSION_COLUMNS[key]:
        if alias in types:
            return types[alias]
    if required:
        raise EnrichmentError(
            f"{path}: session records need a {key} column (one of {', '.join(SESSION_COLUMNS[key])}); "
            f"found {', '.join(n for n, _ in types.values())}"
        )
    return None


def load_sessions(con, paths: list[Path]) -> dict:
    """Session records → DuckDB table ``sessions`` (one row per usable record). Returns counts."""
    files = _expand(paths)
    con.execute(
        "CREATE OR REPLACE TABLE sessions_raw (sid BIGINT, ip VARCHAR, port VARCHAR, s_start BIGINT, s_end BIGINT, "
        "lat DOUBLE, lng DOUBLE, network_type VARCHAR, region VARCHAR)"
    )
    offset = 0
    for path in files:
        fmt = _session_format(path)
        if fmt == "parquet":
            src = f"read_parquet({_sql_str(path)})"
        elif fmt == "csv":
            src = f"read_csv({_sql_str(path)}, header=true, all_varchar=true, comment='#')"
        else:
            raise EnrichmentError(f"{path}: session records must be .parquet or .csv")
        try:
            described = con.execute(f"DESCRIBE SELECT * FROM {src}").fetchall()
        except Exception as exc:  # noqa: BLE001 - duckdb raises several error classes
            raise EnrichmentError(f"{path}: cannot read: {exc}") from None
        types = {name.lower(): (name, dtype) for name, dtype, *_ in described}
        ip = _session_column(path, types, "client_ip", True)
        start, end = _session_column(path, types, "start", True), _session_column(path, types, "end", True)
        port, lat, lng = (_session_column(path, types, k) for k in ("client_port", "lat", "lng"))
        nettype, region = _session_column(path, types, "network_type"), _session_column(path, types, "region")

        def text(c):
            return f'CAST("{c[0]}" AS VARCHAR)' if c else "NULL"

        def num(c):
            return f'TRY_CAST("{c[0]}" AS DOUBLE)' if c else "NULL"

        con.execute(
            f"""INSERT INTO sessions_raw
            SELECT {offset} + row_number() OVER () AS sid, {text(ip)}, {text(port)},
                   {_time_expr(*start)}, {_time_expr(*end)}, {num(lat)}, {num(lng)}, {text(nettype)}, {text(region)}
            FROM {src}"""
        )
        offset = con.execute("SELECT coalesce(max(sid), 0) FROM sessions_raw").fetchone()[0]

    # Addresses are compared as 128-bit integers, so any spelling of an address matches.
    raw_ips = [r[0] for r in con.execute("SELECT DISTINCT ip FROM sessions_raw WHERE ip IS NOT NULL").fetchall()]
    keys = [address_key(ip) for ip in raw_ips]
    hi, lo = _halves(keys)
    ipmap = pa.table({"ip": pa.array(raw_ips, pa.string()), "k_hi": hi, "k_lo": lo})
    con.register("session_ipmap", ipmap)
    con.execute(
        f"""CREATE OR REPLACE TABLE sessions_checked AS
        SELECT r.*, {_UHUGE.format('m.k')} AS k, TRY_CAST(r.port AS INTEGER) AS port_int,
               CASE WHEN r.ip IS NULL OR m.k_hi IS NULL THEN 'bad_client_ip'
                    WHEN r.port IS NOT NULL AND trim(r.port) <> '' AND TRY_CAST(r.port AS INTEGER) IS NULL THEN 'bad_client_port'
                    WHEN r.s_start IS NULL THEN 'bad_start'
                    WHEN r.s_end IS NULL THEN 'bad_end'
                    WHEN r.s_end < r.s_start THEN 'end_before_start'
                    ELSE NULL END AS reject
        FROM sessions_raw r LEFT JOIN session_ipmap m ON m.ip = r.ip"""
    )
    con.unregister("session_ipmap")
    con.execute(
        """CREATE OR REPLACE TABLE sessions AS
        SELECT sid, k, port_int AS port, s_start, s_end,
               CASE WHEN lat BETWEEN -90 AND 90 AND lng BETWEEN -180 AND 180 THEN lat END AS lat,
               CASE WHEN lat BETWEEN -90 AND 90 AND lng BETWEEN -180 AND 180 THEN lng END AS lng,
               (lat IS NOT NULL OR lng IS NOT NULL) AND NOT coalesce(lat BETWEEN -90 AND 90 AND lng BETWEEN -180 AND 180, false) AS bad_location,
               network_type, region
        FROM sessions_checked WHERE reject IS NULL ORDER BY k, s_start"""
    )
    rejected = dict(con.execute("SELECT reject, count(*) FROM sessions_checked WHERE reject IS NOT NULL GROUP BY 1 ORDER BY 1").fetchall())
    loaded, bad_loc = con.execute("SELECT count(*), count(*) FILTER (WHERE bad_location) FROM sessions").fetchone()
    con.execute("DROP TABLE sessions_raw")
    con.execute("DROP TABLE sessions_checked")
    return {
        "session_files": [str(p) for p in files],
        "sessions": loaded,
        "sessions_rejected": sum(rejected.values()),
        "sessions_rejected_by_reason": rejected,
        "sessions_bad_location": bad_loc,
    }


# ----------------------------------------------------------------------------------------------
# The context


class EnrichmentContext:
    """Loaded sources, caches and counters for one run. Build with :func:`open_enrichment`."""

    def __init__(self, options: EnrichmentOptions):
        self.options = options
        self.h3_res = options.h3_res
        self.default_site = default_site(options)
        self._sites: dict[str, str] = {}
        self._con = None
        self._has_prefixes = False
        self._has_sessions = False
        self._mmdb = None
        self._mmdb_cache: dict[str, tuple[str | None, int | None]] = {}
        self._regions: dict[str, str] = {}
        self._region_res: list[int] = []
        self._cells: dict[str, tuple] = {}
        self._recent: collections.deque[pa.Table] = collections.deque(maxlen=4)
        self.sources: dict = {}
        self.counts = collections.Counter()

    # -- setup
    def _duckdb(self):
        if self._con is None:
            import duckdb

            self._con = duckdb.connect()
            self._con.execute("SET TimeZone='UTC'")
        return self._con

    def load(self) -> EnrichmentContext:
        o = self.options
        if o.prefixes:
            for p in o.prefixes:
                if not p.is_file():
                    raise EnrichmentError(f"{p}: no such file")
            table, counts = load_prefix_tables(o.prefixes)
            con = self._duckdb()
            con.register("prefix_arrow", table)
            con.execute(
                f"""CREATE OR REPLACE TABLE prefixes AS
                SELECT {_UHUGE.format('first')} AS first, {_UHUGE.format('last')} AS last, plen, carrier, asn, ord
                FROM prefix_arrow ORDER BY first"""
            )
            con.unregister("prefix_arrow")
            self._has_prefixes = True
            self.sources["prefix_files"] = [str(p) for p in o.prefixes]
            self.sources.update(counts)
        if o.asn_db:
            if not o.asn_db.is_file():
                raise EnrichmentError(f"{o.asn_db}: no such file")
            import maxminddb

            try:
                self._mmdb = maxminddb.open_database(str(o.asn_db))
            except (OSError, ValueError, RuntimeError) as exc:  # maxminddb.InvalidDatabaseError is a RuntimeError
                raise EnrichmentError(f"{o.asn_db}: not a MaxMind database: {exc}") from None
            meta = self._mmdb.metadata()
            self.sources["asn_db"] = str(o.asn_db)
            self.sources["asn_db_type"] = meta.database_type
            self.sources["asn_db_build_epoch"] = meta.build_epoch
        if o.sessions:
            self.sources.update(load_sessions(self._duckdb(), o.sessions))
            self._has_sessions = True
        if o.regions:
            if not o.regions.is_file():
                raise EnrichmentError(f"{o.regions}: no such file")
            self._regions = load_regions(o.regions)
            import h3

            self._region_res = sorted({h3.get_resolution(c) for c in self._regions}, reverse=True)
            self.sources["regions_file"] = str(o.regions)
            self.sources["regions"] = len(self._regions)
        self.sources["h3_res"] = self.h3_res
        self.sources["site"] = self.default_site
        return self

    def set_capture_site(self, capture_id: str, site: str | None) -> None:
        """The site of a capture, from its agent manifest; captures without one get --site."""
        if site and str(site).strip():
            self._sites[capture_id] = str(site).strip()

    def close(self) -> None:
        if self._mmdb is not None:
            self._mmdb.close()
            self._mmdb = None
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the engine's hook
    def apply(self, table: str, batch):
        """Enrich flows and queries; pass every other table through unchanged. ``query_flows``
        (the native core's open flows whose queries come next) is taken in and not returned
        (None): it is not a table of the dataset."""
        if table == "flows":
            return enrich_flows(batch, self)
        if table == "queries":
            return enrich_queries(batch, self)
        if table == "query_flows":
            self.note_open_flows(batch)
            return None
        return batch

    def note_open_flows(self, flows: Batch) -> None:
        """Enrichment for flows still open whose queries come before the flow's own row (a
        long-lived connection's exchanges): computed from the same columns ``enrich_flows`` reads,
        so a query gets what its flow will get, and remembered like a flows batch's. Not counted:
        the flow is counted once, when its row comes."""
        counts, self.counts = self.counts, collections.Counter()
        try:
            enrich_flows(flows, self)
        finally:
            self.counts = counts

    def summary(self) -> dict:
        """Counts for the run manifest: how many flows and queries stayed unknown, and why."""
        c = self.counts
        return {
            "sources": dict(self.sources),
            "flows": c["flows"],
            "flows_carrier_from_prefixes": c["carrier_prefixes"],
            "flows_carrier_from_asn_db": c["carrier_asn_db"],
            "flows_carrier_unknown": c["carrier_unknown"],
            "flows_without_session": c["no_session"],
            "flows_network_type_unknown": c["network_type_unknown"],
            "flows_h3_unknown": c["h3_unknown"],
            "flows_region_unknown": c["region_unknown"],
            "flows_site_unknown": c["site_unknown"],
            "queries": c["queries"],
            "queries_flow_not_found": c["queries_flow_not_found"],
        }

    # -- lookups
    def _mmdb_lookup(self, ip: str) -> tuple[str | None, int | None]:
        hit = self._mmdb_cache.get(ip)
        if hit is not None:
            return hit
        try:
            record, _plen = self._mmdb.get_with_prefix_len(ip)
        except ValueError:
            record = None
        carrier = asn = None
        if isinstance(record, dict):
            asn = record.get("autonomous_system_number")
            asn = int(asn) if isinstance(asn, int) else None
            carrier = record.get("isp") or record.get("autonomous_system_organization") or record.get("organization")
            if not carrier and asn is not None:
                carrier = f"AS{asn}"
        hit = (carrier or None, asn)
        if len(self._mmdb_cache) > 1_000_000:
            self._mmdb_cache.clear()
        self._mmdb_cache[ip] = hit
        return hit

    def _cell(self, lat: float, lng: float) -> tuple:
        """(cell, center lat, center lng, boundary GeoJSON, region by the regions map)."""
        import h3

        cell = h3.latlng_to_cell(lat, lng, self.h3_res)
        hit = self._cells.get(cell)
        if hit is None:
            clat, clng = h3.cell_to_latlng(cell)
            ring = [[round(x, 7), round(y, 7)] for y, x in h3.cell_to_boundary(cell)]  # GeoJSON is [lng, lat]
            ring.append(ring[0])
            geojson = json.dumps({"type": "Polygon", "coordinates": [ring]}, separators=(",", ":"))
            region = None
            for res in self._region_res:
                if res <= self.h3_res:
                    region = self._regions.get(h3.cell_to_parent(cell, res))
                    if region:
                        break
            hit = (cell, clat, clng, geojson, region)
            if len(self._cells) > 200_000:
                self._cells.clear()
            self._cells[cell] = hit
        return hit


def open_enrichment(options: EnrichmentOptions | None = None) -> EnrichmentContext:
    """Load the sources named in ``options`` (raises EnrichmentError naming a bad file/line)."""
    ctx = EnrichmentContext(options or EnrichmentOptions())
    try:
        return ctx.load()
    except BaseException:
        ctx.close()
        raise


# ----------------------------------------------------------------------------------------------
# The functions over Arrow batches

Batch = pa.RecordBatch | pa.Table


def _with_columns(batch: Batch, columns: dict[str, pa.Array]) -> Batch:
    """``batch`` without any earlier enrichment columns, plus ``columns`` (in ENRICHMENT_FIELDS order)."""
    keep = [i for i, f in enumerate(batch.schema) if f.name not in ENRICHMENT_COLUMNS]
    fields = [batch.schema.field(i) for i in keep] + ENRICHMENT_FIELDS
    arrays = [batch.column(i) for i in keep] + [columns[f.name] for f in ENRICHMENT_FIELDS]
    schema = pa.schema(fields, metadata=batch.schema.metadata)
    if isinstance(batch, pa.Table):
        return pa.Table.from_arrays([a if isinstance(a, pa.ChunkedArray) else pa.chunked_array([a], a.type) for a in arrays], schema=schema)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _plain(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def _unknown_columns(n: int, h3_res: int) -> dict[str, pa.Array]:
    b = _native.unknown_enrichment(n, h3_res)
    return {name: b.column(name) for name in b.schema.names}


def enrich_flows(flows: Batch, ctx: EnrichmentContext) -> Batch:
    """``flows`` with the enrichment columns added (row order and every row kept)."""
    n = flows.num_rows
    ctx.counts["flows"] += n
    if n == 0:
        return _with_columns(flows, _unknown_columns(0, ctx.h3_res))
    client_ip = _plain(flows.column("client_ip"))
    capture_id = _plain(flows.column("capture_id"))

    # site: per capture
    if ctx._sites:
        captures = pc.unique(capture_id)
        per_capture = [ctx._sites.get(c, ctx.default_site) if c is not None else ctx.default_site for c in captures.to_pylist()]
        site_arr = pa.array([s or UNKNOWN for s in per_capture], pa.string()).take(pc.index_in(capture_id, value_set=captures))
    else:
        site_arr = pa.array([ctx.default_site or UNKNOWN] * n, pa.string())

    # carrier/asn: per distinct client address
    uniq_arr = pc.unique(client_ip)
    uniq = uniq_arr.to_pylist()
    need_keys = ctx._has_prefixes or ctx._has_sessions or ctx._mmdb is not None
    keys = {ip: address_key(ip) if ip is not None else None for ip in uniq} if need_keys else {}
    by_ip: dict[str, tuple[str | None, int | None, str]] = {}
    con = ctx._con
    if ctx._has_prefixes and uniq:
        hi, lo = _halves([keys[ip] for ip in uniq])
        con.register("ips_arrow", pa.table({"ip": pa.array(uniq, pa.string()), "k_hi": hi, "k_lo": lo}))
        rows = con.execute(
            f"""SELECT i.ip, p.carrier, p.asn
            FROM (SELECT ip, {_UHUGE.format('k')} AS k FROM ips_arrow WHERE k_hi IS NOT NULL) i
            JOIN prefixes p ON i.k BETWEEN p.first AND p.last
            QUALIFY row_number() OVER (PARTITION BY i.ip ORDER BY p.plen DESC, p.ord DESC) = 1"""
        ).fetchall()
        con.unregister("ips_arrow")
        for ip, carrier, asn in rows:
            by_ip[ip] = (carrier, asn, "prefixes")
    if ctx._mmdb is not None:
        for ip in uniq:
            if ip is not None and ip not in by_ip and keys[ip] is not None:
                carrier, asn = ctx._mmdb_lookup(ip)
                if carrier or asn is not None:
                    by_ip[ip] = (carrier or f"AS{asn}", asn, "asn_db")
    # per distinct address, then taken for every row (row order kept)
    idx = pc.index_in(client_ip, value_set=uniq_arr)
    hits = [by_ip.get(ip) for ip in uniq]
    carrier_arr = pa.array([h[0] if h else UNKNOWN for h in hits], pa.string()).take(idx)
    asn_arr = pa.array([h[1] if h else None for h in hits], pa.int64()).take(idx)
    source_arr = pa.array([h[2] if h else "unknown" for h in hits], pa.string()).take(idx)
    for item in pc.value_counts(pc.fill_null(source_arr, "unknown")).to_pylist():
        ctx.counts["carrier_" + item["values"]] += item["counts"]
    carrier_arr = pc.fill_null(carrier_arr, UNKNOWN)  # a null client_ip

    # session: per flow (client address [+ port], start time)
    columns = _unknown_columns(n, ctx.h3_res)
    columns["carrier"] = carrier_arr
    columns["asn"] = asn_arr
    columns["site"] = site_arr
    if ctx._has_sessions:
        _join_sessions(flows, uniq, idx, keys, ctx, columns)
    else:
        ctx.counts["no_session"] += n
        ctx.counts["network_type_unknown"] += n
        ctx.counts["h3_unknown"] += n
        ctx.counts["region_unknown"] += n
    ctx.counts["site_unknown"] += pc.sum(pc.equal(columns["site"], UNKNOWN)).as_py() or 0

    out = _with_columns(flows, columns)
    # Remember this batch's enrichment for the queries of these flows (emitted right after).
    ctx._recent.append(
        pa.table({"flow_id": _plain(flows.column("flow_id")), **{name: columns[name] for name in ENRICHMENT_COLUMNS}})
    )
    return out


def _join_sessions(flows: Batch, uniq: list, idx: pa.Array, keys: dict, ctx: EnrichmentContext, columns: dict) -> None:
    n = flows.num_rows
    con = ctx._con
    u_hi, u_lo = _halves([keys.get(ip) for ip in uniq])
    hi, lo = u_hi.take(idx), u_lo.take(idx)
    port = _plain(flows.column("client_port")) if "client_port" in flows.schema.names else pa.nulls(n, pa.int32())
    start = pc.cast(_plain(flows.column("start")), pa.int64())
    con.register("fl_arrow", pa.table({"row": pa.array(range(n), pa.int64()), "k_hi": hi, "k_lo": lo, "port": pc.cast(port, pa.int32()), "t": start}))
    matched = con.execute(
        f"""SELECT f.row, s.lat, s.lng, s.network_type, s.region
        FROM (SELECT row, {_UHUGE.format('k')} AS k, port, t FROM fl_arrow WHERE k_hi IS NOT NULL) f
        JOIN sessions s ON s.k = f.k AND f.t BETWEEN s.s_start AND s.s_end AND (s.port IS NULL OR s.port = f.port)
        QUALIFY row_number() OVER (PARTITION BY f.row ORDER BY (s.port IS NOT NULL) DESC, s.s_start DESC, s.sid DESC) = 1"""
    ).fetchall()
    con.unregister("fl_arrow")
    nettype = [UNKNOWN] * n
    cell = [UNKNOWN] * n
    clat: list[float | None] = [None] * n
    clng: list[float | None] = [None] * n
    geo: list[str | None] = [None] * n
    region = [UNKNOWN] * n
    for row, lat, lng, nt, reg in matched:
        nettype[row] = normalize_network_type(nt)
        map_region = None
        if lat is not None and lng is not None:
            cell[row], clat[row], clng[row], geo[row], map_region = ctx._cell(lat, lng)
        reg = (reg or "").strip()
        region[row] = reg if reg and reg.lower() not in _UNKNOWN_SPELLINGS else (map_region or UNKNOWN)
    ctx.counts["no_session"] += n - len(matched)
    ctx.counts["network_type_unknown"] += sum(1 for v in nettype if v == UNKNOWN)
    ctx.counts["h3_unknown"] += sum(1 for v in cell if v == UNKNOWN)
    ctx.counts["region_unknown"] += sum(1 for v in region if v == UNKNOWN)
    columns["network_type"] = pa.array(nettype, pa.string())
    columns["h3_cell"] = pa.array(cell, pa.string())
    columns["h3_lat"] = pa.array(clat, pa.float64())
    columns["h3_lng"] = pa.array(clng, pa.float64())
    columns["h3_boundary_geojson"] = pa.array(geo, pa.string())
    columns["region"] = pa.array(region, pa.string())


def enrich_queries(queries: Batch, ctx: EnrichmentContext, flows: Batch | None = None) -> Batch:
    """``queries`` with the enrichment of their flow (by ``flow_id``).

    ``flows``: an enriched flows table to take it from; by default the flows most recently
    enriched with this context (the native core emits a drain's queries right after its flows).
    A query whose flow is not found gets unknowns and is counted (``queries_flow_not_found``)."""
    n = queries.num_rows
    ctx.counts["queries"] += n
    if flows is not None:
        lookup = pa.table({name: _plain(flows.column(name)) for name in ["flow_id", *ENRICHMENT_COLUMNS]})
    elif ctx._recent:
        lookup = pa.concat_tables(list(ctx._recent)[::-1])  # the newest first: index_in takes the first hit
    else:
        lookup = None
    if n == 0 or lookup is None or lookup.num_rows == 0:
        ctx.counts["queries_flow_not_found"] += n
        cols = _unknown_columns(n, ctx.h3_res)
        cols["site"] = pa.array([ctx.default_site or UNKNOWN] * n, pa.string())
        return _with_columns(queries, cols)
    idx = pc.index_in(_plain(queries.column("flow_id")), value_set=_plain(lookup.column("flow_id")))
    missing = idx.null_count
    ctx.counts["queries_flow_not_found"] += missing
    cols = {}
    for name in ENRICHMENT_COLUMNS:
        taken = _plain(lookup.column(name)).take(idx)
        if missing:
            if name in ("carrier", "network_type", "h3_cell", "region"):
                taken = pc.fill_null(taken, UNKNOWN)
            elif name == "site":
                taken = pc.fill_null(taken, ctx.default_site or UNKNOWN)
            elif name == "h3_res":
                taken = pc.fill_null(taken, ctx.h3_res)
        cols[name] = taken
    return _with_columns(queries, cols)


def enrichment_schema() -> pa.Schema:
    """The columns enrichment adds (for schema checks and docs)."""
    return pa.schema(ENRICHMENT_FIELDS)


def enriched_schema(schema: pa.Schema) -> pa.Schema:
    """A native flows/queries schema as the dataset stores it: with the enrichment columns
    (e.g. for an empty table of the right schema, or the documented-columns test)."""
    base = [f for f in schema if f.name not in ENRICHMENT_COLUMNS]
    return pa.schema(base + ENRICHMENT_FIELDS, metadata=schema.metadata)


def enrich_dataset(dataset: Path | str, options: EnrichmentOptions) -> dict:
    """Enrich (or re-enrich, e.g. when late telemetry arrived) the flows and queries part files of
    an existing dataset in place; each file is rewritten under a temporary name and renamed over
    the old one. Holds the flows' enrichment in memory to give each query its flow's.
    Returns the summary (as :meth:`EnrichmentContext.summary`)."""
    import pyarrow.parquet as pq

    dataset = Path(dataset)
    flow_parts = sorted((dataset / "flows").glob("*/part-*.parquet"))
    query_parts = sorted((dataset / "queries").glob("*/part-*.parquet"))
    with open_enrichment(options) as ctx:
        enriched = []

        def rewrite(part: Path, fn) -> None:
            table = fn(pq.read_table(part, partitioning=None))
            tmp = part.with_name(f".{part.name}.enrich.tmp")
            pq.write_table(table, tmp, compression="zstd", use_dictionary=True, write_statistics=True)
            os.replace(tmp, part)

        def flows_fn(t: pa.Table) -> pa.Table:
            out = enrich_flows(t, ctx)
            enriched.append(out.select(["flow_id", *ENRICHMENT_COLUMNS]))
            return out

        for part in flow_parts:
            rewrite(part, flows_fn)
        all_flows = pa.concat_tables(enriched) if enriched else None
        for part in query_parts:
            rewrite(part, lambda t: enrich_queries(t, ctx, flows=all_flows) if all_flows is not None else enrich_queries(t, ctx))
        return ctx.summary()

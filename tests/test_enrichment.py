"""Enrichment joins (jobs/enrichment/enrich.py, rules in docs/enrichment.md): longest prefix on overlaps,
gaps → "unknown", IPv6 prefixes, sessions by client address and time (overlaps: latest start),
explicit unknowns, and counts of what stayed unknown — no flow or query is ever dropped."""
from __future__ import annotations

import datetime as dt
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

h3 = pytest.importorskip("h3")

from support import corpus
from tailscope.jobs.enrichment.enrich import (
    ENRICHMENT_COLUMNS,
    EnrichmentError,
    EnrichmentOptions,
    enrich_flows,
    enrich_queries,
    enrichment_schema,
    open_enrichment,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "enrichment"
PREFIXES = FIXTURE / "prefixes.csv"
SESSIONS = FIXTURE / "sessions.csv"
REGIONS = FIXTURE / "regions.csv"

# the fixture's places (scripts/make-enrichment-fixture.py)
CENTRAL = h3.latlng_to_cell(-6.1960, 106.8320, 7)
SOUTH = h3.latlng_to_cell(-6.2440, 106.7990, 7)
EAST = h3.latlng_to_cell(-6.1580, 106.9050, 7)
WEST = h3.latlng_to_cell(-6.1480, 106.7350, 7)

FLOW_SCHEMA = pa.schema(
    [
        ("capture_id", pa.string()),
        ("flow_id", pa.int64()),
        ("client_ip", pa.string()),
        ("client_port", pa.uint16()),
        ("start", pa.timestamp("ns", tz="UTC")),
    ]
)


def ns(text: str) -> int:
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def flows(*rows, capture_id="cap") -> pa.RecordBatch:
    """rows: (client_ip, start ISO[, client_port]); flow_id = position + 1."""
    out = []
    for i, row in enumerate(rows):
        ip, start = row[0], row[1]
        port = row[2] if len(row) > 2 else 50000
        out.append({"capture_id": capture_id, "flow_id": i + 1, "client_ip": ip, "client_port": port, "start": ns(start)})
    return pa.RecordBatch.from_pylist(out, schema=FLOW_SCHEMA)


def col(batch, name):
    return batch.column(name).to_pylist()


@pytest.fixture
def ctx():
    c = open_enrichment(EnrichmentOptions(prefixes=[PREFIXES], sessions=[SESSIONS], regions=REGIONS, site="lab1"))
    yield c
    c.close()


T = "2024-01-15T10:05:00Z"  # inside the fixture's synthetic sessions


# --- prefixes -----------------------------------------------------------------------------------


def test_overlapping_prefixes_longest_wins(ctx):
    out = enrich_flows(flows(("198.18.1.2", T), ("198.18.1.20", T), ("198.18.1.31", T), ("198.18.1.32", T), ("198.18.1.130", T), ("198.18.1.170", T)), ctx)
    assert col(out, "carrier") == [
        "Northwind Mobile",  # only the /25
        "Northwind MVNO",  # /28 inside the /25
        "Northwind MVNO",  # last address of the /28
        "Northwind Mobile",  # first address after it: back to the /25
        "Contoso Telecom",  # /26
        "Tailspin Broadband",  # /27 inside Contoso's /26
    ]
    assert col(out, "asn") == [64501, 64502, 64502, 64501, 64510, 64530]


def test_gaps_are_unknown_never_dropped(ctx):
    batch = flows(("198.18.1.200", T), ("198.18.1.250", T), ("198.18.2.2", T), ("10.1.2.3", T), ("fd00:7473:1:0:8000::9", T))
    out = enrich_flows(batch, ctx)
    assert out.num_rows == batch.num_rows
    assert col(out, "flow_id") == [1, 2, 3, 4, 5]  # order kept
    assert col(out, "carrier") == ["unknown"] * 5
    assert col(out, "asn") == [None] * 5
    assert ctx.summary()["flows_carrier_unknown"] == 5


def test_asn_without_carrier_name(ctx):
    out = enrich_flows(flows(("198.18.1.230", T)), ctx)
    assert col(out, "carrier") == ["AS64540"] and col(out, "asn") == [64540]


def test_ipv6_prefixes(ctx):
    out = enrich_flows(flows(("fd00:7473:1::2", T), ("fd00:7473:1::105", T), ("fd00:7473:1::1ff", T), ("fd00:7473:1::200", T), ("fd00:7473:2::2", T)), ctx)
    assert col(out, "carrier") == ["Fabrikam Wireless", "Contoso Telecom", "Contoso Telecom", "Fabrikam Wireless", "unknown"]
    assert col(out, "asn") == [64520, 64510, 64510, 64520, None]


def test_prefix_table_rules(tmp_path):
    """Equal prefixes: the one listed last wins; host bits tolerated; IPv4 and IPv6 apart; a
    ::/0 default is less specific than any IPv4 prefix."""
    p = tmp_path / "p.csv"
    p.write_text(
        "prefix,carrier,asn\n"
        "::/0,Default,1\n"
        "198.18.0.0/15,First,2\n"
        "198.18.0.0/15,Second,3\n"
        "198.18.1.77/24,HostBits,AS4\n"
        "2001:db8::/32,Doc,5\n"
    )
    with open_enrichment(EnrichmentOptions(prefixes=[p])) as c:
        out = enrich_flows(flows(("198.19.0.1", T), ("198.18.1.1", T), ("2001:db8::1", T), ("2001:db9::1", T), ("8.8.8.8", T)), c)
        assert col(out, "carrier") == ["Second", "HostBits", "Doc", "Default", "Default"]
        assert c.summary()["sources"]["prefixes_duplicate"] == 1


@pytest.mark.parametrize(
    "text,needle",
    [
        ("prefix,carrier,asn\n198.18.1.0/33,X,1\n", "p.csv:2: bad prefix"),
        ("prefix,carrier,asn\n198.18.1.0/24,X,ASX\n", "p.csv:2: asn 'ASX'"),
        ("prefix,carrier,asn\n198.18.1.0/24,,\n", "p.csv:2: neither a carrier name nor an asn"),
        ("net,name\n198.18.1.0/24,X\n", "needs a header with columns prefix,carrier"),
    ],
)
def test_prefix_table_errors_name_the_line(tmp_path, text, needle):
    p = tmp_path / "p.csv"
    p.write_text(text)
    with pytest.raises(EnrichmentError, match=needle.replace("(", r"\(")):
        open_enrichment(EnrichmentOptions(prefixes=[p]))


def test_asn_db_fills_what_the_csv_does_not_cover(tmp_path):
    mmdb_writer = pytest.importorskip("mmdb_writer", reason="mmdb-writer not installed: cannot write a test .mmdb")
    from netaddr import IPSet

    w = mmdb_writer.MMDBWriter(ip_version=6, database_type="GeoLite2-ASN", ipv4_compatible=True, int_type="u32")
    w.insert_network(IPSet(["198.18.1.0/24"]), {"autonomous_system_number": 64550, "autonomous_system_organization": "Mmdb Wide"})
    w.insert_network(IPSet(["198.18.1.192/27"]), {"autonomous_system_number": 64551, "autonomous_system_organization": "Mmdb Narrow"})
    w.insert_network(IPSet(["fd00:7473:1:0:8000::/65"]), {"autonomous_system_number": 64552})
    db = tmp_path / "asn.mmdb"
    w.to_db_file(str(db))
    with open_enrichment(EnrichmentOptions(prefixes=[PREFIXES], asn_db=db)) as c:
        out = enrich_flows(flows(("198.18.1.2", T), ("198.18.1.200", T), ("198.18.1.250", T), ("fd00:7473:1:0:8000::9", T), ("10.0.0.1", T)), c)
        assert col(out, "carrier") == ["Northwind Mobile", "Mmdb Narrow", "Mmdb Wide", "AS64552", "unknown"]
        assert col(out, "asn") == [64501, 64551, 64550, 64552, None]
        s = c.summary()
        assert (s["flows_carrier_from_prefixes"], s["flows_carrier_from_asn_db"], s["flows_carrier_unknown"]) == (1, 3, 1)
        assert s["sources"]["asn_db_type"] == "GeoLite2-ASN"
    # the database alone
    with open_enrichment(EnrichmentOptions(asn_db=db)) as c:
        assert col(enrich_flows(flows(("198.18.1.2", T)), c), "carrier") == ["Mmdb Wide"]


def test_bad_asn_db(tmp_path):
    bad = tmp_path / "x.mmdb"
    bad.write_bytes(b"not a maxmind database")
    with pytest.raises(EnrichmentError, match="not a MaxMind database"):
        open_enrichment(EnrichmentOptions(asn_db=bad))


# --- sessions -----------------------------------------------------------------------------------


def test_sessions_by_client_and_time(ctx):
    out = enrich_flows(
        flows(
            ("198.18.1.130", "2024-01-15T10:00:00Z"),  # first session's start (inclusive)
            ("198.18.1.130", "2024-01-15T10:10:00Z"),  # only the first (3G, east)
            ("198.18.1.130", "2024-01-15T10:20:00Z"),  # both: the later start wins (Wi-Fi, west)
            ("198.18.1.130", "2024-01-15T11:00:00Z"),  # second session's end (inclusive)
            ("198.18.1.130", "2024-01-15T11:00:00.000001Z"),  # after: none
            ("198.18.1.130", "2024-01-15T09:59:59Z"),  # before: none
            ("198.18.1.200", "2024-01-15T10:20:00Z"),  # a client whose only session is later
        ),
        ctx,
    )
    assert col(out, "network_type") == ["3G", "3G", "Wi-Fi", "Wi-Fi", "unknown", "unknown", "unknown"]
    assert col(out, "h3_cell") == [EAST, EAST, WEST, WEST, "unknown", "unknown", "unknown"]
    assert ctx.summary()["flows_without_session"] == 3


def test_port_specific_session_wins(ctx):
    out = enrich_flows(flows(("198.18.1.20", T, 40000), ("198.18.1.20", T, 40001)), ctx)
    assert col(out, "network_type") == ["2G", "LTE"]
    assert col(out, "h3_cell") == [EAST, CENTRAL]


def test_ipv6_sessions_and_address_spellings(tmp_path):
    s = tmp_path / "s.csv"
    s.write_text(
        "ip,session_start,session_end,latitude,longitude,net_type\n"
        "FD00:7473:0001:0000:0000:0000:0000:0105,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,-6.244,106.799,4G\n"
        "::ffff:198.18.1.9,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,-6.196,106.832,wlan\n"
    )
    with open_enrichment(EnrichmentOptions(sessions=[s])) as c:
        out = enrich_flows(flows(("fd00:7473:1::105", T), ("198.18.1.9", T)), c)
        assert col(out, "network_type") == ["LTE", "Wi-Fi"]
        assert col(out, "h3_cell") == [SOUTH, CENTRAL]


def test_session_time_formats(tmp_path):
    t0 = ns("2024-01-15T10:00:00Z") // 1_000_000_000
    s = tmp_path / "s.csv"
    s.write_text(
        "client_ip,start,end,lat,lng,network_type\n"
        f"198.18.1.1,{t0},{t0 + 3600},-6.196,106.832,lte\n"  # epoch seconds
        f"198.18.1.2,{t0 * 1000},{(t0 + 3600) * 1000},-6.196,106.832,lte\n"  # epoch milliseconds
        "198.18.1.3,2024-01-15T12:00:00+02:00,2024-01-15T13:00:00+02:00,-6.196,106.832,lte\n"  # offset
        "198.18.1.4,2024-01-15 10:00:00,2024-01-15 11:00:00,-6.196,106.832,lte\n"  # naive = UTC
    )
    with open_enrichment(EnrichmentOptions(sessions=[s])) as c:
        out = enrich_flows(flows(*[(f"198.18.1.{i}", T) for i in range(1, 5)]), c)
        assert col(out, "network_type") == ["LTE"] * 4


def test_parquet_sessions_and_globs(tmp_path):
    table = pa.table(
        {
            "client_ip": ["198.18.1.5", "198.18.1.6"],
            "start": pa.array([ns("2024-01-15T10:00:00Z")] * 2, pa.timestamp("ns", tz="UTC")),
            "end": pa.array([ns("2024-01-15T11:00:00Z")] * 2, pa.timestamp("ns", tz="UTC")),
            "lat": [-6.158, -6.148],
            "lng": [106.905, 106.735],
            "network_type": ["3g", "wifi"],
        }
    )
    (tmp_path / "tele").mkdir()
    pq.write_table(table.slice(0, 1), tmp_path / "tele" / "a.parquet")
    pq.write_table(table.slice(1, 1), tmp_path / "tele" / "b.parquet")
    with open_enrichment(EnrichmentOptions(sessions=[tmp_path / "tele" / "*.parquet"])) as c:
        out = enrich_flows(flows(("198.18.1.5", T), ("198.18.1.6", T)), c)
        assert col(out, "h3_cell") == [EAST, WEST]
        assert c.summary()["sources"]["sessions"] == 2


def test_bad_session_records_are_rejected_and_counted(tmp_path):
    s = tmp_path / "s.csv"
    s.write_text(
        "client_ip,start,end,lat,lng,network_type\n"
        "not-an-ip,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,-6.196,106.832,lte\n"
        "198.18.1.1,2024-01-15T11:00:00Z,2024-01-15T10:00:00Z,-6.196,106.832,lte\n"  # end before start
        "198.18.1.2,yesterday,2024-01-15T11:00:00Z,-6.196,106.832,lte\n"
        "198.18.1.3,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,95.0,106.832,lte\n"  # latitude out of range
        "198.18.1.4,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,,,\n"  # nothing known but the time
    )
    with open_enrichment(EnrichmentOptions(sessions=[s])) as c:
        src = c.summary()["sources"]
        assert src["sessions"] == 2 and src["sessions_rejected"] == 3
        assert src["sessions_rejected_by_reason"] == {"bad_client_ip": 1, "bad_start": 1, "end_before_start": 1}
        assert src["sessions_bad_location"] == 1
        out = enrich_flows(flows(("198.18.1.3", T), ("198.18.1.4", T)), c)
        assert col(out, "network_type") == ["LTE", "unknown"]  # a session matched: its network type stays
        assert col(out, "h3_cell") == ["unknown", "unknown"]
        s2 = c.summary()
        assert s2["flows_without_session"] == 0 and s2["flows_h3_unknown"] == 2 and s2["flows_network_type_unknown"] == 1


def test_sessions_need_the_key_columns(tmp_path):
    s = tmp_path / "s.csv"
    s.write_text("client_ip,lat,lng\n198.18.1.1,1,2\n")
    with pytest.raises(EnrichmentError, match="need a start column"):
        open_enrichment(EnrichmentOptions(sessions=[s]))
    with pytest.raises(EnrichmentError, match="no such file"):
        open_enrichment(EnrichmentOptions(sessions=[tmp_path / "missing.csv"]))


# --- cells, regions, sites ----------------------------------------------------------------------


def test_cell_center_and_boundary(ctx):
    out = enrich_flows(flows(("198.18.1.170", T)), ctx)
    cell = col(out, "h3_cell")[0]
    assert cell == WEST and col(out, "h3_res") == [7] and h3.get_resolution(cell) == 7
    lat, lng = col(out, "h3_lat")[0], col(out, "h3_lng")[0]
    assert (lat, lng) == pytest.approx(h3.cell_to_latlng(cell))
    geo = json.loads(col(out, "h3_boundary_geojson")[0])
    assert geo["type"] == "Polygon"
    ring = geo["coordinates"][0]
    assert len(ring) == 7 and ring[0] == ring[-1]  # a closed hexagon
    assert all(h3.latlng_to_cell(p[1], p[0], 5) == h3.cell_to_parent(cell, 5) for p in ring[:1])  # [lng, lat] order
    area2 = sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in itertools.pairwise(ring))
    assert area2 > 0  # counterclockwise exterior ring (RFC 7946)


def test_h3_resolution_is_configurable():
    with open_enrichment(EnrichmentOptions(sessions=[SESSIONS], h3_res=9)) as c:
        out = enrich_flows(flows(("198.18.1.170", T), ("198.18.1.250", T)), c)
        cell = col(out, "h3_cell")[0]
        assert h3.get_resolution(cell) == 9 and h3.cell_to_parent(cell, 7) == WEST
        assert col(out, "h3_res") == [9, 9]
    with pytest.raises(EnrichmentError, match="0..15"):
        EnrichmentOptions(h3_res=16)


def test_regions_from_map_and_from_sessions(ctx, tmp_path):
    out = enrich_flows(flows(("198.18.1.20", T), ("198.18.1.170", T), ("198.18.1.250", T)), ctx)
    assert col(out, "region") == ["metro-central", "unknown", "unknown"]  # west is not mapped; no session
    s = tmp_path / "s.csv"
    s.write_text("client_ip,start,end,lat,lng,region\n198.18.1.1,2024-01-15T10:00:00Z,2024-01-15T11:00:00Z,-6.148,106.735,Harbour\n")
    with open_enrichment(EnrichmentOptions(sessions=[s], regions=REGIONS)) as c:
        assert col(enrich_flows(flows(("198.18.1.1", T)), c), "region") == ["Harbour"]


def test_site_from_capture_else_option(ctx):
    ctx.set_capture_site("agent-cap", "ams1")
    a = enrich_flows(flows(("198.18.1.2", T), capture_id="agent-cap"), ctx)
    b = enrich_flows(flows(("198.18.1.2", T), capture_id="other"), ctx)
    assert col(a, "site") == ["ams1"] and col(b, "site") == ["lab1"]
    with open_enrichment(EnrichmentOptions()) as c:
        assert col(enrich_flows(flows(("198.18.1.2", T)), c), "site") == ["unknown"]


# --- unknowns, counts, queries, schema ----------------------------------------------------------


def test_without_sources_everything_is_explicitly_unknown_and_counted():
    with open_enrichment(EnrichmentOptions()) as c:
        batch = flows(("198.18.1.2", T), ("fd00:7473:1::2", T))
        out = enrich_flows(batch, c)
        assert out.num_rows == 2
        for name in ("carrier", "network_type", "h3_cell", "region", "site"):
            assert col(out, name) == ["unknown", "unknown"], name
        for name in ("asn", "h3_lat", "h3_lng", "h3_boundary_geojson"):
            assert col(out, name) == [None, None], name
        s = c.summary()
        assert s["flows"] == 2
        for key in ("flows_carrier_unknown", "flows_without_session", "flows_network_type_unknown", "flows_h3_unknown", "flows_region_unknown", "flows_site_unknown"):
            assert s[key] == 2, key


def test_counts_add_up_over_batches(ctx):
    enrich_flows(flows(("198.18.1.2", "2024-01-15T10:05:00Z"), ("198.18.1.250", T)), ctx)  # .2 has no session then
    enrich_flows(flows(("198.18.1.130", T), ("198.18.1.170", T), ("198.18.1.20", T)), ctx)
    s = ctx.summary()
    assert s["flows"] == 5
    assert s["flows_carrier_from_prefixes"] + s["flows_carrier_from_asn_db"] + s["flows_carrier_unknown"] == 5
    assert s["flows_carrier_unknown"] == 1
    assert s["flows_without_session"] == 2


def test_queries_take_their_flows_enrichment(ctx):
    f = enrich_flows(flows(("198.18.1.130", T), ("198.18.1.250", T)), ctx)
    q = pa.RecordBatch.from_pylist(
        [{"flow_id": 2, "query_index": 0}, {"flow_id": 1, "query_index": 0}, {"flow_id": 1, "query_index": 1}, {"flow_id": 99, "query_index": 0}],
        schema=pa.schema([("flow_id", pa.int64()), ("query_index", pa.uint32())]),
    )
    out = enrich_queries(q, ctx)
    assert out.num_rows == 4
    assert col(out, "carrier") == ["unknown", "Contoso Telecom", "Contoso Telecom", "unknown"]
    assert col(out, "h3_cell") == ["unknown", EAST, EAST, "unknown"]
    assert col(out, "site") == ["lab1"] * 4
    assert col(out, "h3_res") == [7] * 4
    assert ctx.summary()["queries"] == 4 and ctx.summary()["queries_flow_not_found"] == 1
    # from an explicit flows table too (re-enriching a dataset)
    again = enrich_queries(q, ctx, flows=f)
    assert col(again, "carrier") == col(out, "carrier")


def test_schema_is_the_same_for_every_batch(ctx):
    """The Parquet writer keeps one schema per file: enriched and all-unknown batches, batches and
    tables, must all carry the same enrichment columns with the same types."""
    want = enrichment_schema()
    cases = [
        enrich_flows(flows(("198.18.1.130", T)), ctx),
        enrich_flows(flows(("10.0.0.1", T)), ctx),
        enrich_flows(pa.Table.from_batches([flows(("198.18.1.130", T))]), ctx),
        enrich_flows(flows(), ctx),
        enrich_queries(pa.RecordBatch.from_pylist([], schema=pa.schema([("flow_id", pa.int64())])), ctx),
    ]
    for out in cases:
        tail = pa.schema([out.schema.field(n) for n in ENRICHMENT_COLUMNS])
        assert tail.equals(want)
    assert isinstance(cases[2], pa.Table) and isinstance(cases[0], pa.RecordBatch)
    # enriching twice replaces, never duplicates, the columns
    twice = enrich_flows(cases[0], ctx)
    assert twice.schema.names.count("carrier") == 1 and twice.num_columns == cases[0].num_columns


def test_enriched_native_schemas(ctx):
    """What the engine stores: the native flows/queries schemas plus the enrichment columns, the
    same whether a batch is enriched or not."""
    from tailscope import _native
    from tailscope.jobs.enrichment.enrich import enriched_schema

    for native in (_native.flow_schema(), _native.query_schema()):
        want = enriched_schema(native)
        assert want.names[: len(native)] == native.names and want.names[len(native) :] == ENRICHMENT_COLUMNS
        empty = pa.RecordBatch.from_pylist([], schema=native)
        out = ctx.apply("flows" if "client_ip" in native.names else "queries", empty)
        assert out.schema.equals(want)


def test_apply_passes_other_tables_through(ctx):
    batch = flows(("198.18.1.2", T))
    assert ctx.apply("packets", batch) is batch
    assert "carrier" in ctx.apply("flows", batch).schema.names


# --- the committed fixture ----------------------------------------------------------------------


def test_fixture_is_current():
    """tests/fixtures/enrichment is what scripts/make-enrichment-fixture.py writes for samples/."""
    corpus.require_samples()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make-enrichment-fixture.py"), "--check"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_fixture_covers_the_cases():
    text = PREFIXES.read_text()
    assert "fd00:7473:1::" in text and "198.18.1." in text
    sessions = SESSIONS.read_text()
    assert "sample clean," not in sessions and "sample request_loss" not in sessions  # deliberately no session
    with open_enrichment(EnrichmentOptions(prefixes=[PREFIXES], sessions=[SESSIONS], regions=REGIONS)) as c:
        src = c.summary()["sources"]
        assert src["sessions_rejected"] == 0 and src["prefixes"] >= 6 and src["regions"] == 3


def test_queries_written_while_their_flow_is_open_take_its_enrichment(tmp_path):
    """A long-lived connection's queries are written before its flows row (docs/queries.md):
    they still get the enrichment that row gets, and the flow is counted once."""
    import duckdb

    from support import pcapgen
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    trace = pcapgen.write_chatty_flow(tmp_path / "chatty.pcap", 70_000)  # past one batch of queries
    prefixes = tmp_path / "prefixes.csv"
    prefixes.write_text("prefix,carrier,asn\n198.18.0.0/24,Testnet Mobile,64999\n")
    sessions = tmp_path / "sessions.csv"
    sessions.write_text("client_ip,client_port,start,end,lat,lng,network_type\n"
                        "198.18.0.1,,2023-11-14T22:13:00Z,2023-11-14T22:20:00Z,-6.196,106.832,lte\n")
    options = AnalyzeOptions(checksums=False)
    options.enrichment = EnrichmentOptions(prefixes=[prefixes], sessions=[sessions], site="edge1")
    res = analyze([str(trace)], tmp_path / "ds", options)
    e = res.manifest["totals"]["enrichment"]
    assert (e["flows"], e["queries"], e["queries_flow_not_found"], e["flows_without_session"]) == (1, 70_000, 0, 0)
    cols = ", ".join(ENRICHMENT_COLUMNS)
    flow = duckdb.sql(f"SELECT {cols} FROM read_parquet('{tmp_path}/ds/flows/*/*.parquet')").fetchall()
    queries = duckdb.sql(f"SELECT DISTINCT {cols} FROM read_parquet('{tmp_path}/ds/queries/*/*.parquet')").fetchall()
    assert queries == flow and flow[0][ENRICHMENT_COLUMNS.index("carrier")] == "Testnet Mobile"

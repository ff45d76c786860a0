"""The Grafana dashboards (dashboards/): every panel's SQL runs in DuckDB against a database built
from the corpus and the lab's samples (with the enrichment fixture) and returns the columns the
panel needs, non-empty; and the dashboards are structurally sound — unique panel ids, data source
uids that resolve to the provisioned DuckDB data source, template variables defined before use, a
schema version Grafana accepts — and the database is one Grafana's DuckDB plugin can open.

Grafana interpolates the SQL in two places and both are reproduced here: the plugin's front end
replaces template variables formatted as SQL strings ($carrier -> 'a','b'; All = every value), and
the back end expands $__timeFilter(col) into `col >= 'from' AND col <= 'to'` (RFC 3339, UTC).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

pytest.importorskip("h3")

# one worker builds this module's dataset once (pytest -n with --dist loadgroup)
pytestmark = pytest.mark.xdist_group("dashboards")

from support import corpus
from support import demo as demo_data

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "dashboards"
JSON_DIR = DASHBOARDS / "json"
FILES = sorted(JSON_DIR.glob("*.json"))

# Grafana's dashboard schema versions: 39 = Grafana 10.4 (the oldest the DuckDB plugin supports)
# and 11.0-11.2; 41 = Grafana 12. Newer Grafana migrates older dashboards up, never down.
MIN_SCHEMA, MAX_SCHEMA = 39, 41
BUILTIN_DS = {"-- Grafana --", "grafana"}
PANEL_TYPES = {"row", "stat", "timeseries", "table", "barchart", "geomap", "text"}
# DuckDB types the plugin's Go driver turns into Grafana fields (no HUGEINT, unsigned, lists, structs)
GRAFANA_TYPES = re.compile(r"^(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)|VARCHAR|DATE|"
                           r"TIMESTAMP|TIMESTAMP WITH TIME ZONE|INTERVAL)$")
NUMERIC = re.compile(r"^(TINYINT|SMALLINT|INTEGER|BIGINT|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\))$")
TIME = {"TIMESTAMP", "TIMESTAMP WITH TIME ZONE"}
# base types DuckDB 1.x (the plugin's engine) knows; newer ones make the database unreadable to it
DUCKDB1_TYPES = {
    "BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT",
    "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "VARCHAR", "BLOB", "DATE", "TIME", "TIMESTAMP", "WITH", "ZONE",
    "TIMESTAMP_NS", "TIMESTAMP_MS", "TIMESTAMP_S", "INTERVAL", "UUID", "STRUCT", "MAP", "UNION", "BIT", "ENUM",
}
VAR_REF = re.compile(r"\$\{([A-Za-z0-9_]+)(?:[.:][^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z0-9_]+)(?::[^\]]*)?\]\]")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def walk_panels(panels: list[dict]):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def walk_dicts(obj):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from walk_dicts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_dicts(v)


def walk_strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from walk_strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from walk_strings(v)


def var_refs(text: str) -> set[str]:
    return {a or b or c for a, b, c in VAR_REF.findall(text)}


def provisioned_datasources() -> dict[str, str]:
    """uid -> type of the data sources in dashboards/provisioning/datasources/*.yaml (the plain
    `key: value` lines of a datasources list; PyYAML is not a dependency)."""
    out = {}
    for f in (DASHBOARDS / "provisioning" / "datasources").glob("*.yaml"):
        for block in re.split(r"\n\s*-\s+(?=name:)", f.read_text())[1:]:
            uid = re.search(r"^\s*uid:\s*['\"]?([^'\"\s]+)", block, re.MULTILINE)
            typ = re.search(r"^\s*type:\s*['\"]?([^'\"\s]+)", block, re.MULTILINE)
            assert uid and typ, f"{f.name}: a data source without uid or type"
            out[uid.group(1)] = typ.group(1)
    return out


# ----------------------------------------------------------------------------------------------
# the database: the corpus and the samples, enriched


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> Path:
    from tailscope.jobs.analytics.db import build

    corpus.require_samples()
    out = demo_data.analyze_demo(tmp_path_factory.mktemp("dashboards-ds"), str(corpus.corpus_dir() / "pcaps"))
    return build(out)


@pytest.fixture(scope="module")
def con(database):
    c = duckdb.connect(str(database), read_only=True)
    yield c
    c.close()


# ----------------------------------------------------------------------------------------------
# Grafana's interpolation


def sql_string(values: list[str]) -> str:
    return ",".join("'" + v.replace("'", "''") + "'" for v in values)


def interpolate(sql: str, selected: dict[str, list[str]], time_range: tuple[str, str]) -> str:
    """The SQL Grafana sends for these variable values and this time range."""
    frm, to = time_range

    def time_filter(m: re.Match) -> str:
        col = m.group(1).strip()
        return f"{col} >= '{frm}' AND {col} <= '{to}'"

    sql = re.sub(r"\$__timeFilter\(([^()]*)\)", time_filter, sql)

    def variable(m: re.Match) -> str:
        whole = m.group(0)
        name = m.group(1) or m.group(2) or m.group(3)
        fmt = None
        if whole.startswith("${") and ":" in whole:
            fmt = whole[2:-1].split(":", 1)[1]
        if name not in selected:
            raise AssertionError(f"undefined variable {whole} in: {sql}")
        vals = selected[name]
        if fmt in (None, "sqlstring"):
            return sql_string(vals)
        if fmt == "raw":
            return ",".join(vals)
        raise AssertionError(f"variable format {fmt} not handled by the test")

    sql = VAR_REF.sub(variable, sql)
    leftover = re.findall(r"\$\S+", sql)
    assert not leftover, f"unexpanded macros or variables {leftover}"
    return sql


def resolve_variables(con, dash: dict, time_range, choose: dict[str, str]) -> dict[str, list[str]]:
    """Run the variable queries in order like Grafana: All selects every value; a single-value
    variable takes its first value unless `choose` names one."""
    selected: dict[str, list[str]] = {}
    for v in dash["templating"]["list"]:
        name = v["name"]
        if v["type"] == "custom":
            values = [x.strip() for x in v["query"].split(",")]
            default = v["current"]["value"]
            selected[name] = [choose.get(name, default)]
            assert selected[name][0] in values
            continue
        assert v["type"] == "query", f"{dash['uid']}: variable {name} of type {v['type']}"
        cur = con.execute(interpolate(v["query"], selected, time_range))
        columns = [d[0] for d in cur.description]
        rows = cur.fetchall()
        if "__value" in columns:
            values = [str(r[columns.index("__value")]) for r in rows]
        else:
            values = [str(x) for r in rows for x in r]
        assert values, f"{dash['uid']}: variable {name} has no values"
        if name in choose:
            assert choose[name] in values, f"{dash['uid']}: {name}={choose[name]} not among {values[:20]}"
            selected[name] = [choose[name]]
        elif v.get("includeAll"):
            selected[name] = values
        else:
            selected[name] = values[:1]
    return selected


def check_panel_result(dash: dict, panel: dict, columns: list[str], types: list[str], result: pa.Table) -> None:
    """The result (an Arrow table: Grafana gets Arrow frames too) has what the panel needs."""
    where = f"{dash['uid']} / {panel['title']!r}"
    assert result.num_rows, f"{where}: no rows"
    assert len(set(columns)) == len(columns), f"{where}: duplicate columns {columns}"
    kinds = dict(zip(columns, types))
    for c, t in kinds.items():
        assert GRAFANA_TYPES.match(t), f"{where}: column {c} has type {t}, which the DuckDB plugin does not turn into a Grafana field"
        if "flow_id" in c:
            assert t == "VARCHAR", f"{where}: {c} must be text: a JavaScript number cannot hold a 64-bit flow id"
    numeric = [c for c in columns if NUMERIC.match(kinds[c])]
    has_value = any(result.column(c).null_count < result.num_rows for c in numeric)
    kind = panel["type"]
    if kind == "stat":
        assert numeric and len(numeric) == len(columns), f"{where}: a stat panel wants numeric columns, got {kinds}"
        assert has_value, f"{where}: only nulls"
    elif kind == "timeseries":
        assert columns[0] == "time" and kinds["time"] in TIME, f"{where}: the first column must be the time, got {kinds}"
        assert numeric and has_value, f"{where}: no numeric values"
        labels = [c for c in columns[1:] if c not in numeric]
        fmt = panel["targets"][0]["format"]
        assert not labels or (fmt == "time_series" and all(kinds[c] == "VARCHAR" for c in labels)), \
            f"{where}: non-numeric columns {labels} need the time_series format (long to wide)"
    elif kind == "barchart":
        x = panel["options"]["xField"]
        assert x in columns and kinds[x] == "VARCHAR", f"{where}: xField {x} missing or not text"
        assert numeric and has_value, f"{where}: no numeric values"
    elif kind == "geomap":
        for layer in panel["options"]["layers"]:
            loc = layer["location"]
            for f in (loc["latitude"], loc["longitude"]):
                assert f in columns and kinds[f] == "DOUBLE", f"{where}: location field {f} missing or not DOUBLE"
                values = [x for x in result.column(f).to_pylist() if x is not None]
                assert values and all(-180 <= x <= 180 for x in values), f"{where}: {f} missing or out of range"
            for key in ("color", "size"):
                f = layer["config"]["style"][key].get("field")
                if f:
                    assert f in columns and NUMERIC.match(kinds[f]), f"{where}: style {key} field {f} missing or not numeric"
    # every field the panel names must be in the result
    named = [o["matcher"]["options"] for o in panel.get("fieldConfig", {}).get("overrides", []) if o["matcher"]["id"] == "byName"]
    named += [s["displayName"] for s in panel.get("options", {}).get("sortBy", [])]
    missing = [n for n in named if n not in columns]
    assert not missing, f"{where}: fields {missing} named by the panel are not in the result {columns}"


def data_time_range(con) -> tuple[str, str]:
    lo, hi = con.execute("SELECT strftime(min(timezone('UTC', start)), '%Y-%m-%dT%H:%M:%SZ'), "
                     "strftime(max(timezone('UTC', \"end\")) + INTERVAL 1 SECOND, '%Y-%m-%dT%H:%M:%SZ') FROM flows").fetchone()
    return lo, hi


def run_dashboard(con, dash: dict, time_range, choose: dict[str, str]) -> int:
    selected = resolve_variables(con, dash, time_range, choose)
    n = 0
    for panel in walk_panels(dash["panels"]):
        for t in panel.get("targets", []):
            sql = interpolate(t["rawSql"], selected, time_range)
            try:
                rel = con.sql(sql)
                columns, types = rel.columns, [str(t) for t in rel.types]
                result = rel.to_arrow_table()
            except duckdb.Error as exc:
                raise AssertionError(f"{dash['uid']} / {panel['title']!r}: {exc}\n{sql}") from exc
            check_panel_result(dash, panel, columns, types, result)
            n += 1
    return n


# ----------------------------------------------------------------------------------------------
# proof 1: every panel's SQL runs and returns what the panel needs


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_panel_runs_with_all_values(con, path):
    """Variables at their defaults (All for the dimensions) over the whole time range."""
    dash = load(path)
    assert run_dashboard(con, dash, data_time_range(con), {}) >= 3


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_panel_runs_for_one_carrier_and_hexagon(con, path):
    """One carrier, its busiest hexagon, the samples' day: quoting and chained variables work."""
    carrier, cell = con.execute(
        "SELECT carrier, h3_cell FROM query_facts WHERE carrier <> 'unknown' AND h3_cell <> 'unknown' "
        "GROUP BY ALL ORDER BY count(*) DESC, 1, 2 LIMIT 1").fetchone()
    day = con.execute("SELECT strftime(min(timezone('UTC', start)), '%Y-%m-%d') FROM query_facts WHERE h3_cell = ?", [cell]).fetchone()[0]
    dash = load(path)
    choose = {"carrier": carrier, "hexagon": cell}
    if any(v["name"] == "signature" for v in dash["templating"]["list"]):
        choose["signature"] = con.execute(
            "SELECT signature FROM query_signatures WHERE carrier = ? AND h3_cell = ? AND signature <> '(connection setup)' "
            "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 1", [carrier, cell]).fetchone()[0]
    assert run_dashboard(con, dash, (f"{day}T00:00:00Z", f"{day}T23:59:59Z"), choose) >= 3


def test_interpolation_is_faithful(con):
    """The test's interpolation quotes like Grafana's sqlstring format and the time macro filters."""
    sql = interpolate("SELECT count(*) FROM flow_facts WHERE carrier IN ($carrier) AND $__timeFilter(start)",
                      {"carrier": ["O'Brien Mobile", "Northwind Mobile"]}, ("2026-11-22T00:00:00Z", "2026-11-23T00:00:00Z"))
    assert "IN ('O''Brien Mobile','Northwind Mobile')" in sql
    assert "start >= '2026-11-22T00:00:00Z' AND start <= '2026-11-23T00:00:00Z'" in sql
    n = con.execute(sql).fetchone()[0]
    assert n == con.execute("SELECT count(*) FROM flow_facts WHERE carrier = 'Northwind Mobile' "
                        "AND start >= TIMESTAMPTZ '2026-11-22 00:00:00+00' AND start <= TIMESTAMPTZ '2026-11-23 00:00:00+00'").fetchone()[0]
    assert n > 0
    with pytest.raises(AssertionError, match="undefined variable"):
        interpolate("SELECT $nope", {}, ("a", "b"))


def arrow(**columns) -> pa.Table:
    return pa.table({k: pa.array(v, type=pa.float64() if not v or v[0] is None else None) for k, v in columns.items()})


def test_a_broken_panel_is_caught(con):
    """The checks fail on what they are meant to catch."""
    dash = load(JSON_DIR / "tailscope-overview.json")
    panel = next(p for p in walk_panels(dash["panels"]) if p["type"] == "timeseries")
    with pytest.raises(AssertionError, match="first column must be the time"):
        check_panel_result(dash, panel, ["p99", "time"], ["DOUBLE", "TIMESTAMP WITH TIME ZONE"], arrow(p99=[1.0], time=[None]))
    with pytest.raises(AssertionError, match="no rows"):
        check_panel_result(dash, panel, ["time", "p99"], ["TIMESTAMP WITH TIME ZONE", "DOUBLE"], arrow(time=[], p99=[]))
    table = next(p for p in walk_panels(dash["panels"]) if p["type"] == "table" and p["fieldConfig"]["overrides"])
    with pytest.raises(AssertionError, match="named by the panel"):
        check_panel_result(dash, table, ["x"], ["VARCHAR"], arrow(x=["a"]))
    with pytest.raises(AssertionError, match="HUGEINT|does not turn"):
        check_panel_result(dash, table, ["n"], ["HUGEINT"], arrow(n=[1]))
    with pytest.raises(AssertionError, match="must be text"):
        check_panel_result(dash, table, ["flow_id"], ["BIGINT"], arrow(flow_id=[1]))


# ----------------------------------------------------------------------------------------------
# proof 2: structure


def test_dashboards_exist_and_are_current():
    assert {f.name for f in FILES} >= {"tailscope-overview.json", "tailscope-carrier.json", "tailscope-hexagon.json",
                                       "tailscope-signature.json", "tailscope-flow.json"}
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "make-dashboards.py"), "--check"], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_uids_and_titles_unique():
    dashes = [load(f) for f in FILES]
    for key in ("uid", "title"):
        values = [d[key] for d in dashes]
        assert len(set(values)) == len(values), f"duplicate dashboard {key}s: {values}"
        assert all(values)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_structure(path):
    dash = load(path)
    v = dash["schemaVersion"]
    assert isinstance(v, int) and MIN_SCHEMA <= v <= MAX_SCHEMA, f"schemaVersion {v} outside {MIN_SCHEMA}..{MAX_SCHEMA}"
    assert dash["time"]["from"] and dash["time"]["to"]
    panels = list(walk_panels(dash["panels"]))
    ids = [p["id"] for p in panels]
    assert all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids), f"panel ids not unique: {ids}"
    # grid: inside 24 columns, no two panels overlap
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert p["type"] in PANEL_TYPES, p["type"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0, (p["title"], g)
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not (mine & cells), f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] not in ("row", "text"):
            refs = [t["refId"] for t in p["targets"]]
            assert refs and len(set(refs)) == len(refs), p["title"]
            for t in p["targets"]:
                assert t["rawSql"].strip() and t["format"] in ("table", "time_series") and t["editorMode"] == "code"


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_datasource_uids_resolve(path):
    provisioned = provisioned_datasources()
    assert provisioned, "no data source provisioned"
    dash = load(path)
    seen = 0
    for d in walk_dicts(dash):
        ds = d.get("datasource")
        if isinstance(ds, dict):
            seen += 1
            uid = ds.get("uid")
            if uid in BUILTIN_DS:
                continue
            assert uid in provisioned, f"data source uid {uid!r} is not provisioned ({sorted(provisioned)})"
            assert ds.get("type") == provisioned[uid], f"data source {uid}: type {ds.get('type')} != {provisioned[uid]}"
        elif ds is not None:
            raise AssertionError(f"data source given as {ds!r}: use an object with a uid")
    assert seen > 3


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_variables_defined_before_use(path):
    dash = load(path)
    variables = dash["templating"]["list"]
    names = [v["name"] for v in variables]
    assert len(set(names)) == len(names), names
    defined: set[str] = set()
    for v in variables:
        used = {r for s in walk_strings({k: v.get(k) for k in ("query", "definition")}) for r in var_refs(s)}
        used = {u for u in used if not u.startswith("__")}
        assert used <= defined, f"variable {v['name']} uses {sorted(used - defined)} before they are defined"
        defined.add(v["name"])
    used = {r for s in walk_strings(dash["panels"]) for r in var_refs(s) if not r.startswith("__")}
    assert used <= defined, f"panels use undefined variables {sorted(used - defined)}"
    # the filters every dashboard offers
    assert {"carrier", "hexagon", "site", "network_type"} <= set(names)
    for v in variables:
        if v["name"] in ("carrier", "hexagon", "site", "network_type"):
            assert v["multi"] and v["includeAll"] and "allValue" not in v, v["name"]


def test_variable_check_catches_misordering():
    dash = load(JSON_DIR / "tailscope-overview.json")
    variables = dash["templating"]["list"]
    hexagon = next(v for v in variables if v["name"] == "hexagon")
    assert "carrier" in var_refs(hexagon["query"])
    names_before = [v["name"] for v in variables[: variables.index(hexagon)]]
    assert "carrier" in names_before


def test_provisioning_and_compose_agree():
    ds_yaml = (DASHBOARDS / "provisioning" / "datasources" / "tailscope.yaml").read_text()
    assert "motherduck-duckdb-datasource" in ds_yaml


# The settings the pinned plugin reads (pkg/models/settings.go of motherduckdb/grafana-duckdb-datasource
# at v0.4.5: path, initSql, maxOpenConns; the token is a secure setting): anything else in
# jsonData would be ignored silently, as readOnly was.
PLUGIN_SETTINGS = {"0.4.5": {"path", "initSql", "maxOpenConns"}}


def test_datasource_uses_only_the_pinned_plugins_settings_and_opens_read_only():
    import yaml

    compose = (DASHBOARDS / "docker-compose.yaml").read_text()
    version = re.search(r"DUCKDB_PLUGIN_VERSION:-([0-9.]+)", compose).group(1)
    ds = yaml.safe_load((DASHBOARDS / "provisioning" / "datasources" / "tailscope.yaml").read_text())["datasources"][0]
    assert set(ds["jsonData"]) <= PLUGIN_SETTINGS[version], set(ds["jsonData"]) - PLUGIN_SETTINGS[version]
    assert ds["jsonData"]["path"].endswith("?access_mode=READ_ONLY")
    assert "${TAILSCOPE_DATASET}:${TAILSCOPE_DATASET}:ro" in compose  # the dataset mounted read-only
    dash_yaml = (DASHBOARDS / "provisioning" / "dashboards" / "tailscope.yaml").read_text()
    path = re.search(r"^\s*path:\s*(\S+)", dash_yaml, re.MULTILINE).group(1)
    compose = (DASHBOARDS / "docker-compose.yaml").read_text()
    assert f"./json:{path}" in compose, f"the compose file does not mount dashboards/json at {path}"
    assert "./provisioning:/etc/grafana/provisioning" in compose
    assert "GF_PLUGINS_ALLOW_LOADING_UNSIGNED_PLUGINS: motherduck-duckdb-datasource" in compose
    assert "-ubuntu" in compose, "the DuckDB plugin needs glibc: an Ubuntu-based Grafana image"


# ----------------------------------------------------------------------------------------------
# the database is one the plugin can open


def test_database_readable_by_duckdb_1(con):
    """Grafana's DuckDB plugin bundles DuckDB 1.x: the file must use a 1.x storage format and no
    view may expose a type 1.x does not know (it could not even load the catalog)."""
    tags = con.execute("SELECT tags FROM duckdb_databases() WHERE database_name = current_database()").fetchone()[0]
    version = (tags or {}).get("storage_version", "v1.0.0+")
    assert version.startswith("v1."), f"storage version {version}: DuckDB 1.x cannot open this file"
    bad = []
    for view, column, dtype in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database()"
    ).fetchall():
        for token in re.findall(r"\b[A-Z][A-Z0-9_]*\b", dtype):
            if token not in DUCKDB1_TYPES:
                bad.append(f"{view}.{column} {dtype}")
    assert not bad, f"types DuckDB 1.x does not know: {bad[:10]}"

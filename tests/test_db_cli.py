"""`tailscope db`: every row, in the format asked, and nothing but results on stdout; the shell."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.jobs.commands.db import duckdb_shell

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "clean.pcap"


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("db") / "ds"
    assert tailscope("analyze", SAMPLE, "--out", out, "-q").returncode == 0
    return out


ALL_ROWS = "SELECT i, i * 2 AS twice, CASE WHEN i % 7 = 0 THEN NULL ELSE 'x|' || i END AS label FROM range(250) t(i)"


def test_csv_prints_every_row_and_nothing_else(dataset):
    r = tailscope("db", dataset, "-e", ALL_ROWS, "--format", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 250 and rows[249] == {"i": "249", "twice": "498", "label": "x|249"}
    assert rows[7]["label"] == ""
    assert "database:" in r.stderr


def test_json_markdown_and_box(dataset):
    r = tailscope("db", dataset, "-e", ALL_ROWS, "--format", "json")
    data = json.loads(r.stdout)
    assert len(data) == 250 and data[0] == {"i": 0, "twice": 0, "label": None}
    md = tailscope("db", dataset, "-e", ALL_ROWS, "-f", "markdown").stdout.splitlines()
    assert md[0] == "| i | twice | label |" and len(md) == 252 and md[3] == "| 1 | 2 | x\\|1 |"
    box = tailscope("db", dataset, "-e", "SELECT count(*) AS flows FROM flows").stdout
    assert "│ flows │" in box and box.rstrip().endswith("1 row")


def test_several_queries_and_a_failing_one(dataset):
    r = tailscope("db", dataset, "-e", "SELECT 1 AS a", "-e", "SELECT 2 AS b", "-f", "csv")
    # a blank line between results: where one table ends and the next header starts
    assert r.stdout == "a\n1\n\nb\n2\n"
    tsv = tailscope("db", dataset, "-e", "SELECT 1 AS a", "-e", "SELECT 2 AS b", "-f", "tsv")
    assert tsv.stdout == "a\n1\n\nb\n2\n"
    js = tailscope("db", dataset, "-e", "SELECT 1 AS a", "-e", "SELECT 2 AS b", "-f", "json").stdout
    dec, pos, got = json.JSONDecoder(), 0, []
    while pos < len(js.strip()):
        doc, pos = dec.raw_decode(js, pos)
        got.append(doc)
        while pos < len(js) and js[pos].isspace():
            pos += 1
    assert got == [[{"a": 1}], [{"b": 2}]]  # one JSON document per result (jq reads the stream)
    bad = tailscope("db", dataset, "-e", "SELECT nope FROM flows")
    assert bad.returncode == 1 and "query failed" in bad.stderr and bad.stdout == ""


def test_the_shell_opens_the_database(dataset):
    """Without -e on a terminal `tailscope db` runs the DuckDB shell (duckdb-cli) on the database;
    here the same binary is asked a query non-interactively, which proves it reads the file."""
    shell = duckdb_shell()
    assert shell, "duckdb-cli is a dependency: its shell must be found"
    assert tailscope("db", dataset).returncode == 0  # stdin is not a terminal: build only
    r = subprocess.run([shell, "-readonly", "-csv", str(dataset / "tailscope.duckdb"), "-c", "SELECT count(*) AS n FROM flows"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "n" and int(r.stdout.splitlines()[1]) > 0


def test_conn_lists_every_connection_and_filters(dataset, tmp_path):
    r = tailscope("conn", dataset, "-f", "csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    n = int(tailscope("db", dataset, "-e", "SELECT count(*) AS n FROM flows", "-f", "csv").stdout.splitlines()[1])
    assert len(rows) == n > 0 and {"flow_id", "client", "server", "retx", "signatures"} <= set(rows[0])
    assert all(r["client"].rsplit(":", 1)[1].isdigit() for r in rows)
    picked = tailscope("conn", dataset, "--where", "server_port = 443 OR retx >= 0", "-c", "flow_id,retx", "-n", "1")
    assert picked.stdout.splitlines()[0] == "flow_id\tretx" and len(picked.stdout.splitlines()) == 2
    bad = tailscope("conn", dataset, "--where", "no_such_column = 1")
    assert bad.returncode == 2 and "no_such_column" in bad.stderr and "Traceback" not in bad.stderr


def test_conn_brackets_ipv6_addresses(tmp_path):
    out = tmp_path / "v6"
    assert tailscope("analyze", SAMPLE.with_name("clean_ipv6.pcap"), "--out", out, "-q").returncode == 0
    rows = list(csv.DictReader(io.StringIO(tailscope("conn", out, "-f", "csv", "-c", "client,server").stdout)))
    assert rows and all(r["client"].startswith("[") and "]:" in r["client"] for r in rows)


def test_json_ids_are_strings(dataset):
    """jq and JavaScript read JSON numbers as doubles: a 64-bit flow id would change through them."""
    csv_ids = tailscope("db", dataset, "-e", "SELECT flow_id FROM flows ORDER BY flow_id", "-f", "csv").stdout.split()[1:]
    js = json.loads(tailscope("db", dataset, "-e", "SELECT flow_id FROM flows ORDER BY flow_id", "-f", "json").stdout)
    assert [r["flow_id"] for r in js] == csv_ids and any(abs(int(i)) > 2**53 for i in csv_ids)
    (row,) = json.loads(tailscope("db", dataset, "-e", "SELECT 9007199254740993 AS big, 3 AS small, [12345678901234567890] AS l",
                                  "-f", "json").stdout)
    assert row == {"big": "9007199254740993", "small": 3, "l": ["12345678901234567890"]}
    conn = json.loads(tailscope("conn", dataset, "-c", "flow_id", "-f", "json").stdout)
    assert sorted(r["flow_id"] for r in conn) == sorted(csv_ids)


def test_sql_piped_on_stdin_runs_as_e_does(dataset):
    r = subprocess.run([sys.executable, "-m", "tailscope", "db", str(dataset), "-f", "csv"], capture_output=True, text=True,
                       timeout=120, input="SELECT 1 AS a;\nSELECT count(*) > 0 AS b FROM flows;\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "a\n1\n\nb\nTrue\n"
    bad = subprocess.run([sys.executable, "-m", "tailscope", "db", str(dataset)], capture_output=True, text=True,
                         timeout=120, input="SELECT nope FROM flows;")
    assert bad.returncode == 1 and "query failed" in bad.stderr


def test_queries_on_a_dataset_that_cannot_hold_the_database(dataset, tmp_path):
    """The database file cannot be written (here a directory stands in its place, as a read-only
    dataset would refuse it; root ignores permissions): -e and piped SQL run on in-memory views,
    the shell says why it cannot open and how to proceed."""
    import shutil

    ro = tmp_path / "ro"
    shutil.copytree(dataset, ro, ignore=shutil.ignore_patterns("tailscope.duckdb"))
    (ro / "tailscope.duckdb").mkdir()
    r = tailscope("db", ro, "-e", "SELECT count(*) > 0 AS ok FROM flows", "-f", "csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ok\nTrue\n" and "database: in memory" in r.stderr
    shell = tailscope("db", ro, "--build-only")
    assert shell.returncode == 4 and "--db FILE" in shell.stderr and "Traceback" not in shell.stderr

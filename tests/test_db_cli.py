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
    assert r.stdout == "a\n1\nb\n2\n"
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

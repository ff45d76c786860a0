"""The command line: help everywhere, version, and the end-to-end path CLI → Parquet → DuckDB."""
from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from support import corpus
from tailscope.cli import build_parser


def cli(*args):
    return subprocess.run([sys.executable, "-m", "tailscope", *args], capture_output=True, text=True, timeout=300)


def _subcommands():
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return sorted(action.choices)


def test_top_level_help_lists_commands():
    r = cli("--help")
    assert r.returncode == 0
    for name in ("analyze", "db"):
        assert name in r.stdout


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_has_help(command):
    r = cli(command, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: tailscope " + command in r.stdout


def test_analyze_help_lists_every_exit_code():
    """Every status `tailscope analyze` can return is in its --help: the command's own codes, the
    CLI's file and internal errors, Ctrl-C and a closed pipe (python/tailscope/cli.py)."""
    import re
    import inspect

    from tailscope import cli as top
    from tailscope.jobs.commands import analyze

    codes = {v for k, v in vars(analyze).items() if k.startswith("EXIT_")}
    codes |= {v for k, v in vars(top).items() if k.startswith("EXIT_")}
    codes |= {int(c) for c in re.findall(r"return (\d+)\b(?! *\+)", inspect.getsource(top.main))}
    codes |= {128 + 13} if "128 + 13" in inspect.getsource(top.main) else set()
    text = cli("analyze", "--help").stdout
    listed = {int(m) for m in re.findall(r"^ +(\d+) ", text.split("exit status:")[1].split("\n\n")[0], re.M)}
    assert codes <= listed, f"--help misses exit codes {sorted(codes - listed)}"


def test_version():
    r = cli("--version")
    assert r.returncode == 0 and r.stdout.startswith("tailscope ")


def test_end_to_end_corpus_to_duckdb(tmp_path):
    """Acceptance 5: the CLI on the whole corpus, then queries against the DuckDB database."""
    out = tmp_path / "ds"
    r = cli("analyze", str(corpus.corpus_dir() / "pcaps"), "--out", str(out), "-q")
    assert r.returncode == 0, r.stderr
    r = cli("db", str(out))
    assert r.returncode == 0, r.stderr
    con = duckdb.connect(str(out / "tailscope.duckdb"), read_only=True)
    frames = sum(row["packets"] for row in corpus.manifest())
    assert con.execute("SELECT sum(frames) FROM files").fetchone()[0] == frames
    assert con.execute("SELECT count(*) FROM accounting WHERE NOT balanced").fetchone()[0] == 0
    decoded = con.execute("SELECT sum(decoded) FROM files").fetchone()[0]
    assert con.execute("SELECT count(*) FROM packets").fetchone()[0] == decoded
    # Packets and flows join: every packet belongs to a flow, and the counts agree.
    mismatched = con.execute(
        """SELECT count(*) FROM flows f JOIN (SELECT flow_id, count(*) n FROM packets GROUP BY flow_id) p USING (flow_id)
           WHERE p.n <> f.packets"""
    ).fetchone()[0]
    assert mismatched == 0
    assert con.execute("SELECT count(*) FROM packets WHERE flow_id NOT IN (SELECT flow_id FROM flows)").fetchone()[0] == 0
    protocols = dict(con.execute("SELECT protocol, count(*) FROM flows GROUP BY ALL").fetchall())
    assert protocols["tcp"] > 40 and protocols["quic"] > 40 and protocols["udp"] > 5
    # A query in the spirit of the dashboards: per-day flows and bytes.
    rows = con.execute("SELECT date, count(*), sum(bytes) FROM flows GROUP BY date ORDER BY date").fetchall()
    assert len(rows) > 10
    r = cli("db", str(out), "-e", "SELECT count(*) AS flows FROM flows")
    assert r.returncode == 0 and "flows" in r.stdout


def test_analyze_without_out_is_a_quick_look(tmp_path):
    """`tailscope analyze F` without --out, as tcptrace or tshark -r: the connections listed (as
    `tailscope conn` lists them), the summary on standard error, no dataset left anywhere."""
    pcap = corpus.pcap_path("wikipedia.pcap")
    out = tmp_path / "ds"
    assert cli("analyze", str(pcap), "--out", str(out), "-q").returncode == 0
    want = cli("conn", str(out)).stdout
    (tmp_path / "tmp").mkdir()
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(pcap)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path, env={**os.environ, "TMPDIR": str(tmp_path / "tmp")})
    assert r.returncode == 0, r.stderr
    assert r.stdout == want and len(want.splitlines()) > 2
    assert "total: 1 files" in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "tmp"] and not any((tmp_path / "tmp").iterdir())

"""Every command, given bad arguments, answers in one line naming what is wrong: never a Python
traceback (issue 17). The list walks the parser, so a new command is checked without being added."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tailscope.cli import EXIT_FILE_ERROR, build_parser

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "clean.pcap"
# Not creatable even by root: /proc refuses new entries.
UNWRITABLE = "/proc/tailscope-test/out"


def commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sorted(sub.choices)


def tailscope(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tailscope", *map(str, args)], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cli") / "ds"
    assert tailscope("analyze", SAMPLE, "--out", out, "-q").returncode == 0
    return out


def bad_arguments(tmp: Path, dataset: Path) -> list[list[str]]:
    not_a_dir = tmp / "file.txt"
    not_a_dir.write_text("x")
    missing = tmp / "missing"
    calls = [["--bogus"]]
    for cmd in commands():
        calls += [[cmd], [cmd, "--bogus"], [cmd, str(missing)], [cmd, str(not_a_dir)]]
    calls += [
        ["analyze", str(SAMPLE), "--out", UNWRITABLE],
        ["analyze", str(SAMPLE), "--out", str(not_a_dir)],
        ["analyze", str(missing), "--out", str(tmp / "never")],
        ["analyze", str(SAMPLE), "--out", str(tmp / "x"), "--prefixes", str(missing)],
        ["analyze", str(SAMPLE), "--out", str(tmp / "x"), "--sessions", str(not_a_dir)],
        ["analyze", str(SAMPLE), "--out", str(tmp / "x"), "--max-flows", "0"],
        ["analyze", str(SAMPLE), "--out", str(tmp / "x"), "--keylog", str(missing)],
        ["db", str(dataset), "--db", UNWRITABLE],
        ["db", str(dataset), "-e", "SELECT no_such_column FROM flows"],
        ["stats", str(dataset), "--week", "last"],
        ["report", str(dataset), "--out", UNWRITABLE],
        ["report", str(dataset), "--out", str(tmp / "r"), "--week", "2026-W99"],
        ["agent", "run", "--config", str(missing)],
        ["agent", "status", "--config", str(not_a_dir)],
    ]
    return calls


def test_no_command_answers_bad_arguments_with_a_traceback(tmp_path, dataset):
    failures = []
    for args in bad_arguments(tmp_path, dataset):
        r = tailscope(*args)
        if "Traceback" in r.stderr or "Traceback" in r.stdout or r.returncode == 0 and args[-1] == "--bogus":
            failures.append(f"tailscope {' '.join(args)} → {r.returncode}\n{r.stderr[-800:]}")
        elif r.returncode != 0 and not (r.stderr.strip() or "usage:" in r.stdout):
            failures.append(f"tailscope {' '.join(args)} → {r.returncode} without a word")
    assert not failures, "\n\n".join(failures)
    assert not (tmp_path / "never").exists(), "a mistyped input left a dataset directory"


@pytest.mark.parametrize("cmd", [["analyze", str(SAMPLE), "--out"], ["report", "DATASET", "--out"], ["db", "DATASET", "--db"]])
def test_an_unwritable_output_is_one_line_naming_it(cmd, dataset):
    args = [str(dataset) if a == "DATASET" else a for a in cmd] + [UNWRITABLE]
    r = tailscope(*args)
    assert r.returncode == EXIT_FILE_ERROR, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "/proc/tailscope-test" in lines[0] and lines[0].startswith(f"tailscope {cmd[0]}: error:")

"""Locate the read-only test corpus and read its MANIFEST.tsv.

The corpus is required by this project's tests: when it is missing we raise, we do not skip.
It is read in place; nothing is ever copied into the repository.
"""
from __future__ import annotations

import csv
import functools
import os
from pathlib import Path

ENV_VAR = "TAILSCOPE_CORPUS"
REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/support/corpus.py -> repo root

_INT_COLUMNS = ("bytes", "packets")
_BOOL_COLUMNS = ("has_zeek_baseline",)


class CorpusMissingError(FileNotFoundError):
    """The corpus directory (or its MANIFEST.tsv) is not where we expect it."""


def corpus_dir() -> Path:
    """``$TAILSCOPE_CORPUS`` if set, else ``<repo root>/../shared/corpus``; raise if absent."""
    env = os.environ.get(ENV_VAR)
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "corpus"
    if not (path / "MANIFEST.tsv").is_file():
        how = f"${ENV_VAR}={env!r}" if env else f"default location (set ${ENV_VAR} to override)"
        raise CorpusMissingError(
            f"test corpus not found: expected {path}/MANIFEST.tsv ({how}). "
            "The corpus is required for these tests."
        )
    return path


@functools.cache
def _manifest(root: Path) -> tuple[dict, ...]:
    with open(root / "MANIFEST.tsv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    for row in rows:
        for col in _INT_COLUMNS:
            row[col] = int(row[col])
        for col in _BOOL_COLUMNS:
            if row[col] not in ("yes", "no"):
                raise ValueError(f"MANIFEST.tsv: {row['file']}: {col}={row[col]!r}")
            row[col] = row[col] == "yes"
    return tuple(rows)


def manifest() -> list[dict]:
    """MANIFEST.tsv rows (all str, except ``bytes``/``packets`` int, ``has_zeek_baseline`` bool)."""
    return [dict(row) for row in _manifest(corpus_dir())]


def pcap_names() -> list[str]:
    """All capture file names, in MANIFEST order."""
    return [row["file"] for row in manifest()]


def manifest_row(name: str) -> dict:
    for row in manifest():
        if row["file"] == name:
            return row
    raise KeyError(f"{name!r} is not in {corpus_dir()}/MANIFEST.tsv")


def pcap_path(name: str) -> Path:
    """Path of ``pcaps/<name>``; raise if the file does not exist."""
    path = corpus_dir() / "pcaps" / name
    if not path.is_file():
        raise FileNotFoundError(f"capture {name!r} not found at {path}")
    return path


def peers_dir() -> Path:
    return corpus_dir() / "peers"

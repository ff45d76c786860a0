"""Locate the read-only test corpus and read its MANIFEST.tsv.

The corpus lives in the repository (tests/corpus/: the captures, their peers' outputs, MANIFEST.tsv
and the README with provenance and licences), so a bare clone tests itself. It is required: when it
is missing we raise, we do not skip. ``$TAILSCOPE_CORPUS`` points the tests at another copy.
"""
from __future__ import annotations

import csv
import functools
import os
from pathlib import Path

ENV_VAR = "TAILSCOPE_CORPUS"
REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/support/corpus.py -> repo root
CORPUS_DEFAULT = REPO_ROOT / "tests" / "corpus"

_INT_COLUMNS = ("bytes", "packets")
_BOOL_COLUMNS = ("has_zeek_baseline",)


class CorpusMissingError(FileNotFoundError):
    """The corpus directory (or its MANIFEST.tsv) is not where we expect it."""


def corpus_dir() -> Path:
    """``$TAILSCOPE_CORPUS`` if set, else ``<repo root>/tests/corpus``; raise if absent."""
    env = os.environ.get(ENV_VAR)
    path = Path(env) if env else CORPUS_DEFAULT
    if not (path / "MANIFEST.tsv").is_file():
        how = f"${ENV_VAR}={env!r}" if env else f"default location (set ${ENV_VAR} to override)"
        raise CorpusMissingError(
            f"test corpus not found: expected {path}/MANIFEST.tsv ({how}). "
            "The corpus is required for these tests."
        )
    return path


def repro_dir() -> Path:
    """``<repo root>/tests/repro``: the minimal reproductions of defects found on public captures
    (its README.md says what each holds and the right answer); raise if absent, as the corpus."""
    path = REPO_ROOT / "tests" / "repro"
    if not (path / "README.md").is_file():
        raise CorpusMissingError(f"repro captures not found: expected {path}/README.md. They are required for these tests.")
    return path


def require_samples(*names: str) -> Path:
    """``<repo root>/samples``, holding ``<name>.pcap`` for each name (default: clean): the lab
    samples are bundled as the corpus is, and a test that reads them fails without them."""
    path = REPO_ROOT / "samples"
    missing = [n for n in (names or ("clean",)) if not (path / f"{n}.pcap").is_file()]
    if missing:
        raise CorpusMissingError(f"bundled samples not found: {', '.join(f'{n}.pcap' for n in missing)} in {path}")
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

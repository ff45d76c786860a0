"""`pip install` without setuptools warnings: every folder shipped under the tailscope import
name is a declared package (setuptools warns about data folders it finds but was not told of)."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_shipped_folder_is_a_declared_package():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared, dirs = set(cfg["packages"]), cfg["package-dir"]
    missing = []
    for name, folder in dirs.items():
        for d in (ROOT / folder).rglob("*"):
            if d.is_dir() and "__pycache__" not in d.parts and any(f.is_file() for f in d.iterdir()):
                sub = name + "." + ".".join(d.relative_to(ROOT / folder).parts)
                if sub not in declared:
                    missing.append(sub)
    assert not missing, missing

"""The ledger of processed inputs: which capture files a dataset already holds.

It is read from the committed run manifests (``<out>/_runs/<run_id>.json``), which list every
input with its sha256 and status. A manifest is the commit point of its run (jobs/dataset.py), so
the ledger changes in the same atomic step as the data: a run killed midway left no manifest and
none of its inputs count as processed. Files are known by content, not by name, so a file shipped
twice (an agent retry, a copy in another landing-zone folder) is read once.
"""
from __future__ import annotations

import json
from pathlib import Path

# A partial file's frames before the error are in the dataset: reading it again would duplicate
# them. A failed file contributed nothing and is retried by the next run.
PROCESSED_STATUSES = ("ok", "partial")


def processed(out: Path) -> dict[str, str]:
    """sha256 → run_id of every input a committed run processed."""
    done: dict[str, str] = {}
    runs = Path(out) / "_runs"
    if not runs.is_dir():
        return done
    for manifest in sorted(runs.glob("*.json")):
        try:
            m = json.loads(manifest.read_text())
        except (OSError, ValueError) as exc:
            raise LedgerError(f"{manifest}: unreadable run manifest ({exc}); move it away to rebuild the ledger") from exc
        for entry in m.get("inputs", []):
            sha = entry.get("sha256")
            if sha and entry.get("status") in PROCESSED_STATUSES:
                done.setdefault(sha, m.get("run_id", manifest.stem))
    return done


class LedgerError(RuntimeError):
    pass

"""The ledger of processed inputs: which capture files a dataset already holds.

It is read from the committed run manifests (``<out>/_runs/<run_id>.json``), which list every
input with its sha256 and status. A manifest is the commit point of its run (jobs/dataset.py), so
the ledger changes in the same atomic step as the data: a run killed midway left no manifest and
none of its inputs count as processed. Files are known by content, not by name, so a file shipped
twice (an agent retry, a copy in another landing-zone folder) is read once.
"""
from __future__ import annotations

import json

from tailscope.jobs.dataset import committed_runs
from tailscope.jobs.storage import join, location

# A partial file's frames before the error are in the dataset: reading it again would duplicate
# them. A failed file contributed nothing and is retried by the next run.
PROCESSED_STATUSES = ("ok", "partial")


class Ledger:
    """What the committed runs of a dataset processed, read once."""

    def __init__(self, out):
        loc = location(out)
        # sha256 → run_id; (path as named, size) → sha256
        self.by_content: dict[str, str] = {}
        self.by_name: dict[tuple[str, int], str] = {}
        for manifest in sorted(committed_runs(out)):
            path = join(out, "_runs", f"{manifest}.json")
            try:
                m = json.loads(loc.read_text(path))
            except (OSError, ValueError) as exc:
                raise LedgerError(f"{path}: unreadable run manifest ({exc}); move it away to rebuild the ledger") from exc
            for entry in m.get("inputs", []):
                sha = entry.get("sha256")
                if not sha or entry.get("status") not in PROCESSED_STATUSES:
                    continue
                self.by_content.setdefault(sha, m.get("run_id", manifest))
                # A landing zone's files are immutable once shipped: a file seen before under the
                # same name and size need not be read again to be known (the Spark driver reads
                # no capture).
                if entry.get("size") is not None:
                    self.by_name[(entry["path"], int(entry["size"]))] = sha


def processed(out) -> dict[str, str]:
    """sha256 → run_id of every input a committed run processed."""
    return Ledger(out).by_content


class LedgerError(RuntimeError):
    pass

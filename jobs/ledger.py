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


def processed(out) -> dict[str, str]:
    """sha256 → run_id of every input a committed run processed."""
    loc = location(out)
    done: dict[str, str] = {}
    for manifest in sorted(committed_runs(out)):
        path = join(out, "_runs", f"{manifest}.json")
        try:
            m = json.loads(loc.read_text(path))
        except (OSError, ValueError) as exc:
            raise LedgerError(f"{path}: unreadable run manifest ({exc}); move it away to rebuild the ledger") from exc
        for entry in m.get("inputs", []):
            sha = entry.get("sha256")
            if sha and entry.get("status") in PROCESSED_STATUSES:
                done.setdefault(sha, m.get("run_id", manifest))
    return done


def processed_names(out) -> dict[tuple[str, int], str]:
    """(path as named, size) → sha256 of the inputs committed runs processed: a landing zone's
    files are immutable once shipped, so a file seen before under the same name and size need
    not be read again to know it (the Spark engine's driver reads no capture)."""
    loc = location(out)
    names: dict[tuple[str, int], str] = {}
    for manifest in sorted(committed_runs(out)):
        m = json.loads(loc.read_text(join(out, "_runs", f"{manifest}.json")))
        for entry in m.get("inputs", []):
            if entry.get("sha256") and entry.get("status") in PROCESSED_STATUSES and entry.get("size") is not None:
                names[(entry["path"], int(entry["size"]))] = entry["sha256"]
    return names


class LedgerError(RuntimeError):
    pass

"""The ledger of processed inputs: which capture files a dataset already holds.

It is read from the committed run manifests (``<out>/_runs/<run_id>.json``), which list every
input with its sha256 and status. A manifest is the commit point of its run (jobs/dataset/staged.py), so
the ledger changes in the same atomic step as the data: a run killed midway left no manifest and
none of its inputs count as processed. Files are known by content, not by name, so a file shipped
twice (an agent retry, a copy in another landing-zone folder) is read once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from tailscope.jobs.dataset.staged import committed_runs
from tailscope.jobs.dataset.storage import join, location

# A partial file's frames before the error are in the dataset: reading it again would duplicate
# them. A failed file contributed nothing and is retried by the next run.
PROCESSED_STATUSES = ("ok", "partial")


@dataclass(frozen=True)
class Entry:
    """One processed input of one committed run."""

    run_id: str
    path: str
    sha256: str
    capture_id: str | None


class Ledger:
    """What the committed runs of a dataset processed, read once."""

    def __init__(self, out):
        loc = location(out)
        # sha256 → run_id; (path as named, size) → sha256
        self.by_content: dict[str, str] = {}
        self.by_name: dict[tuple[str, int], str] = {}
        # sha256 → every run that processed it; capture_id → its processed inputs
        self.entries: dict[str, list[Entry]] = {}
        self.by_capture: dict[str, list[Entry]] = {}
        # capture_id → runs whose parts hold rows of it (the runs that analysed it, and the runs
        # that carried its rows over when a --reprocess rewrote a part it shared, jobs/run/reprocess.py)
        self.holders: dict[str, set[str]] = {}
        for manifest in sorted(committed_runs(out)):
            path = join(out, "_runs", f"{manifest}.json")
            try:
                m = json.loads(loc.read_text(path))
            except (OSError, ValueError) as exc:
                raise LedgerError(f"{path}: unreadable run manifest ({exc}); move it away to rebuild the ledger") from exc
            run_id = m.get("run_id", manifest)
            for capture in m.get("carried_captures", []):
                self.holders.setdefault(capture, set()).add(run_id)
            for entry in m.get("inputs", []):
                sha = entry.get("sha256")
                if not sha or entry.get("status") not in PROCESSED_STATUSES:
                    continue
                self.by_content.setdefault(sha, run_id)
                e = Entry(run_id, entry["path"], sha, entry.get("capture_id"))
                self.entries.setdefault(sha, []).append(e)
                if e.capture_id is not None:
                    self.by_capture.setdefault(e.capture_id, []).append(e)
                    self.holders.setdefault(e.capture_id, set()).add(run_id)
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

"""The ledger of processed inputs: which capture files a dataset already holds.

It is read from the committed run manifests (``<out>/_runs/<run_id>.json``), which list every
input with its sha256 and status. A manifest is the commit point of its run (jobs/dataset/staged.py), so
the ledger changes in the same atomic step as the data: a run killed midway left no manifest and
none of its inputs count as processed. Files are known by content, not by name, so a file shipped
twice (an agent retry, a copy in another landing-zone folder) is read once.

The same manifests say how the dataset was made, and a run that would make it otherwise is
refused before it reads anything (`check_settings`): client addresses pseudonymized with one key
or not at all, and one capture filter (`--filter`), so that no table mixes real addresses with
pseudonyms or a filtered slice with whole captures. The time window (`--since`/`--until`) belongs
to each input: an input the dataset holds, asked for again with a window its run did not cover,
is not skipped as "already in the dataset" (jobs/run/admission.py).
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
    size: int | None = None
    # the window its run took frames from, ns since the epoch (None: unbounded)
    since_ns: int | None = None
    until_ns: int | None = None


@dataclass(frozen=True)
class Settings:
    """How a dataset's rows were made, from its first committed run that processed an input."""

    run_id: str
    key_fingerprint: str | None  # the Crypto-PAn key of client pseudonyms; None: real addresses
    bpf_filter: str | None


def run_settings(manifest: dict, run_id: str) -> Settings:
    pseudo = (manifest.get("totals") or {}).get("pseudonymization") or {}
    return Settings(run_id, pseudo.get("key_fingerprint"), (manifest.get("options") or {}).get("bpf_filter") or None)


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
        # path as named → its processed entries (a capture that grew is found by its path)
        self.by_path: dict[str, list[Entry]] = {}
        # sha256 → run_id of inputs `tailscope prune` took out of the ledger (below the horizon)
        self.pruned: dict[str, str] = {}
        self.settings: Settings | None = None
        for manifest in sorted(committed_runs(out)):
            path = join(out, "_runs", f"{manifest}.json")
            try:
                m = json.loads(loc.read_text(path))
            except (OSError, ValueError) as exc:
                raise LedgerError(f"{path}: unreadable run manifest ({exc}); move it away to rebuild the ledger") from exc
            run_id = m.get("run_id", manifest)
            for capture in m.get("carried_captures", []):
                self.holders.setdefault(capture, set()).add(run_id)
            options = m.get("options") or {}
            for entry in m.get("pruned_inputs", []):
                if entry.get("sha256") and entry.get("status") in PROCESSED_STATUSES:
                    self.pruned.setdefault(entry["sha256"], run_id)
                    self.settings = self.settings or run_settings(m, run_id)
            for entry in m.get("inputs", []):
                sha = entry.get("sha256")
                if entry.get("status") in PROCESSED_STATUSES:
                    # a stdin stream of an older version has no sha256, yet its rows are there
                    self.settings = self.settings or run_settings(m, run_id)
                if not sha or entry.get("status") not in PROCESSED_STATUSES:
                    continue
                self.by_content.setdefault(sha, run_id)
                e = Entry(run_id, entry["path"], sha, entry.get("capture_id"), entry.get("size"),
                          options.get("since_ns"), options.get("until_ns"))
                self.entries.setdefault(sha, []).append(e)
                self.by_path.setdefault(e.path, []).append(e)
                if e.capture_id is not None:
                    self.by_capture.setdefault(e.capture_id, []).append(e)
                    self.holders.setdefault(e.capture_id, set()).add(run_id)
                # A landing zone's files are immutable once shipped: a file seen before under the
                # same name and size need not be read again to be known (the Spark driver reads
                # no capture).
                if entry.get("size") is not None:
                    self.by_name[(entry["path"], int(entry["size"]))] = sha


def check_settings(known: Ledger, key_fingerprint: str | None, bpf_filter: str | None) -> None:
    """Refuse (LedgerError, one line) a run whose rows would not be made as the dataset's are."""
    have = known.settings
    if have is None:
        return
    if have.key_fingerprint != key_fingerprint:
        was = f"pseudonymized with key {have.key_fingerprint}" if have.key_fingerprint else "not pseudonymized"
        now = f"pseudonymizes with key {key_fingerprint}" if key_fingerprint else "would store real client addresses"
        raise LedgerError(f"the dataset's client addresses are {was} (run {have.run_id}); this run {now}: "
                          "one dataset holds one kind of client address, use another --out")
    if have.bpf_filter != (bpf_filter or None):
        was = f"--filter {have.bpf_filter!r}" if have.bpf_filter else "no --filter"
        now = f"--filter {bpf_filter!r}" if bpf_filter else "no --filter"
        raise LedgerError(f"the dataset was analysed with {was} (run {have.run_id}); this run has {now}: "
                          "its tables would mix two selections, use another --out")


def window_covers(entry: Entry, since_ns: int | None, until_ns: int | None) -> bool:
    """Did `entry`'s run take every frame of window [since_ns, until_ns) (None: unbounded)?"""
    lo_ok = entry.since_ns is None or (since_ns is not None and entry.since_ns <= since_ns)
    hi_ok = entry.until_ns is None or (until_ns is not None and entry.until_ns >= until_ns)
    return lo_ok and hi_ok


def processed(out) -> dict[str, str]:
    """sha256 → run_id of every input a committed run processed."""
    return Ledger(out).by_content


class LedgerError(RuntimeError):
    pass

"""The spool: where files wait between capture and the landing zone, under a disk quota.

Layout of ``spool_dir``::

    capture/     <stem>.pcap (raw, written by tcpdump), <stem>.stderr, <stem>.meta.json
    dedupe/      <stem>.json   packets of the previous file that this one may repeat (hand-over)
    tmp/         finalization temporaries (emptied at start)
    ready/       <stem>.pcap.gz|.zst + <stem>.manifest.json    finished, waiting to be shipped
    tombstones/  <stem>.dropped.json                           quota drops, waiting to be reported
    state.json, journal.jsonl, metrics.prom, agent.lock

Invariant that recovery relies on: an item is pending exactly when ``ready/<stem>.manifest.json``
exists. Finalization renames the data file in first and the manifest last; shipping and dropping
delete the manifest first and the data file last. A data file without a manifest is therefore
always garbage (either its raw capture is still there to redo it, or it has been shipped/dropped).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import manifest as mf
from .fsutil import Journal, atomic_write_json, dir_size, free_bytes, read_json, unlink_quiet
from .logs import get_logger, log_event, utc_now_iso
from .state import AgentState

log = get_logger("spool")


@dataclass
class ReadyItem:
    stem: str
    data_path: Path
    manifest_path: Path
    manifest: dict[str, Any]

    @property
    def sort_key(self) -> tuple[int, str, int]:
        return (self.manifest.get("start_ns", 0), self.manifest.get("capture_id", ""), self.manifest.get("seq", 0))


class Spool:
    def __init__(self, root: str | Path, quota_bytes: int, min_free_bytes: int, state: AgentState,
                 journal: Journal):
        self.root = Path(root)
        self.capture_dir = self.root / "capture"
        self.dedupe_dir = self.root / "dedupe"
        self.tmp_dir = self.root / "tmp"
        self.ready_dir = self.root / "ready"
        self.tomb_dir = self.root / "tombstones"
        self.quota_bytes = quota_bytes
        self.min_free_bytes = min_free_bytes
        self.state = state
        self.journal = journal
        self.lock = threading.RLock()
        self.in_flight: set[str] = set()  # stems being uploaded right now: never dropped under them
        self._last_full_warning = 0.0

    def init(self) -> None:
        for d in (self.root, self.capture_dir, self.dedupe_dir, self.tmp_dir, self.ready_dir, self.tomb_dir):
            d.mkdir(parents=True, exist_ok=True)

    # ---- listing -------------------------------------------------------------------------------
    def ready_items(self) -> list[ReadyItem]:
        items = []
        for mpath in self.ready_dir.glob("*" + mf.MANIFEST_SUFFIX):
            m = read_json(mpath)
            if not m:
                continue
            stem = mf.stem_of(mpath.name)
            items.append(ReadyItem(stem, self.ready_dir / m["file"], mpath, m))
        items.sort(key=lambda i: i.sort_key)
        return items

    def tombstones(self) -> list[tuple[Path, dict[str, Any]]]:
        out = []
        for p in sorted(self.tomb_dir.glob("*" + mf.TOMBSTONE_SUFFIX)):
            t = read_json(p)
            if t:
                out.append((p, t))
        out.sort(key=lambda x: (x[1].get("start_ns", 0), x[1].get("seq", 0)))
        return out

    def usage(self) -> int:
        return dir_size(self.root)

    # ---- recovery --------------------------------------------------------------------------------
    def recover_ready(self) -> None:
        """Finish whatever a crash interrupted in ready/ (see the module invariant)."""
        for p in self.tmp_dir.iterdir():
            unlink_quiet(p)
        manifests = {mf.stem_of(p.name) for p in self.ready_dir.glob("*" + mf.MANIFEST_SUFFIX)}
        for p in self.ready_dir.iterdir():
            stem = mf.stem_of(p.name)
            if p.name.startswith("."):
                unlink_quiet(p)  # an atomic-write temporary
            elif not p.name.endswith(mf.MANIFEST_SUFFIX) and stem not in manifests:
                log_event(log, logging.INFO, "spool_orphan_removed", file=p.name)
                unlink_quiet(p)
        # a drop interrupted between its tombstone and the removal of the item: finish it
        for tpath, tomb in self.tombstones():
            stem = mf.stem_of(tpath.name)
            if stem in manifests:
                self._finish_drop(stem, tomb)

    # ---- quota -------------------------------------------------------------------------------
    def over_quota(self) -> tuple[bool, int]:
        used = self.usage()
        full = used > self.quota_bytes
        try:
            full = full or free_bytes(self.root) < self.min_free_bytes
        except OSError:
            pass
        return full, used

    def enforce_quota(self) -> int:
        """Drop the oldest finished files until the spool fits; returns how many were dropped.
        Every drop is journaled, counted, logged and leaves a tombstone that is shipped to the
        landing zone, so the gap is visible there too."""
        dropped = 0
        with self.lock:
            full, used = self.over_quota()
            while full:
                candidates = [i for i in self.ready_items() if i.stem not in self.in_flight]
                if not candidates:
                    now = time.monotonic()
                    if now - self._last_full_warning > 60:
                        self._last_full_warning = now
                        log_event(log, logging.ERROR, "spool_full_nothing_to_drop", used_bytes=used,
                                  quota_bytes=self.quota_bytes,
                                  hint="only files in capture or upload remain; raise the quota or "
                                       "lower rotate_bytes")
                    break
                self.drop(candidates[0], "quota", used_bytes=used)
                dropped += 1
                full, used = self.over_quota()
            self.state.set_gauges(spool_bytes=used)
        return dropped

    def drop(self, item: ReadyItem, reason: str, used_bytes: int = 0) -> None:
        tomb = mf.build_tombstone(item.manifest, reason, utc_now_iso())
        atomic_write_json(self.tomb_dir / (item.stem + mf.TOMBSTONE_SUFFIX), tomb)
        self.journal.append("dropped", file=item.manifest["file"], reason=reason,
                            packets=item.manifest.get("packets"), size_bytes=item.manifest.get("size_bytes"),
                            sha256=item.manifest.get("sha256"))
        log_event(log, logging.WARNING, "file_dropped", file=item.manifest["file"], reason=reason,
                  packets=item.manifest.get("packets"), size_bytes=item.manifest.get("size_bytes"),
                  spool_bytes=used_bytes, quota_bytes=self.quota_bytes)
        self._finish_drop(item.stem, tomb)

    def _finish_drop(self, stem: str, tomb: dict[str, Any]) -> None:
        self.state.apply("dropped", stem, {
            "files_dropped_quota": 1, "packets_dropped_quota": tomb.get("packets") or 0,
            "bytes_dropped_quota": tomb.get("size_bytes") or 0})
        unlink_quiet(self.ready_dir / (stem + mf.MANIFEST_SUFFIX))
        unlink_quiet(self.ready_dir / tomb["file"])

    def remove_shipped(self, item: ReadyItem) -> None:
        unlink_quiet(item.manifest_path)  # manifest first: see the module invariant
        unlink_quiet(item.data_path)

    def pending_counts(self) -> dict[str, int]:
        ready = list(self.ready_dir.glob("*" + mf.MANIFEST_SUFFIX))
        raw = list(self.capture_dir.glob("*.pcap"))
        return {"files_pending": len(ready), "tombstones_pending": len(list(self.tomb_dir.glob("*.json"))),
                "raw_files": len(raw)}


def spool_paths(root: str | os.PathLike) -> dict[str, Path]:
    root = Path(root)
    return {"state": root / "state.json", "journal": root / "journal.jsonl",
            "metrics": root / "metrics.prom", "lock": root / "agent.lock"}

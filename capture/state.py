"""Persistent agent state: sequence numbers and lifetime counters, crash-safe and idempotent.

``state.json`` is rewritten atomically (fsync + rename) on every change. Counter updates are keyed
by (event, file): applying the same event twice -- which happens when the agent dies after doing
the work but before deleting its input, and redoes the step on restart -- counts once. That makes
the reported numbers (files shipped, files dropped by the quota...) exact across ``kill -9``.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .fsutil import atomic_write_json, read_json

STATE_VERSION = 1
_APPLIED_MAX = 8192  # far more events than can be in flight; old keys can never be replayed

COUNTERS = (
    "files_finished", "packets", "bytes_captured", "kernel_drops", "interface_drops",
    "overlap_duplicates_removed", "files_stats_missing",
    "files_shipped", "bytes_shipped", "files_already_landed", "upload_failures",
    "files_dropped_quota", "packets_dropped_quota", "bytes_dropped_quota",
    "tombstones_shipped", "capture_starts", "capture_failures", "recovered_files",
    "ship_conflicts",
)


class AgentState:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        data = read_json(self.path, default=None) or {}
        self.next_seq: dict[str, int] = dict(data.get("next_seq", {}))
        self.last_file: dict[str, str] = dict(data.get("last_file", {}))
        self.counters: dict[str, int] = {k: int(data.get("counters", {}).get(k, 0)) for k in COUNTERS}
        self.gauges: dict[str, float] = dict(data.get("gauges", {}))
        self._applied: OrderedDict[str, None] = OrderedDict((k, None) for k in data.get("applied", []))

    def _save(self) -> None:
        atomic_write_json(self.path, {
            "version": STATE_VERSION,
            "next_seq": self.next_seq,
            "last_file": self.last_file,
            "counters": self.counters,
            "gauges": self.gauges,
            "applied": list(self._applied),
        })

    def allocate_seq(self, cap_id: str) -> int:
        """Reserve the next file number of a capture; persisted before the file exists, so a number
        is never reused even if the agent dies right after."""
        with self._lock:
            seq = self.next_seq.get(cap_id, 0)
            self.next_seq[cap_id] = seq + 1
            self._save()
            return seq

    def apply(self, event: str, name: str, deltas: dict[str, int] | None = None,
              gauges: dict[str, float] | None = None, last_file: tuple[str, str] | None = None) -> bool:
        """Apply counter deltas for (event, name) once; returns False if it was applied already."""
        key = f"{event}:{name}"
        with self._lock:
            if key in self._applied:
                return False
            for k, v in (deltas or {}).items():
                self.counters[k] = self.counters.get(k, 0) + int(v or 0)
            self.gauges.update(gauges or {})
            if last_file:
                self.last_file[last_file[0]] = last_file[1]
            self._applied[key] = None
            while len(self._applied) > _APPLIED_MAX:
                self._applied.popitem(last=False)
            self._save()
            return True

    def was_applied(self, event: str, name: str) -> bool:
        with self._lock:
            return f"{event}:{name}" in self._applied

    def bump(self, counter: str, n: int = 1, gauges: dict[str, float] | None = None) -> None:
        """Non-idempotent counters (failures, restarts): each occurrence is a real new event."""
        with self._lock:
            self.counters[counter] = self.counters.get(counter, 0) + n
            self.gauges.update(gauges or {})
            self._save()

    def set_gauges(self, **gauges: float) -> None:
        with self._lock:
            self.gauges.update(gauges)
            self._save()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"counters": dict(self.counters), "gauges": dict(self.gauges),
                    "next_seq": dict(self.next_seq), "last_file": dict(self.last_file),
                    "time": time.time()}

"""Shipping: move finished spool items to the landing zone, oldest first, exactly once.

For each item: if the landing zone already has this file's manifest with the same sha256, it
landed before (the agent died between upload and clean-up), so only the clean-up is redone.
Otherwise upload the data file, then the manifest (the manifest is what makes a file "landed"),
then record the success and delete the local copy. File names are deterministic, so redoing an
upload after a crash rewrites the same object rather than creating a second one.

Failures back off exponentially (with jitter, capped) and are counted; the spool quota, not the
shipper, decides when waiting files must be given up.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable

from . import manifest as mf
from .config import AgentConfig
from .fsutil import atomic_move, unlink_quiet
from .config import landing_options
from .landing import open_target
from .logs import get_logger, log_event
from .spool import ReadyItem, Spool

log = get_logger("shipper")


class Backoff:
    def __init__(self, initial: float, maximum: float, rng: random.Random | None = None):
        self.initial, self.maximum = initial, maximum
        self.failures = 0
        self.rng = rng or random.Random()

    def next_delay(self) -> float:
        """Delay before the next attempt: exponential, capped, with half of it jittered so that
        many agents recovering from one landing-zone outage do not retry in lock step."""
        self.failures += 1
        d = min(self.maximum, self.initial * 2 ** min(self.failures - 1, 30))
        return d / 2 + self.rng.uniform(0, d / 2)

    def reset(self) -> None:
        self.failures = 0


class Shipper:
    def __init__(self, cfg: AgentConfig, spool: Spool, target_factory: Callable[[], Any] | None = None):
        self.cfg = cfg
        self.spool = spool
        self.state = spool.state
        self.journal = spool.journal
        self.target_factory = target_factory or (lambda: open_target(cfg.ship.landing, landing_options(cfg.ship)))
        self._target = None
        self.backoff = Backoff(cfg.ship.retry_initial_seconds, cfg.ship.retry_max_seconds)
        self.wake = threading.Event()
        self.stop = threading.Event()
        self.abort_deadline: float | None = None  # set at shutdown: uploads past it are abandoned
        self.thread: threading.Thread | None = None
        self.last_error: str | None = None

    # ---- one item ------------------------------------------------------------------------------
    @property
    def target(self):
        if self._target is None:
            self._target = self.target_factory()
        return self._target

    def _aborting(self) -> bool:
        return self.abort_deadline is not None and time.monotonic() > self.abort_deadline

    def ship_item(self, item: ReadyItem) -> str:
        m = item.manifest
        part = m["path"].rsplit("/", 1)[0]
        rel_manifest = f"{part}/{item.stem}{mf.MANIFEST_SUFFIX}"
        with self.spool.lock:
            if not item.manifest_path.exists():
                return "gone"  # dropped by the quota meanwhile
            self.spool.in_flight.add(item.stem)
        try:
            landed = self.target.get_json(rel_manifest)
            if landed is not None and landed.get("sha256") == m["sha256"]:
                outcome = "already_landed"
            elif landed is not None:
                self._conflict(item, landed)
                return "conflict"
            else:
                t0 = time.monotonic()
                log_event(log, logging.INFO, "file_upload_started", file=m["file"], size_bytes=m["size_bytes"])
                self.target.put_file(item.data_path, m["path"], self.cfg.ship.rate_limit_bytes_per_second,
                                     self._aborting)
                self.target.put_bytes(item.manifest_path.read_bytes(), rel_manifest)
                outcome = "shipped"
                log_event(log, logging.INFO, "file_shipped", file=m["file"], size_bytes=m["size_bytes"],
                          seconds=round(time.monotonic() - t0, 3), destination=f"{self.target.url}/{m['path']}")
            self.journal.append("shipped", file=m["file"], sha256=m["sha256"], outcome=outcome,
                                destination=m["path"])
            self.state.apply("shipped", item.stem,
                             {"files_shipped": 1, "bytes_shipped": m["size_bytes"],
                              "files_already_landed": 1 if outcome == "already_landed" else 0},
                             gauges={"last_success_timestamp_seconds": time.time()})
            self.spool.remove_shipped(item)
            return outcome
        finally:
            with self.spool.lock:
                self.spool.in_flight.discard(item.stem)

    def _conflict(self, item: ReadyItem, landed: dict) -> None:
        # Same name, different content: never overwrite what the jobs may already have read.
        # Keep ours aside for a human; this cannot happen unless two agents share an agent_id.
        qdir = self.spool.root / "conflict"
        qdir.mkdir(exist_ok=True)
        atomic_move(item.data_path, qdir / item.data_path.name)
        atomic_move(item.manifest_path, qdir / item.manifest_path.name)
        self.state.bump("ship_conflicts")
        self.journal.append("conflict", file=item.manifest["file"], ours=item.manifest["sha256"],
                            landed=landed.get("sha256"))
        log_event(log, logging.ERROR, "landing_conflict", file=item.manifest["file"],
                  ours=item.manifest["sha256"], landed=landed.get("sha256"), kept_in=str(qdir),
                  hint="two agents with the same agent_id/capture_point/interface?")

    def ship_tombstone(self, path: Path, tomb: dict) -> str:
        stem = mf.stem_of(path.name)
        part = tomb["path"].rsplit("/", 1)[0]
        landed = self.target.get_json(f"{part}/{stem}{mf.MANIFEST_SUFFIX}")
        if landed is not None and landed.get("sha256") == tomb.get("sha256"):
            # The file had landed after all (the agent died after uploading, before its clean-up,
            # and the quota then dropped the local copy): undo the drop instead of reporting a gap.
            self.journal.append("drop_reverted", file=tomb["file"])
            self.state.apply("drop_reverted", stem, {
                "files_dropped_quota": -1, "packets_dropped_quota": -(tomb.get("packets") or 0),
                "bytes_dropped_quota": -(tomb.get("size_bytes") or 0),
                "files_shipped": 1, "bytes_shipped": tomb.get("size_bytes") or 0, "files_already_landed": 1})
            unlink_quiet(path)
            return "reverted"
        self.target.put_bytes(path.read_bytes(), f"{part}/{stem}{mf.TOMBSTONE_SUFFIX}")
        self.journal.append("tombstone_shipped", file=tomb["file"])
        self.state.apply("tombstone_shipped", stem, {"tombstones_shipped": 1},
                         gauges={"last_success_timestamp_seconds": time.time()})
        unlink_quiet(path)
        return "shipped"

    # ---- passes and the loop ---------------------------------------------------------------------
    def ship_pending(self) -> int:
        """One pass over the spool; raises on the first failure (the caller backs off)."""
        n = 0
        for item in self.spool.ready_items():
            if self._aborting():
                return n
            if self.ship_item(item) in ("shipped", "already_landed"):
                n += 1
        for path, tomb in self.spool.tombstones():
            if self._aborting():
                return n
            self.ship_tombstone(path, tomb)
        return n

    def pass_with_backoff(self) -> float:
        """Run one pass; returns how long to wait before the next one."""
        try:
            self.ship_pending()
        except Exception as exc:  # any failure of the landing zone: count, back off, retry
            delay = self.backoff.next_delay()
            self._target = None  # reconnect next time
            self.last_error = f"{type(exc).__name__}: {exc}"
            self.state.bump("upload_failures", gauges={"last_failure_timestamp_seconds": time.time()})
            log_event(log, logging.WARNING, "ship_failed", error=self.last_error,
                      consecutive_failures=self.backoff.failures, retry_in_seconds=round(delay, 2),
                      files_pending=len(list(self.spool.ready_dir.glob("*" + mf.MANIFEST_SUFFIX))))
            return delay
        if self.backoff.failures:
            log_event(log, logging.INFO, "ship_recovered", after_failures=self.backoff.failures)
        self.backoff.reset()
        self.last_error = None
        return self.cfg.ship.poll_seconds

    def run(self) -> None:
        while not self.stop.is_set():
            self.spool.enforce_quota()
            delay = self.pass_with_backoff()
            self.wake.wait(delay)
            self.wake.clear()

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run_logged, name="shipper", daemon=True)
        self.thread.start()

    def _run_logged(self) -> None:
        try:
            self.run()
        except Exception:
            log_event(log, logging.CRITICAL, "shipper_crashed", exc_info=True)
            raise

    def drain(self, timeout: float) -> bool:
        """Stop the loop, then make a last bounded attempt to ship everything. True if empty."""
        self.abort_deadline = time.monotonic() + timeout
        self.stop.set()
        self.wake.set()
        if self.thread:
            self.thread.join(timeout)
        if self.thread and self.thread.is_alive():
            return False
        while not self._aborting():
            try:
                self.ship_pending()
            except Exception as exc:
                log_event(log, logging.WARNING, "ship_failed_at_shutdown", error=f"{type(exc).__name__}: {exc}")
                return False
            if not self.spool.ready_items() and not self.spool.tombstones():
                return True
        return False

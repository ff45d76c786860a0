"""The agent process: recovery, then capture (main thread), finalizer and shipper (threads), metrics.

Start-up order matters for "nothing finished is lost": first take the spool lock, then finish
whatever the previous run left (interrupted drops, raw captures, half-written temporaries), and
only then start capturing and shipping. Shutdown (SIGTERM/SIGINT) closes the current file,
finalizes it, and gives the shipper a bounded time to empty the spool; what is left stays in the
spool for the next start.
"""
from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from . import manifest as mf
from .capture import Capturer, recover_captures
from .config import AgentConfig
from .finalize import PcapError, finalize
from .fsutil import DirLock, Journal, atomic_move
from .logs import get_logger, log_event
from .metrics import MetricsServer, render, write_textfiles
from .shipper import Shipper
from .spool import Spool, spool_paths
from .state import AgentState

log = get_logger()


def agent_version() -> str:
    try:
        from tailscope import __version__

        return __version__
    except Exception:  # pragma: no cover - the capture package used on its own
        return "0+unknown"


class Finalizer:
    """Finalizes closed raw captures in the order they were closed (the hand-over de-duplication
    needs each file's predecessor finalized first), on its own thread so that compressing a big
    file never delays a rotation."""

    def __init__(self, cfg: AgentConfig, spool: Spool, on_done):
        self.cfg = cfg
        self.spool = spool
        self.on_done = on_done
        self.q: queue.Queue[str | None] = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="finalizer", daemon=True)

    def submit(self, stem: str) -> None:
        self.q.put(stem)

    def finalize_now(self, stem: str) -> None:
        delay = 1.0
        while True:
            try:
                finalize(self.spool, stem, compression=self.cfg.capture.compression,
                         level=self.cfg.capture.compression_level, agent_version=agent_version())
                break
            except PcapError as exc:
                # Not a pcap we can read (should never happen with tcpdump -w): keep it for a
                # human rather than delete or retry it forever.
                qdir = self.spool.root / "corrupt"
                qdir.mkdir(exist_ok=True)
                for p in self.spool.capture_dir.glob(f"{stem}.*"):
                    atomic_move(p, qdir / p.name)
                self.spool.journal.append("corrupt", stem=stem, error=str(exc))
                log_event(log, logging.ERROR, "raw_capture_corrupt", stem=stem, error=str(exc), kept_in=str(qdir))
                break
            except Exception as exc:  # e.g. disk full: the raw file is intact, try again
                log_event(log, logging.ERROR, "finalize_failed", stem=stem, error=f"{type(exc).__name__}: {exc}",
                          retry_in_seconds=delay, exc_info=True)
                time.sleep(delay)
                delay = min(delay * 2, 60)
        self.on_done(stem)

    def _run(self) -> None:
        while True:
            stem = self.q.get()
            if stem is None:
                return
            self.finalize_now(stem)

    def start(self) -> None:
        self.thread.start()

    def close(self, timeout: float | None = None) -> None:
        self.q.put(None)
        self.thread.join(timeout)


class Agent:
    def __init__(self, cfg: AgentConfig):
        self.cfg = cfg
        self.paths = spool_paths(cfg.spool_path)
        self.stop = threading.Event()
        self.session_id = uuid.uuid4().hex
        self.capturer: Capturer | None = None
        self.metrics_server: MetricsServer | None = None

    # ---- metrics ---------------------------------------------------------------------------------
    def metric_values(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        snap = self.state.snapshot()
        values.update(snap["counters"])
        values.update(snap["gauges"])
        values.update(self.spool.pending_counts())
        values["spool_bytes"] = self.spool.usage()
        values["spool_quota_bytes"] = self.cfg.spool.quota_bytes
        values["capture_running"] = 1 if (self.capturer and self.capturer.current
                                          and self.capturer.current.proc.alive()) else 0
        return values

    def info_labels(self) -> dict[str, str]:
        a = self.cfg.agent
        return {"version": agent_version(), "agent_id": a.agent_id, "site": a.site,
                "capture_point": a.capture_point, "interface": self.cfg.capture.interface,
                "capture_id": mf.capture_id(a.agent_id, a.capture_point, self.cfg.capture.interface),
                "session_id": self.session_id}

    def metrics_text(self) -> str:
        return render(self.metric_values(), self.info_labels())

    def write_metrics(self) -> None:
        try:
            write_textfiles(self.metrics_text(), [str(self.paths["metrics"]), self.cfg.metrics.textfile])
        except OSError as exc:
            log_event(log, logging.WARNING, "metrics_write_failed", error=str(exc))

    def _metrics_loop(self) -> None:
        while not self.stop.wait(5.0):
            self.write_metrics()

    # ---- lifecycle -------------------------------------------------------------------------------
    def _on_file_done(self, stem: str) -> None:
        self.spool.enforce_quota()
        self.shipper.wake.set()
        self.write_metrics()

    def recover(self) -> None:
        self.spool.recover_ready()
        stems = recover_captures(self.spool)
        for stem in stems:
            log_event(log, logging.INFO, "recovering_capture", stem=stem)
            before = self.state.counters.get("files_finished", 0)
            self.finalizer.finalize_now(stem)
            if self.state.counters.get("files_finished", 0) > before:
                self.state.bump("recovered_files")

    def run(self) -> int:
        from . import tcpdump

        cfg = self.cfg
        lock_down(cfg)
        lock = DirLock(self.paths["lock"])
        lock.acquire()
        try:
            self.state = AgentState(self.paths["state"])
            self.journal = Journal(self.paths["journal"])
            self.spool = Spool(cfg.spool_path, cfg.spool.quota_bytes, cfg.spool.min_free_bytes,
                               self.state, self.journal)
            self.spool.init()
            self.shipper = Shipper(cfg, self.spool)
            self.finalizer = Finalizer(cfg, self.spool, self._on_file_done)
            err = tcpdump.check_filter(cfg.capture)
            if err:
                log_event(log, logging.ERROR, "bad_filter", filter=cfg.capture.bpf_filter, error=err)
                return 2
            try:  # fail now, not at the first upload, if e.g. s3fs is not installed
                self.shipper.target  # noqa: B018 - creates the landing-zone client (no I/O)
            except ImportError as exc:
                log_event(log, logging.ERROR, "landing_driver_missing", landing=cfg.ship.landing, error=str(exc),
                          hint="install fsspec and the driver for this URL (s3fs, gcsfs, ...)")
                return 2
            except Exception as exc:  # unreachable now is fine: the shipper retries
                log_event(log, logging.WARNING, "landing_not_ready", landing=cfg.ship.landing, error=str(exc))
            versions = tcpdump.versions(cfg.capture.tcpdump)
            self.journal.append("agent_start", session_id=self.session_id, version=agent_version(), **versions)
            log_event(log, logging.INFO, "agent_start", session_id=self.session_id, version=agent_version(),
                      site=cfg.agent.site, interface=cfg.capture.interface, landing=cfg.ship.landing,
                      spool=str(cfg.spool_path), **versions)
            self.recover()
            self.spool.enforce_quota()

            self.finalizer.start()
            self.shipper.start()
            if cfg.metrics.listen:
                self.metrics_server = MetricsServer(cfg.metrics.listen, self.metrics_text)
                self.metrics_server.start()
                log_event(log, logging.INFO, "metrics_listening", address=f"{self.metrics_server.address[0]}:"
                          f"{self.metrics_server.address[1]}")
            threading.Thread(target=self._metrics_loop, name="metrics-writer", daemon=True).start()

            def _on_signal(signum, _frame):
                log_event(log, logging.INFO, "agent_stopping", signal=signal.Signals(signum).name)
                self.stop.set()

            signal.signal(signal.SIGTERM, _on_signal)
            signal.signal(signal.SIGINT, _on_signal)

            self.capturer = Capturer(cfg, self.spool, session_id=self.session_id, versions=versions,
                                     on_closed=self.finalizer.submit, stop=self.stop)
            self.write_metrics()
            self.capturer.run()  # main thread, until a signal

            self.finalizer.close()
            empty = self.shipper.drain(cfg.ship.shutdown_timeout_seconds)
            pending = self.spool.pending_counts()
            self.journal.append("agent_stop", session_id=self.session_id, **pending)
            log_event(log, logging.INFO, "agent_stopped", spool_empty=empty, **pending)
            self.write_metrics()
            return 0
        finally:
            if self.metrics_server:
                self.metrics_server.stop()
            lock.release()


def lock_down(cfg: AgentConfig) -> None:
    """Captures hold user addresses: every file the agent and its tcpdump create is 0600, every
    directory 0700 (the umask is inherited by tcpdump), the spool included when it existed."""
    os.umask(0o077)
    cfg.spool_path.mkdir(parents=True, exist_ok=True)
    os.chmod(cfg.spool_path, 0o700)


def drain(cfg: AgentConfig, timeout: float) -> int:
    """Ship what is in the spool without capturing (e.g. before decommissioning a host)."""
    agent = Agent(cfg)
    lock_down(cfg)
    paths = agent.paths
    lock = DirLock(paths["lock"])
    lock.acquire()
    try:
        state = AgentState(paths["state"])
        journal = Journal(paths["journal"])
        spool = Spool(cfg.spool_path, cfg.spool.quota_bytes, cfg.spool.min_free_bytes, state, journal)
        spool.init()
        agent.state, agent.journal, agent.spool = state, journal, spool
        agent.shipper = Shipper(cfg, spool)
        agent.finalizer = Finalizer(cfg, spool, lambda stem: None)
        agent.recover()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            delay = agent.shipper.pass_with_backoff()
            if not spool.ready_items() and not spool.tombstones():
                log_event(log, logging.INFO, "drain_complete")
                return 0
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        log_event(log, logging.ERROR, "drain_incomplete", **spool.pending_counts())
        return 1
    finally:
        lock.release()


def offline_status(cfg: AgentConfig) -> dict[str, Any]:
    """What `agent status` shows: read-only, works whether or not the agent is running."""
    from .fsutil import read_json

    root = cfg.spool_path
    paths = spool_paths(root)
    state = read_json(paths["state"], default={}) or {}
    ready = sorted((root / "ready").glob("*" + mf.MANIFEST_SUFFIX))
    tombs = sorted((root / "tombstones").glob("*" + mf.TOMBSTONE_SUFFIX))
    raw = sorted((root / "capture").glob("*.pcap"))
    running = None
    try:
        pid = int(Path(paths["lock"]).read_text().strip())
        running = Path(f"/proc/{pid}").exists() and _lock_held(paths["lock"])
    except (OSError, ValueError):
        running = False
    dropped = []
    journal = Journal(paths["journal"])
    seen = set()
    for rec in journal.read():
        if rec.get("event") == "dropped" and rec.get("file") not in seen:
            seen.add(rec.get("file"))
            dropped.append({k: rec.get(k) for k in ("ts", "file", "reason", "packets", "size_bytes")})
        if rec.get("event") == "drop_reverted":
            dropped = [d for d in dropped if d["file"] != rec.get("file")]
    from .fsutil import dir_size

    return {
        "agent_running": running,
        "spool_dir": str(root),
        "spool_bytes": dir_size(root) if root.exists() else 0,
        "spool_quota_bytes": cfg.spool.quota_bytes,
        "files_pending": len(ready),
        "oldest_pending": ready[0].name[: -len(mf.MANIFEST_SUFFIX)] if ready else None,
        "tombstones_pending": len(tombs),
        "raw_captures": [p.name for p in raw],
        "counters": state.get("counters", {}),
        "gauges": state.get("gauges", {}),
        "next_seq": state.get("next_seq", {}),
        "dropped_files": dropped[-50:],
    }


def _lock_held(path) -> bool:
    import fcntl
    import os

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)

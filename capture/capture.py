"""Capture and rotation: one tcpdump per file, handed over without a gap.

Rotation (by time, aligned to the wall clock, or by size) starts the next tcpdump first, waits
until it reports "listening", lets both run for ``handover_seconds``, and only then stops the
previous one. The overlap is needed because a stopped tcpdump loses the packets libpcap still
holds in its ring (up to its 1 s block timeout). So no packet falls between two files; the packets
seen by both during the hand-over are removed from the later file at finalization (finalize.py),
by exact match on timestamp and bytes. Each file therefore has exactly its own packets and its
own tcpdump's kernel-drop statistics.

Before each tcpdump starts, a ``<stem>.meta.json`` describing it is written to the spool; whatever
happens next (tcpdump fails, the agent is killed), recovery finds the meta and finishes the file.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import manifest as mf
from .config import AgentConfig, pseudonym_fingerprint
from .fsutil import atomic_write_json, read_json
from .logs import get_logger, log_event
from .spool import Spool
from .tcpdump import TcpdumpProcess

log = get_logger("capture")


@dataclass
class Active:
    stem: str
    proc: TcpdumpProcess
    meta: dict[str, Any]
    deadline_wall: float
    deadline_mono: float


def next_deadline(now: float, rotate_seconds: float, align: bool) -> float:
    """Wall-clock time of the next rotation. Aligned rotation cuts at multiples of rotate_seconds
    (so 300 s gives :00, :05, ...); a first period shorter than a tenth is merged into the next."""
    if not align:
        return now + rotate_seconds
    boundary = (int(now // rotate_seconds) + 1) * rotate_seconds
    if boundary - now < rotate_seconds * 0.1:
        boundary += rotate_seconds
    return boundary


class Capturer:
    def __init__(self, cfg: AgentConfig, spool: Spool, *, session_id: str, versions: dict[str, Any],
                 on_closed: Callable[[str], None], stop: threading.Event):
        self.cfg = cfg
        self.c = cfg.capture
        self.spool = spool
        self.state = spool.state
        self.session_id = session_id
        self.versions = versions
        self.pseudonym_fp = pseudonym_fingerprint(cfg)
        self.on_closed = on_closed
        self.stop = stop
        self.cap_id = mf.capture_id(cfg.agent.agent_id, cfg.agent.capture_point, self.c.interface)
        self.previous_file: str | None = self.state.last_file.get(self.cap_id)
        self.current: Active | None = None
        self.running = False

    def _meta_path(self, stem: str):
        return self.spool.capture_dir / f"{stem}.meta.json"

    def _start(self, predecessor: Active | None) -> Active | None:
        seq = self.state.allocate_seq(self.cap_id)
        start_ns = time.time_ns()
        stem = mf.file_stem(self.cap_id, start_ns, seq)
        meta = {
            "stem": stem, "seq": seq, "capture_id": self.cap_id, "session_id": self.session_id,
            "site": self.cfg.agent.site, "capture_point": self.cfg.agent.capture_point,
            "interface": self.c.interface, "agent_id": self.cfg.agent.agent_id,
            "bpf_filter": self.c.bpf_filter, "snaplen": self.c.snaplen, "hostname": socket.gethostname(),
            "start_ns": start_ns, "end_ns": None, "end_reason": None,
            "previous_file": self.previous_file, "contiguous_with_previous": False,
            "successor": None, "successor_spawned_ns": None, "pid": None, **self.versions,
            "pseudonymize_clients": self.pseudonym_fp,
        }
        atomic_write_json(self._meta_path(stem), meta)
        if predecessor is not None:
            # Recorded before the successor exists: if we die during the hand-over, recovery still
            # knows which packets of the predecessor the successor may repeat.
            predecessor.meta.update(successor=stem, successor_spawned_ns=start_ns)
            atomic_write_json(self._meta_path(predecessor.stem), predecessor.meta)
        proc = TcpdumpProcess.spawn(self.c, self.spool.capture_dir / f"{stem}.pcap",
                                    self.spool.capture_dir / f"{stem}.stderr")
        meta["pid"] = proc.pid
        atomic_write_json(self._meta_path(stem), meta)
        self.state.bump("capture_starts")
        if not proc.wait_listening(self.c.start_timeout_seconds):
            proc.stop()
            err = proc.stderr_text().strip()[-800:]
            log_event(log, logging.ERROR, "capture_start_failed", interface=self.c.interface, stem=stem,
                      stderr=err, exit_code=proc.proc.returncode)
            self.state.bump("capture_failures")
            meta.update(end_ns=time.time_ns(), end_reason="capture_error")
            atomic_write_json(self._meta_path(stem), meta)
            if predecessor is not None:
                predecessor.meta.update(successor=None, successor_spawned_ns=None)
                atomic_write_json(self._meta_path(predecessor.stem), predecessor.meta)
            self.on_closed(stem)  # finalizes it if tcpdump wrote anything, else records the gap
            return None
        contiguous = predecessor is not None and predecessor.proc.alive()
        if contiguous != meta["contiguous_with_previous"]:
            meta["contiguous_with_previous"] = contiguous
            atomic_write_json(self._meta_path(stem), meta)
        now = time.time()
        wall = next_deadline(now, self.c.rotate_seconds, self.c.align_rotation)
        active = Active(stem, proc, meta, wall, time.monotonic() + (wall - now) + self.c.rotate_seconds * 0.5)
        self.previous_file = stem + mf.DATA_SUFFIX[self.c.compression]
        log_event(log, logging.INFO, "capture_started", stem=stem, seq=seq, interface=self.c.interface,
                  pid=proc.pid, contiguous_with_previous=contiguous,
                  rotate_at=time.strftime("%H:%M:%S", time.gmtime(wall)))
        return active

    def _close(self, act: Active, reason: str) -> None:
        if reason != "capture_error" and not act.proc.alive():  # it died during the hand-over
            log_event(log, logging.ERROR, "capture_exited", stem=act.stem, exit_code=act.proc.proc.returncode,
                      stderr=act.proc.stderr_text().strip()[-800:])
            self.state.bump("capture_failures")
            reason = "capture_error"
        act.proc.stop()
        act.meta.update(end_ns=time.time_ns(), end_reason=reason)
        atomic_write_json(self._meta_path(act.stem), act.meta)
        self.on_closed(act.stem)

    def _rotate_reason(self, act: Active) -> str | None:
        if time.time() >= act.deadline_wall or time.monotonic() >= act.deadline_mono:
            return "time"
        if act.proc.file_size() >= self.c.rotate_bytes:
            return "size"
        return None

    def run(self) -> None:
        """The capture loop; returns after ``stop`` is set and the last file is closed.
        Must run on the main thread: tcpdump's parent-death signal follows the thread that started it."""
        retry = 1.0
        self.running = True
        try:
            while not self.stop.is_set():
                act = self.current
                if act is None:
                    self.current = self._start(None)
                    if self.current is None:
                        self.stop.wait(retry)
                        retry = min(retry * 2, 60.0)
                    continue
                if not act.proc.alive():
                    err = act.proc.stderr_text().strip()[-800:]
                    log_event(log, logging.ERROR, "capture_exited", stem=act.stem,
                              exit_code=act.proc.proc.returncode, stderr=err, restart_in_seconds=retry)
                    self.state.bump("capture_failures")
                    self._close(act, "capture_error")
                    self.current = None
                    # back off: a tcpdump that keeps dying (interface flapping) must not spin
                    self.stop.wait(retry)
                    retry = min(retry * 2, 60.0)
                    continue
                reason = self._rotate_reason(act)
                if reason:
                    nxt = self._start(act)
                    if nxt is None:
                        # keep the current capture going rather than lose packets; try again soon
                        act.deadline_wall = time.time() + min(5.0, self.c.rotate_seconds)
                        act.deadline_mono = time.monotonic() + min(5.0, self.c.rotate_seconds)
                        continue
                    retry = 1.0  # a capture that lived to rotate was healthy
                    self.current = nxt
                    self.stop.wait(self.c.handover_seconds)
                    if not act.proc.alive() and nxt.meta["contiguous_with_previous"]:
                        # it died before the hand-over was complete: its unread packets are lost
                        nxt.meta["contiguous_with_previous"] = False
                        atomic_write_json(self._meta_path(nxt.stem), nxt.meta)
                    self._close(act, reason)
                    continue
                self.stop.wait(min(self.c.size_check_seconds, max(0.01, act.deadline_wall - time.time())))
        finally:
            if self.current is not None:
                self._close(self.current, "shutdown")
                self.current = None
            self.running = False


def recover_captures(spool: Spool) -> list[str]:
    """Raw captures a previous run left behind, oldest first, made ready to finalize: a tcpdump
    still running (its parent-death signal was lost) is stopped, and missing end times are filled."""
    from .tcpdump import stop_stale

    metas = []
    for p in spool.capture_dir.glob("*.meta.json"):
        m = read_json(p)
        if m:
            metas.append((p, m))
    metas.sort(key=lambda x: (x[1].get("start_ns", 0), x[1].get("seq", 0)))
    stems = []
    for p, m in metas:
        raw = spool.capture_dir / f"{m['stem']}.pcap"
        if m.get("pid") and stop_stale(int(m["pid"]), str(raw)):
            log_event(log, logging.WARNING, "stale_tcpdump_stopped", pid=m["pid"], stem=m["stem"])
        if not m.get("end_ns"):
            try:
                m["end_ns"] = raw.stat().st_mtime_ns
            except FileNotFoundError:
                m["end_ns"] = m["start_ns"]
            m["end_reason"] = "recovered"
            atomic_write_json(p, m)
        stems.append(m["stem"])
    # leftovers of hand-overs whose files no longer exist
    live = set(stems)
    for d in spool.dedupe_dir.glob("*.json"):
        if d.name[:-len(".json")] not in live:
            d.unlink()
    return stems

"""Crash-safe file primitives: every state change the agent relies on after a crash goes through here.

The rule everywhere in the agent: write to a temporary name in the same directory, fsync the file,
rename over the final name, fsync the directory. A reader (or a restarted agent) then sees either the
old or the new content, never a torn file, even after ``kill -9`` or a power cut.
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Iterator


def fsync_dir(path: str | os.PathLike) -> None:
    """Persist a rename/unlink in ``path`` (the directory entry itself must reach the disk)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_json(path: str | os.PathLike, default: Any = None) -> Any:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return default


def atomic_move(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename within one file system and make it durable (both directories fsynced)."""
    os.replace(src, dst)
    fsync_dir(Path(dst).parent)
    if Path(src).parent != Path(dst).parent:
        fsync_dir(Path(src).parent)


def unlink_quiet(path: str | os.PathLike) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def dir_size(path: str | os.PathLike) -> int:
    """Bytes used by regular files under ``path`` (apparent size; what the quota counts)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed by another thread while walking
                pass
    return total


def free_bytes(path: str | os.PathLike) -> int:
    return shutil.disk_usage(path).free


class DirLock:
    """An exclusive ``flock`` on a file in the spool: two agents must never share one spool.

    The kernel drops a flock when its holder dies, so a ``kill -9`` never leaves a stale lock.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                holder = self.path.read_text().strip() or "?"
                raise RuntimeError(f"spool {self.path.parent} is in use by another agent (pid {holder})") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Journal:
    """Append-only JSON-lines audit log of spool events (captured, finalized, shipped, dropped).

    Each line is fsynced, so after a crash the journal says what happened up to the crash. It is an
    audit trail, not the source of truth for recovery (that is the spool directories themselves),
    so a line may appear twice if the agent died between journaling and applying an event; readers
    de-duplicate on (event, file). It is rotated once past ``max_bytes`` (one previous generation).
    """

    def __init__(self, path: str | os.PathLike, max_bytes: int = 16 * 1024 * 1024):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()  # finalizer, shipper and quota append concurrently

    def append(self, event: str, **fields: Any) -> None:
        from .logs import utc_now_iso

        rec = {"ts": utc_now_iso(), "event": event, **fields}
        line = (json.dumps(rec, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
                size = os.fstat(fd).st_size
            finally:
                os.close(fd)
            if size > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
                fsync_dir(self.path.parent)

    def read(self) -> Iterator[dict]:
        for p in (self.path.with_name(self.path.name + ".1"), self.path):
            try:
                with open(p, "rb") as f:
                    for line in f:
                        try:
                            yield json.loads(line)
                        except ValueError:  # a torn last line after a crash
                            continue
            except FileNotFoundError:
                continue

"""Landing-zone targets: put one file so that it is either completely there or not there at all.

- Local or mounted directory (a path or file://): write ``.<name>.part`` in the destination
  directory, fsync, rename, fsync the directory. Hidden names are ignored by the jobs and by Spark.
- Object stores (s3://, gs://, az://, ...): an object becomes visible only when its PUT (or the
  completion of its multipart upload) succeeds, so we write straight to the final key and, on any
  error, abort instead of letting fsspec "close" (= commit) a partial buffer. A ``kill -9`` can leave
  an incomplete multipart upload, which is invisible; a bucket lifecycle rule
  (AbortIncompleteMultipartUpload) reclaims it.
- Other fsspec file systems with a real rename (hdfs://, webhdfs://, sftp://, ...): write a hidden
  temporary beside the target, then ``mv`` it (an atomic rename on HDFS).

Reads of existing manifests give the shipper its idempotency check (same name and same sha256:
already landed, nothing to do).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlparse

OBJECT_STORES = {"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2", "b2"}
CHUNK = 1 << 20


class LandingUnavailable(OSError):
    """The landing zone cannot be reached; retry later."""


class Throttle:
    """Keep the average upload rate under a limit (0 = none) by sleeping between chunks."""

    def __init__(self, rate: int, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.sleep = sleep
        self.clock = clock
        self.start = clock()
        self.sent = 0

    def __call__(self, nbytes: int) -> None:
        if self.rate <= 0:
            return
        self.sent += nbytes
        ahead = self.sent / self.rate - (self.clock() - self.start)
        if ahead > 0:
            self.sleep(ahead)


def _copy(src: Path, write: Callable[[bytes], Any], rate: int, abort: Callable[[], bool] | None) -> int:
    throttle = Throttle(rate)
    n = 0
    with open(src, "rb") as f:
        while True:
            chunk = f.read(CHUNK if rate <= 0 else max(4096, min(CHUNK, rate // 8)))
            if not chunk:
                return n
            if abort and abort():
                raise InterruptedError("upload interrupted (agent stopping)")
            write(chunk)
            n += len(chunk)
            throttle(len(chunk))


LANDING_FILE_MODE = 0o640


class LocalTarget:
    """A directory on this host (local disk, NFS or SMB mount)."""

    def __init__(self, root: str):
        self.root = Path(root[len("file://"):] if root.startswith("file://") else root)
        self.url = str(self.root)

    def _check(self) -> None:
        # The root must already exist: we never create it, so an unmounted network share is
        # "unreachable", not silently replaced by a directory on the local disk.
        if not self.root.is_dir():
            raise LandingUnavailable(f"landing root {self.root} does not exist (not mounted?)")

    def get_json(self, rel: str) -> dict | None:
        self._check()
        try:
            return json.loads((self.root / rel).read_bytes())
        except FileNotFoundError:
            return None
        except ValueError:
            return None  # unreadable: treat as absent so a good copy replaces it

    def _atomic(self, rel: str, fill: Callable[[Any], None]) -> None:
        self._check()
        dst = self.root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.part")
        try:
            with open(tmp, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            # the agent creates files 0600 (agent.lock_down); a landing directory is read by the
            # analysis job's group
            os.chmod(tmp, LANDING_FILE_MODE)
            os.replace(tmp, dst)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        fd = os.open(dst.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put_file(self, src: Path, rel: str, rate: int = 0, abort=None) -> None:
        self._atomic(rel, lambda f: _copy(src, f.write, rate, abort))

    def put_bytes(self, data: bytes, rel: str) -> None:
        self._atomic(rel, lambda f: f.write(data))


class FsspecTarget:
    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        import fsspec  # heavy; only when this target is used

        self.url = url.rstrip("/")
        self.protocol = urlparse(url).scheme.lower()
        opts = dict(storage_options or {})
        if self.protocol in ("s3", "s3a"):
            # Fail fast and let the shipper's backoff handle outages instead of botocore's own
            # retries hiding them for minutes.
            ck = dict(opts.pop("config_kwargs", {}) or {})
            ck.setdefault("connect_timeout", 5)
            ck.setdefault("read_timeout", 60)
            ck.setdefault("retries", {"max_attempts": 2, "mode": "standard"})
            opts["config_kwargs"] = ck
        opts.setdefault("skip_instance_cache", True)  # fresh connections after an outage
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **opts)
        self.root = self.root.rstrip("/")
        self.object_store = self.protocol in OBJECT_STORES

    def _path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if self.root else rel

    def get_json(self, rel: str) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(self._path(rel)))
        except FileNotFoundError:
            return None
        except ValueError:
            return None

    def _write_stream(self, path: str, src: Path, rate: int, abort) -> None:
        f = self.fs.open(path, "wb", block_size=8 * 1024 * 1024) if self.object_store else self.fs.open(path, "wb")
        try:
            _copy(src, f.write, rate, abort)
        except BaseException:
            # fsspec's close()/__del__ would commit the partial buffer: abort and mark closed
            # (s3fs's discard() also aborts a started multipart upload).
            discard = getattr(f, "discard", None)
            try:
                if discard:
                    discard()
            finally:
                try:
                    f.closed = True
                except AttributeError:  # not an fsspec buffered file; its temp name protects us
                    pass
            raise
        f.close()

    def put_file(self, src: Path, rel: str, rate: int = 0, abort=None) -> None:
        path = self._path(rel)
        if self.object_store:
            self._write_stream(path, src, rate, abort)
            return
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.part"
        self._write_stream(tmp, src, rate, abort)
        if self.fs.exists(path):  # a complete copy from before a crash (no manifest yet): replace
            self.fs.rm(path)
        self.fs.mv(tmp, path)

    def put_bytes(self, data: bytes, rel: str) -> None:
        path = self._path(rel)
        if self.object_store:
            self.fs.pipe_file(path, data)  # one PUT: atomic
            return
        parent = path.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        tmp = f"{parent}/.{path.rsplit('/', 1)[1]}.part"
        self.fs.pipe_file(tmp, data)
        if self.fs.exists(path):
            self.fs.rm(path)
        self.fs.mv(tmp, path)


def open_target(url: str, storage_options: dict[str, Any] | None = None):
    scheme = urlparse(url).scheme.lower()
    if scheme in ("", "file", "local") or (len(scheme) == 1 and os.name == "nt"):
        return LocalTarget(url[len("local://"):] if url.startswith("local://") else url)
    return FsspecTarget(url, storage_options)

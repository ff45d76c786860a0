"""Paths that may be URLs. The Spark engine reads a landing zone and writes its dataset on object
storage or HDFS (s3://, s3a://, gs://, hdfs://, ...) through fsspec; everything else stays on
local paths. Credentials and endpoints come from fsspec's own configuration — environment
variables FSSPEC_<PROTOCOL>_<OPTION> (e.g. FSSPEC_S3_ENDPOINT_URL, FSSPEC_S3_KEY) or the
storage's usual ones (AWS_ACCESS_KEY_ID, ...) — which executors inherit or get through
`spark.executorEnv.*` (docs/spark.md).
"""
from __future__ import annotations

import os
import re
import shutil

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(name) -> bool:
    s = str(name)
    return bool(_URL.match(s)) and not s.startswith("file://")


def filesystem(url: str):
    """(fsspec filesystem, path inside it) for a URL."""
    import fsspec.core

    return fsspec.core.url_to_fs(url)


def config_snapshot() -> dict:
    """The driver's fsspec configuration (FSSPEC_* variables and config files), to be applied
    on executors, whose environment Spark started before (or elsewhere than) the driver's."""
    import copy

    import fsspec.config

    return copy.deepcopy(dict(fsspec.config.conf))


def apply_config(snapshot: dict) -> None:
    import fsspec.config

    for proto, options in snapshot.items():
        fsspec.config.conf.setdefault(proto, {}).update(options)


def protocol_of(url: str) -> str:
    return url.split("://", 1)[0]


def join(base: str, *parts: str) -> str:
    return "/".join([str(base).rstrip("/"), *(p.strip("/") for p in parts if p)])


def walk_files(fs, root: str) -> list[str]:
    """Every object under a prefix, listed a level at a time (one delimited listing per
    "directory": what every S3-compatible server answers alike, unlike a flat listing)."""
    try:
        return sorted(f"{d.rstrip('/')}/{name}" for d, _, files in fs.walk(root) for name in files)
    except OSError:
        return []


class Local:
    """A dataset on a local (or mounted) file system: renames are atomic."""

    remote = False

    def mkdirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def move(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rm(self, path: str) -> None:
        os.unlink(path)

    def rmdir_if_empty(self, path: str) -> None:
        try:
            os.rmdir(path)
        except OSError:
            pass

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def listdir(self, path: str) -> list[str]:
        return [os.path.join(path, n) for n in os.listdir(path)] if os.path.isdir(path) else []

    def find(self, path: str) -> list[str]:
        return [os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs]

    def read_text(self, path: str) -> str:
        with open(path) as fh:
            return fh.read()

    def write_text_atomic(self, path: str, text: str) -> None:
        tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


class Remote:
    """A dataset on object storage or HDFS through fsspec. There is no atomic rename of a
    directory, but there need not be: a run's parts are moved one by one and only its manifest,
    one object written in a single PUT, makes them count (jobs/dataset/staged.py)."""

    remote = True

    def __init__(self, url: str):
        self.fs, _ = filesystem(url)
        self.proto = protocol_of(url)

    def _p(self, path: str) -> str:
        return path.split("://", 1)[1] if "://" in path else path

    def _u(self, path: str) -> str:
        return f"{self.proto}://{path}"

    def mkdirs(self, path: str) -> None:
        pass  # object stores have no directories; HDFS makes them on write

    def move(self, src: str, dst: str) -> None:
        self.fs.mv(self._p(src), self._p(dst))

    def upload(self, local: str, dst: str) -> None:
        self.fs.put_file(local, self._p(dst))

    def rmtree(self, path: str) -> None:
        # Best effort, as shutil.rmtree(ignore_errors=True) locally: what stays is staging
        # that the next run's recovery removes, never data a reader counts.
        for p in self.find(path):
            try:
                self.fs.rm_file(self._p(p))
            except OSError:
                pass

    def rm(self, path: str) -> None:
        self.fs.rm(self._p(path))

    def rmdir_if_empty(self, path: str) -> None:
        pass

    def isdir(self, path: str) -> bool:
        return self.fs.isdir(self._p(path))

    def exists(self, path: str) -> bool:
        return self.fs.exists(self._p(path))

    # A prefix with no objects is "not found" on S3 but an error on some S3-compatible servers
    # (s3s-fs answers a HEAD of a directory with 500): either way there is nothing under it.
    def listdir(self, path: str) -> list[str]:
        try:
            found = self.fs.ls(self._p(path), detail=False, refresh=True)
        except OSError:
            return []
        return [self._u(p.rstrip("/")) for p in found if p.rstrip("/") != self._p(path).rstrip("/")]

    def find(self, path: str) -> list[str]:
        return [self._u(p) for p in walk_files(self.fs, self._p(path))]

    def read_text(self, path: str) -> str:
        return self.fs.cat_file(self._p(path)).decode()

    def write_text_atomic(self, path: str, text: str) -> None:
        self.fs.pipe_file(self._p(path), text.encode())


def location(base) -> Local | Remote:
    return Remote(str(base)) if is_url(base) else Local()

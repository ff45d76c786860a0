"""Resolve what the user named (files, directories, globs) into capture files.

Directories are walked recursively; inside them only files that look like captures are taken
(by name), so manifests and logs that the edge agent ships beside captures are ignored. A file
named explicitly is always taken, whatever its name: the decoder decides from its content.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".cap", ".dmp", ".trace")
COMPRESSED_SUFFIXES = (".gz", ".zst", ".zstd")


def looks_like_capture(name: str) -> bool:
    lower = name.lower()
    for comp in COMPRESSED_SUFFIXES:
        if lower.endswith(comp):
            lower = lower[: -len(comp)]
            break
    # tcpdump -C rotation appends a counter after the extension: trace.pcap1, trace.pcap2 ...
    stripped = lower.rstrip("0123456789")
    return lower.endswith(CAPTURE_SUFFIXES) or stripped.endswith(CAPTURE_SUFFIXES)


@dataclass
class InputFile:
    path: Path  # for a URL input, the path inside its storage (a PurePosixPath)
    label: str
    size: int
    capture_id: str | None = None  # from an agent manifest sidecar, when present
    sidecar: dict | None = None
    url: str | None = None  # set for inputs on object storage / HDFS (jobs/dataset/storage.py)
    stdin: bool = False  # `-`: a capture streamed on standard input (spooled before it is planned)
    sha256: str | None = None  # known before planning (a spooled stream)


@dataclass
class Resolved:
    files: list[InputFile] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)  # (what was named, problem)


def _sidecar(path: Path) -> dict | None:
    """The edge agent lands <stem>.manifest.json beside each finished <stem>.pcap.gz (see
    capture/README.md); its capture_id chains the rotated files of one capture."""
    from tailscope.capture.manifest import stem_of

    candidate = path.with_name(stem_of(path.name) + ".manifest.json")
    if not candidate.is_file():
        return None
    try:
        return json.loads(candidate.read_text())
    except (OSError, ValueError):
        return None


def _add(resolved: Resolved, seen: set[Path], path: Path, label: str) -> None:
    real = path.resolve()
    if real in seen:
        return
    seen.add(real)
    try:
        size = path.stat().st_size
    except OSError as exc:
        resolved.errors.append((label, f"cannot stat: {exc.strerror}"))
        return
    meta = _sidecar(path)
    capture_id = meta.get("capture_id") if isinstance(meta, dict) else None
    resolved.files.append(InputFile(path=path, label=label, size=size, capture_id=capture_id, sidecar=meta))


def _resolve_url(resolved: Resolved, name: str) -> None:
    """A landing zone on object storage or HDFS: a file, a prefix (walked) or a glob."""
    from tailscope.jobs.dataset import storage

    try:
        fs, root = storage.filesystem(name)
        proto = storage.protocol_of(name)
        if glob.has_magic(root):
            found = [p for p in sorted(fs.glob(root)) if fs.isfile(p)]
            problem = "pattern matches no files"
        elif fs.isdir(root):
            found = [p for p in storage.walk_files(fs, root) if looks_like_capture(p.rsplit("/", 1)[-1]) and "/." not in p]
            problem = "directory holds no capture files (*.pcap, *.pcapng, optionally .gz/.zst)"
        elif fs.isfile(root):
            found, problem = [root], ""
        else:
            found, problem = [], "no such file or directory"
        if not found:
            resolved.errors.append((name, problem))
        for p in found:
            path = PurePosixPath(p)
            meta = _remote_sidecar(fs, path)
            capture_id = meta.get("capture_id") if isinstance(meta, dict) else None
            url = f"{proto}://{p}"
            resolved.files.append(InputFile(path=path, label=url, size=fs.size(p), capture_id=capture_id, sidecar=meta, url=url))
    except (OSError, ValueError, ImportError) as exc:
        resolved.errors.append((name, f"cannot list: {exc}"))


def _remote_sidecar(fs, path: PurePosixPath) -> dict | None:
    from tailscope.capture.manifest import stem_of

    candidate = str(path.with_name(stem_of(path.name) + ".manifest.json"))
    try:
        return json.loads(fs.cat_file(candidate)) if fs.isfile(candidate) else None
    except (OSError, ValueError):
        return None


STDIN_LABEL = "<stdin>"


def spool_stdin(resolved: Resolved, directory: Path) -> Path | None:
    """Copy the capture streamed on standard input into `directory` (hashing it on the way) and
    put it in `resolved` as a file: it is then probed, planned and known to the ledger by its
    content as any file is, so the same stream twice counts once, and it is its own capture
    (`stdin-<sha256 prefix>`). Returns the spooled file, which the caller removes."""
    import hashlib

    for i, f in enumerate(resolved.files):
        if not f.stdin:
            continue
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "stdin"
        h, n = hashlib.sha256(), 0
        with open(path, "wb") as dst:
            while chunk := os.read(0, 1 << 20):
                h.update(chunk)
                dst.write(chunk)
                n += len(chunk)
        sha = h.hexdigest()
        resolved.files[i] = InputFile(path=path, label=STDIN_LABEL, size=n, capture_id=f"stdin-{sha[:16]}", sha256=sha)
        return path
    return None


def resolve(names: list[str]) -> Resolved:
    from tailscope.jobs.dataset.storage import is_url

    resolved = Resolved()
    seen: set[Path] = set()
    for name in names:
        if name == "-":
            if not any(f.stdin for f in resolved.files):
                resolved.files.append(InputFile(path=Path("-"), label=STDIN_LABEL, size=0, stdin=True))
            continue
        if is_url(name):
            _resolve_url(resolved, name)
            continue
        path = Path(name)
        if path.is_dir():
            found = sorted(
                Path(root) / f
                for root, dirs, files in os.walk(path)
                for f in files
                if looks_like_capture(f) and not f.startswith(".")
            )
            if not found:
                resolved.errors.append((name, "directory holds no capture files (*.pcap, *.pcapng, optionally .gz/.zst)"))
            for f in found:
                _add(resolved, seen, f, str(f))
        elif path.is_file():
            _add(resolved, seen, path, name)
        elif glob.has_magic(name):
            matches = sorted(glob.glob(name, recursive=True))
            files = [Path(m) for m in matches if Path(m).is_file()]
            if not files:
                resolved.errors.append((name, "pattern matches no files"))
            for f in files:
                _add(resolved, seen, f, str(f))
        elif path.exists():
            resolved.errors.append((name, "not a regular file or directory"))
        else:
            resolved.errors.append((name, "no such file or directory"))
    return resolved

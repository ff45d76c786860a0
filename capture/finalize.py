"""Turn one closed raw capture into a finished spool item: compressed data file + manifest.

Runs once per rotated file, and again on restart for any raw file a crash left behind: every step
is redoable, and the manifest rename is the single commit point (see spool.py).

While copying records into the compressor it also
- counts packets and bytes, finds the first/last timestamps (for the manifest);
- removes the packets the hand-over overlap put in both this and the previous file (capture.py:
  the next tcpdump starts before the previous one stops so no packet falls in between;
  HandoverDedupe says how a packet is recognised);
- saves this file's last packets for the next file to de-duplicate against.
"""
from __future__ import annotations

import gzip
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, BinaryIO

from . import manifest as mf
from .fsutil import atomic_move, atomic_write_json, fsync_dir, read_json, unlink_quiet
from .logs import get_logger, log_event
from .pcapfile import PcapError, PcapReader
from .spool import Spool
from .tcpdump import parse_stats

log = get_logger("finalize")

# Packets timestamped up to this long before the next tcpdump was spawned may still have reached it
# (timestamped at receive, delivered to sockets a little later); only this tail is kept for dedupe.
DEDUPE_MARGIN_NS = 500_000_000


class _HashingWriter:
    """File wrapper that hashes and counts what the compressor writes (the landed file's sha256)."""

    def __init__(self, f: BinaryIO):
        self.f = f
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, b) -> int:
        self.sha.update(b)
        self.size += len(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()

    def writable(self) -> bool:  # zstandard and gzip probe for these
        return True

    @property
    def closed(self) -> bool:
        return False


def _open_compressor(kind: str, level: int | None, sink: _HashingWriter):
    if kind == "gzip":
        # mtime=0 and no file name: the same pcap always compresses to the same bytes, so a redone
        # finalization after a crash has the same sha256 as the first attempt.
        return gzip.GzipFile(filename="", mode="wb", compresslevel=6 if level is None else level,
                             fileobj=sink, mtime=0)
    import zstandard

    return zstandard.ZstdCompressor(level=3 if level is None else level).stream_writer(sink, closefd=False)


class HandoverDedupe:
    """Packets of the previous file's tail, to recognise the same packets at the head of this one.

    A packet captured by two sockets has the same bytes in both captures. Received packets also
    share the kernel timestamp exactly; transmitted ones are timestamped per socket on some kernels,
    microseconds apart (seen on Linux 6.x). So a match is: same lengths and content hash, and a
    timestamp within TOLERANCE_NS, closest first. A genuine resend of identical bytes within a
    millisecond is not possible for TCP (IP ID or TSval change; the minimum RTO is 200 ms).
    """

    TOLERANCE_NS = 1_000_000

    def __init__(self, keys: list[list] | None = None):
        self.by_content: dict[tuple, list[int]] = {}
        self.max_ts = -1
        for ts, caplen, wirelen, digest in keys or []:
            self.by_content.setdefault((caplen, wirelen, digest), []).append(ts)
            self.max_ts = max(self.max_ts, ts)

    def __bool__(self) -> bool:
        return bool(self.by_content)

    def take(self, rec) -> bool:
        """True (and forget the match) if rec was in the previous file."""
        if rec.ts_ns > self.max_ts + self.TOLERANCE_NS:
            return False
        ts, caplen, wirelen, digest = rec.key()
        cands = self.by_content.get((caplen, wirelen, digest))
        if not cands:
            return False
        best = min(range(len(cands)), key=lambda i: abs(cands[i] - ts))
        if abs(cands[best] - ts) > self.TOLERANCE_NS:
            return False
        cands.pop(best)
        return True

    @classmethod
    def load(cls, path: Path) -> "HandoverDedupe":
        data = read_json(path, default=None)
        return cls(data["keys"] if data else None)


def finalize(spool: Spool, stem: str, *, compression: str, level: int | None, agent_version: str) -> dict | None:
    """Finalize capture/<stem>.*; returns the manifest, or None if there was nothing to finalize."""
    meta_path = spool.capture_dir / f"{stem}.meta.json"
    raw_path = spool.capture_dir / f"{stem}.pcap"
    err_path = spool.capture_dir / f"{stem}.stderr"
    dedupe_in = spool.dedupe_dir / f"{stem}.json"
    meta = read_json(meta_path)
    if meta is None:
        return None
    manifest_path = spool.ready_dir / (stem + mf.MANIFEST_SUFFIX)

    def cleanup() -> None:
        for p in (raw_path, err_path, dedupe_in, meta_path):
            unlink_quiet(p)

    if manifest_path.exists():  # committed before a crash: only the clean-up was left to do
        _record(spool, stem, read_json(manifest_path))
        cleanup()
        return read_json(manifest_path)

    try:
        stderr_text = err_path.read_text(errors="replace")
    except FileNotFoundError:
        stderr_text = ""
    stats = parse_stats(stderr_text)
    if not raw_path.exists() or raw_path.stat().st_size < 24:
        # tcpdump never got to write a header (failed to start, or killed at once): no capture
        spool.journal.append("capture_empty", stem=stem, stderr=stderr_text[-500:])
        log_event(log, logging.WARNING, "capture_without_file", stem=stem, stderr=stderr_text[-500:])
        spool.state.apply("capture_empty", stem)
        cleanup()
        return None

    data_name = stem + mf.DATA_SUFFIX[compression]
    tmp_path = spool.tmp_dir / data_name
    dup = HandoverDedupe.load(dedupe_in)
    successor = meta.get("successor")
    tail_from = (meta["successor_spawned_ns"] - DEDUPE_MARGIN_NS) if successor else None
    tail: list[tuple] = []
    pcap_sha = hashlib.sha256()
    n = bytes_cap = bytes_wire = removed = pcap_size = 0
    first_ns = last_ns = None

    with open(raw_path, "rb") as raw, open(tmp_path, "wb") as out:
        sink = _HashingWriter(out)
        comp = _open_compressor(compression, level, sink)
        try:
            reader = PcapReader(raw)
        except PcapError as exc:
            comp.close()
            raise PcapError(f"{raw_path}: {exc}") from None
        hdr = reader.header
        comp.write(hdr.raw)
        pcap_sha.update(hdr.raw)
        pcap_size += len(hdr.raw)
        for rec in reader:
            if dup and dup.take(rec):
                removed += 1
                continue
            if tail_from is not None and rec.ts_ns >= tail_from:
                tail.append(rec.key())
            comp.write(rec.header)
            comp.write(rec.data)
            pcap_sha.update(rec.header)
            pcap_sha.update(rec.data)
            pcap_size += len(rec.header) + len(rec.data)
            n += 1
            bytes_cap += rec.caplen
            bytes_wire += rec.wirelen
            first_ns = rec.ts_ns if first_ns is None else min(first_ns, rec.ts_ns)
            last_ns = rec.ts_ns if last_ns is None else max(last_ns, rec.ts_ns)
        comp.close()
        out.flush()
        os.fsync(out.fileno())
    if reader.truncated_tail:
        log_event(log, logging.WARNING, "raw_capture_truncated", stem=stem, torn_bytes=reader.truncated_tail)

    if successor:
        # before the commit point: if we die after it, the next file can still be de-duplicated
        atomic_write_json(spool.dedupe_dir / f"{successor}.json", {"from": stem, "keys": tail})

    atomic_move(tmp_path, spool.ready_dir / data_name)
    m = mf.build_manifest(
        meta=meta, stats=stats, data_name=data_name, compression=compression, agent_version=agent_version,
        pcap={"linktype": hdr.linktype, "snaplen": hdr.snaplen, "packets": n, "bytes_captured": bytes_cap,
              "bytes_on_wire": bytes_wire, "first_ns": first_ns, "last_ns": last_ns,
              "duplicates_removed": removed, "size_bytes": sink.size, "sha256": sink.sha.hexdigest(),
              "pcap_size_bytes": pcap_size, "pcap_sha256": pcap_sha.hexdigest()})
    atomic_write_json(manifest_path, m)  # commit point
    _record(spool, stem, m)
    cleanup()
    fsync_dir(spool.capture_dir)
    return m


def _record(spool: Spool, stem: str, m: dict[str, Any]) -> None:
    if spool.state.was_applied("finalized", stem):
        return
    spool.journal.append("finalized", file=m["file"], capture_id=m["capture_id"], seq=m["seq"],
                         packets=m["packets"], kernel_drops=m["kernel_drops"], sha256=m["sha256"],
                         size_bytes=m["size_bytes"])
    spool.state.apply("finalized", stem, {
        "files_finished": 1, "packets": m["packets"], "bytes_captured": m["bytes_captured"],
        "kernel_drops": m["kernel_drops"] or 0, "interface_drops": m["interface_drops"] or 0,
        "overlap_duplicates_removed": m["overlap_duplicates_removed"],
        "files_stats_missing": 0 if m["capture_stats_complete"] else 1,
    }, gauges={"last_file_finished_timestamp_seconds": m["end_ns"] / 1e9},
        last_file=(m["capture_id"], m["file"]))
    log_event(log, logging.INFO, "file_finished", file=m["file"], packets=m["packets"],
              kernel_drops=m["kernel_drops"], duplicates_removed=m["overlap_duplicates_removed"],
              size_bytes=m["size_bytes"], end_reason=m["end_reason"])

"""Turn one closed raw capture into a finished spool item: compressed data file + manifest.

Runs once per rotated file, and again on restart for any raw file a crash left behind: every step
is redoable, and the manifest rename is the single commit point (see spool.py).

The copy itself is one native call per file (`_native.finish_capture`, parsers/src/finish.rs):
it compresses the records into spool/tmp/ and on the way
- counts packets and bytes, finds the first/last timestamps (for the manifest);
- removes the packets the hand-over overlap put in both this and the previous file (capture.py:
  the next tcpdump starts before the previous one stops so no packet falls in between; finish.rs's
  HandoverDedupe says how a packet is recognised), against the keys the previous file saved;
- returns this file's last packets' keys, saved here for the next file to de-duplicate against;
- hashes the pcap kept and the compressed file, and cuts a torn last record.
This module plans and commits: which keys, the dedupe file, the atomic moves, the manifest.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tailscope import _native

from . import manifest as mf
from .fsutil import atomic_move, atomic_write_json, fsync_dir, read_json, unlink_quiet
from .logs import get_logger, log_event
from .spool import Spool
from .tcpdump import parse_stats

log = get_logger("finalize")

# A raw capture that is not a classic pcap, or holds a record no tcpdump writes: retrying cannot
# help (agent.py moves it to spool/corrupt/). The message names the file.
PcapError = _native.CaptureFileError

# Packets timestamped up to this long before the next tcpdump was spawned may still have reached it
# (timestamped at receive, delivered to sockets a little later); only this tail is kept for dedupe.
DEDUPE_MARGIN_NS = 500_000_000


def load_dedupe_keys(path: Path) -> list[list] | None:
    """The previous file's tail keys, `[ts_ns, caplen, wirelen, digest]` each (None: no file)."""
    data = read_json(path, default=None)
    return data["keys"] if data else None


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
    successor = meta.get("successor")
    tail_from = (meta["successor_spawned_ns"] - DEDUPE_MARGIN_NS) if successor else None
    r = _native.finish_capture(str(raw_path), str(tmp_path), compression, level,
                               load_dedupe_keys(dedupe_in), tail_from)
    if r["truncated_tail"]:
        log_event(log, logging.WARNING, "raw_capture_truncated", stem=stem, torn_bytes=r["truncated_tail"])

    if successor:
        # before the commit point: if we die after it, the next file can still be de-duplicated
        atomic_write_json(spool.dedupe_dir / f"{successor}.json", {"from": stem, "keys": r["tail"]})

    atomic_move(tmp_path, spool.ready_dir / data_name)
    m = mf.build_manifest(
        meta=meta, stats=stats, data_name=data_name, compression=compression, agent_version=agent_version,
        pcap={k: r[k] for k in ("linktype", "snaplen", "packets", "bytes_captured", "bytes_on_wire", "first_ns",
                                "last_ns", "duplicates_removed", "size_bytes", "sha256", "pcap_size_bytes",
                                "pcap_sha256")})
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

"""Names, landing-zone layout and the manifest schema: the contract between the agent and the jobs.

Landing zone (relative to the configured root)::

    site=<site>/date=YYYY-MM-DD/hour=HH/<capture_id>.<YYYYMMDDTHHMMSSZ>.<seq>.pcap.gz   (or .pcap.zst)
    site=<site>/date=YYYY-MM-DD/hour=HH/<same stem>.manifest.json
    site=<site>/date=YYYY-MM-DD/hour=HH/<same stem>.dropped.json     (tombstone, quota drops only)

date/hour are the UTC start of the capture window. A data file counts as landed only once its
manifest is there (the manifest is written last). Names starting with "." or "_" are in-flight
temporaries and must be ignored (Hadoop/Spark do so by default). Any change to the manifest fields
is a deliberate step: bump SCHEMA_VERSION and document it in capture/README.md.
"""
from __future__ import annotations

import datetime as _dt
import re

TYPE_CHECKING = False  # annotations only: `tailscope analyze` starts without importing typing
if TYPE_CHECKING:
    from typing import Any

SCHEMA_VERSION = 1
MANIFEST_KIND = "tailscope.capture.manifest"
TOMBSTONE_KIND = "tailscope.capture.tombstone"
MANIFEST_SUFFIX = ".manifest.json"
TOMBSTONE_SUFFIX = ".dropped.json"
DATA_SUFFIX = {"gzip": ".pcap.gz", "zstd": ".pcap.zst"}

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def safe_component(text: str) -> str:
    """File-name safe, and free of '.', which separates the parts of a capture id and file name."""
    return _UNSAFE.sub("-", text).strip("-") or "x"


def capture_id(agent_id: str, capture_point: str, interface: str) -> str:
    """Stable id of one capture (agent, capture point, interface): the jobs chain its files by it."""
    return ".".join(safe_component(x) for x in (agent_id, capture_point, interface))


def ns_to_datetime(ns: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ns // 1_000_000_000, _dt.timezone.utc).replace(
        microsecond=(ns % 1_000_000_000) // 1000)


def ns_to_iso(ns: int | None) -> str | None:
    """RFC 3339 UTC with nanoseconds: 2024-05-01T12:00:00.123456789Z."""
    if ns is None:
        return None
    base = _dt.datetime.fromtimestamp(ns // 1_000_000_000, _dt.timezone.utc)
    return base.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns % 1_000_000_000:09d}Z"


def file_stem(cap_id: str, start_ns: int, seq: int) -> str:
    return f"{cap_id}.{ns_to_datetime(start_ns).strftime('%Y%m%dT%H%M%SZ')}.{seq:08d}"


def partition(site: str, start_ns: int) -> str:
    t = ns_to_datetime(start_ns)
    return f"site={site}/date={t:%Y-%m-%d}/hour={t:%H}"


def stem_of(name: str) -> str:
    for suffix in (MANIFEST_SUFFIX, TOMBSTONE_SUFFIX, *DATA_SUFFIX.values()):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


# Field reference (kept in sync with capture/README.md "Manifest schema").
FIELDS: dict[str, str] = {
    "schema_version": "int, this document's version (1)",
    "kind": f"'{MANIFEST_KIND}'",
    "file": "data file name (no directory)",
    "path": "data file path relative to the landing root",
    "format": "'pcap' (classic libpcap, nanosecond timestamps)",
    "compression": "'gzip' or 'zstd'",
    "linktype": "libpcap LINKTYPE_* of the capture (1 = Ethernet)",
    "snaplen": "bytes kept per packet",
    "timestamp_precision": "'ns'",
    "bpf_filter": "capture filter",
    "pseudonymize_clients": "null, or {key_fingerprint}: the site requires its client addresses pseudonymized with this key (analyze refuses the file without it)",
    "site": "site name", "capture_point": "capture point name", "interface": "capture interface",
    "agent_id": "agent id (host name by default)",
    "capture_id": "agent_id.capture_point.interface: stable id to chain rotated files of one capture",
    "session_id": "random id of one agent run; files of one session chain without gaps",
    "seq": "per-capture_id file number: +1 per file in a session, increasing across restarts",
    "previous_file": "name of the previous file of this capture_id (null for the first)",
    "contiguous_with_previous": "true when no packet can be missing between previous_file and this file",
    "start_time/end_time": "capture window (RFC 3339 UTC, ns); start_ns/end_ns: same as epoch ns",
    "first_packet_time/last_packet_time": "first and last packet timestamps (null if no packets)",
    "packets": "packets in the file",
    "bytes_captured/bytes_on_wire": "sum of captured lengths / original lengths",
    "kernel_drops": "packets the kernel dropped for this file's capture (libpcap ps_drop)",
    "interface_drops": "drops reported by the interface (ps_ifdrop), when available",
    "packets_received_by_filter": "libpcap ps_recv (its meaning varies by platform)",
    "overlap_duplicates_removed": "packets also present in the previous file, removed here",
    "capture_stats_complete": "false if tcpdump's exit statistics were unavailable",
    "end_reason": "time | size | shutdown | recovered | capture_error",
    "size_bytes/sha256": "size and SHA-256 of the data file as landed",
    "pcap_size_bytes/pcap_sha256": "size and SHA-256 of the uncompressed pcap",
    "agent_version/tcpdump_version/libpcap_version/hostname": "provenance",
}


def build_manifest(*, meta: dict[str, Any], stats: dict[str, Any], pcap: dict[str, Any],
                   data_name: str, compression: str, agent_version: str) -> dict[str, Any]:
    start_ns, end_ns = meta["start_ns"], meta.get("end_ns") or meta["start_ns"]
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": MANIFEST_KIND,
        "file": data_name,
        "path": f"{partition(meta['site'], start_ns)}/{data_name}",
        "format": "pcap",
        "compression": compression,
        "linktype": pcap["linktype"],
        "snaplen": pcap["snaplen"],
        "timestamp_precision": "ns",
        "bpf_filter": meta["bpf_filter"],
        "site": meta["site"],
        "capture_point": meta["capture_point"],
        "interface": meta["interface"],
        "agent_id": meta["agent_id"],
        "capture_id": meta["capture_id"],
        "session_id": meta["session_id"],
        "seq": meta["seq"],
        "previous_file": meta.get("previous_file"),
        "contiguous_with_previous": bool(meta.get("contiguous_with_previous")),
        "start_time": ns_to_iso(start_ns),
        "end_time": ns_to_iso(end_ns),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "first_packet_time": ns_to_iso(pcap["first_ns"]),
        "last_packet_time": ns_to_iso(pcap["last_ns"]),
        "packets": pcap["packets"],
        "bytes_captured": pcap["bytes_captured"],
        "bytes_on_wire": pcap["bytes_on_wire"],
        "kernel_drops": stats.get("kernel_drops"),
        "interface_drops": stats.get("interface_drops"),
        "packets_received_by_filter": stats.get("received_by_filter"),
        "overlap_duplicates_removed": pcap["duplicates_removed"],
        "capture_stats_complete": stats.get("kernel_drops") is not None,
        "end_reason": meta.get("end_reason") or "recovered",
        "size_bytes": pcap["size_bytes"],
        "sha256": pcap["sha256"],
        "pcap_size_bytes": pcap["pcap_size_bytes"],
        "pcap_sha256": pcap["pcap_sha256"],
        "agent_version": agent_version,
        "tcpdump_version": meta.get("tcpdump_version"),
        "libpcap_version": meta.get("libpcap_version"),
        "hostname": meta.get("hostname"),
        "pseudonymize_clients": {"key_fingerprint": meta["pseudonymize_clients"]} if meta.get("pseudonymize_clients") else None,
    }


def build_tombstone(manifest: dict[str, Any], reason: str, dropped_at: str) -> dict[str, Any]:
    """What replaces a file the spool quota forced out: the manifest, marked, so the gap is known."""
    t = dict(manifest)
    t["kind"] = TOMBSTONE_KIND
    t["status"] = f"dropped_{reason}"
    t["dropped_at"] = dropped_at
    return t

"""The run model both engines share: what a run is asked (AnalyzeOptions), how its inputs are
planned (resolved, grouped into captures, ordered in time), what it reports per file
(FileReport) and in total (the run manifest, the `files` table), and the checks made before any
input is read. The local engine (jobs/run/local.py) and the Spark engine (jobs/run/spark_engine.py) each
drive the native core their own way over this model.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tailscope import __version__
from tailscope import _native
from tailscope.jobs.dataset.storage import filesystem, is_url
from tailscope.jobs.enrichment.enrich_options import EnrichmentOptions
from tailscope.jobs.enrichment.pseudonymize import Pseudonymizer, fingerprint, load_key, sidecar_problem
from tailscope.jobs.run.inputs import InputFile, resolve

MANIFEST_SCHEMA_VERSION = 1
# The session defaults (flow timeouts, flow table size, batch size): one table, in Rust.
DEFAULTS = _native.defaults()
# What a native session counts, summed over a run's sessions into the manifest's totals.
SESSION_COUNTERS = ("flows", "flows_evicted", "queries_written_unsettled")



@dataclass
class AnalyzeOptions:
    capture_id: str | None = None
    tcp_idle_timeout_s: float = DEFAULTS["tcp_idle_timeout_s"]
    udp_idle_timeout_s: float = DEFAULTS["udp_idle_timeout_s"]
    tcp_closed_linger_s: float = DEFAULTS["tcp_closed_linger_s"]
    max_flows: int = DEFAULTS["max_flows"]
    batch_rows: int = DEFAULTS["batch_rows"]
    checksums: bool = True
    # take only inputs whose content no committed run processed (jobs/dataset/ledger.py); off, a run
    # appends whatever it is given (the same input twice is then counted twice)
    incremental: bool = True
    # analyse inputs the dataset holds again and replace their captures' rows (jobs/run/reprocess.py)
    reprocess: bool = False
    progress: bool = True
    # captures analysed at once (each capture group on its own thread; the native core releases
    # the GIL): None means one per core. The dataset is the same for any number.
    jobs: int | None = None
    # threads each capture's flows are analysed on (signatures/src/session/shards.rs): None means
    # the jobs the captures running at once leave over. The dataset is the same for any number.
    shards: int | None = None
    enrichment: EnrichmentOptions | None = field(default_factory=EnrichmentOptions)
    # SSLKEYLOGFILE paths: QUIC connections they hold secrets for are decrypted (explicit only:
    # the SSLKEYLOGFILE environment variable is never read).
    keylogs: list[str] = field(default_factory=list)
    # a Crypto-PAn key file: client addresses are stored as their pseudonyms (jobs/enrichment/pseudonymize.py)
    pseudonymize_key: str | None = None
    # the frames to take: [since, until) in ns since the epoch, and tcpdump's filter language
    since_ns: int | None = None
    until_ns: int | None = None
    bpf_filter: str | None = None
    # packets table rows: all | tagged (an analysis tag or an RTT sample) | none; the other tables
    # are complete whatever it is
    packets: str = "all"


@dataclass
class FileReport:
    path: str
    size: int | None = None
    sha256: str | None = None
    capture_id: str | None = None
    status: str = "ok"  # ok | partial | failed
    error: str | None = None
    error_kind: str | None = None
    error_offset: int | None = None
    format: str | None = None
    compression: str | None = None
    linktypes: list[int] = field(default_factory=list)
    frames: int = 0
    decoded: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    first_ts_ns: int | None = None
    last_ts_ns: int | None = None
    ts_backwards: int = 0


@dataclass
class RunResult:
    run_id: str
    out: Path
    manifest: dict
    files: list[FileReport]

    @property
    def status(self) -> str:
        return self.manifest["status"]


def new_run_id() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def sha256_of(path: Path, copy_to=None) -> str:
    """sha256 of a file (a local path, or an fsspec URL), optionally copying it on the way."""
    h = hashlib.sha256()
    with (_open_url(str(path)) if is_url(path) else open(path, "rb")) as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
            if copy_to is not None:
                copy_to.write(chunk)
    return h.hexdigest()


def _open_url(url: str):
    fs, path = filesystem(url)
    return fs.open(path, "rb")


@dataclass
class Planned:
    file: InputFile
    report: FileReport
    first_ts_ns: int | None
    group: str


def plan_order(p: Planned):
    """Files are read by capture group, then by first frame time (files without one last)."""
    return (p.group, p.first_ts_ns is None, p.first_ts_ns or 0, p.file.label)


def starts_new_capture(group: str | None, last_ts_ns: int | None, p: Planned) -> bool:
    """Does file `p` start a new capture after one of `group` whose latest packet so far came at
    `last_ts_ns`? A new capture starts at a new group, or when the file overlaps in time what the
    capture already holds (two captures of the same moment are never one)."""
    overlaps = last_ts_ns is not None and p.first_ts_ns is not None and p.first_ts_ns < last_ts_ns
    return p.group != group or overlaps


def capture_group_of(f: InputFile, options: AnalyzeOptions) -> str:
    """The capture group a file is read in: `--capture-id`, else the agent's capture_id (its
    manifest sidecar), else its rotation set."""
    return options.capture_id or f.capture_id or rotation_group(f.path)


def admit(f: InputFile, reports: list[FileReport], key_fp: str | None, sha256: str | None = None) -> FileReport | None:
    """A new report for file `f`, appended to `reports`; None when its sidecar rules the file out
    of this run (the report then says why). `key_fp`: run_key_fingerprint(options)."""
    report = FileReport(path=f.label, size=f.size, sha256=sha256)
    reports.append(report)
    if problem := sidecar_problem(f.label, f.sidecar, key_fp):
        fail(report, problem, kind="input")
        return None
    return report


def rotation_group(path: Path) -> str:
    """Files of one rotation set share a directory and a name up to their counters or
    timestamps (tcpdump -C: trace.pcap0, trace.pcap1; -G: trace-20240101-1200.pcap, ...)."""
    return str(path.parent / re.sub(r"\d+", "#", path.name))


def resolve_inputs(inputs: list[str]):
    """What the user named, as files, and a failed report for each name that is none."""
    resolved = resolve(inputs)
    reports: list[FileReport] = []
    for name, problem in resolved.errors:
        r = FileReport(path=name)
        fail(r, f"{name}: {problem}", kind="input")
        reports.append(r)
    return resolved, reports


def add_session_totals(totals: dict, session) -> None:
    """Add a native Session's (or Replayer's) counters to the run's totals."""
    t = session.totals()
    for k in SESSION_COUNTERS:
        totals[k] += t[k]
    counts = session.keylog_counts()
    if counts is not None:
        kl = totals.setdefault("quic_keylog", dict.fromkeys(counts, 0))
        for k, v in counts.items():
            kl[k] = kl.get(k, 0) + v


def fail(report: FileReport, message: str, kind: str = "unreadable") -> None:
    report.status = "failed"
    report.error = message
    report.error_kind = kind


def capture_id_of(p: Planned, options: AnalyzeOptions) -> str:
    if options.capture_id:
        return options.capture_id
    if p.file.capture_id:
        return p.file.capture_id
    return f"{p.file.path.parent.name or '.'}/{p.file.path.name}"


class SelectionError(ValueError):
    """--filter/--since/--until that cannot select anything (a usage error)."""


def check_selection(options: AnalyzeOptions) -> None:
    """A filter libpcap rejects, or an empty window, is a usage error before any input is read."""
    if options.since_ns is not None and options.until_ns is not None and options.since_ns >= options.until_ns:
        raise SelectionError("--since must be before --until")
    if options.bpf_filter:
        try:
            _native.Session("check").select(filter=options.bpf_filter)
        except ValueError as exc:
            raise SelectionError(str(exc)) from None


def file_rows(reports: list[FileReport], run_id: str) -> list[dict]:
    """The `files` table's rows (its columns: signatures/src/files_table.rs)."""
    return [
        {
            "run_id": run_id,
            "path": r.path,
            "capture_id": r.capture_id,
            "status": r.status,
            "error": r.error,
            "error_offset": r.error_offset,
            "format": r.format,
            "compression": r.compression,
            "size": r.size,
            "sha256": r.sha256,
            "frames": r.frames,
            "decoded": r.decoded,
            "skipped": sum(r.skipped.values()),
            "skipped_by_reason": [(k, v) for k, v in sorted(r.skipped.items()) if v],
            "first_ts": r.first_ts_ns,
            "last_ts": r.last_ts_ns,
        }
        for r in reports
    ]


def files_table(reports: list[FileReport], run_id: str):
    """The `files` table as a pyarrow record batch."""
    return _native.files_batch(file_rows(reports, run_id))


def open_pseudonymizer(options: AnalyzeOptions) -> Pseudonymizer | None:
    """The run's pseudonymizer, or None; a bad key file raises PseudonymKeyError (a usage error)."""
    if not options.pseudonymize_key:
        return None
    return Pseudonymizer(load_key(options.pseudonymize_key))


def run_key_fingerprint(options: AnalyzeOptions) -> str | None:
    return fingerprint(load_key(options.pseudonymize_key)) if options.pseudonymize_key else None


def pseudonymization_summary(p: Pseudonymizer | None) -> dict | None:
    """For the manifest: that client addresses are pseudonyms, and which key (never the key)."""
    if p is None:
        return None
    return {"clients": "crypto-pan", "key_fingerprint": p.fingerprint}


def internal_error(report: FileReport, message: str) -> None:
    """A bug of ours lost output after this file was read: what was written is kept."""
    report.error = message
    report.error_kind = "internal"
    report.status = "partial" if report.frames else "failed"


def record_stats(report: FileReport, stats: dict) -> None:
    report.frames = stats["frames"]
    report.decoded = stats["decoded"]
    report.skipped = {k: v for k, v in stats["skipped"].items() if v}
    report.first_ts_ns = stats["first_ts_ns"]
    report.last_ts_ns = stats["last_ts_ns"]
    report.ts_backwards = stats["ts_backwards"]
    report.linktypes = list(stats["linktypes"])
    if stats["error"]:
        report.error = f"{report.path}: {stats['error']}"
        report.error_kind = stats["error_kind"]
        report.error_offset = stats["error_offset"]
        report.status = "partial" if report.frames else "failed"


def nothing_to_record(reports: list[FileReport], replacement, removed: list[str]) -> bool:
    """Nothing new (every input skipped: the dataset holds it, under this name or another), nothing
    that failed, nothing replaced or recovered: the dataset is unchanged, so no run is recorded (a
    cron re-run of a landing zone would otherwise add a manifest every time). Both engines ask it
    once every input is judged (local.py before reading, spark_engine.py once its tasks hashed
    them); the run's manifest is still returned, to say what was skipped."""
    return not reports and not replacement and not removed


def build_manifest(run_id, started, t0, inputs, options, reports, totals, rows, removed, argv, already, engine="local",
                   below_horizon=()) -> dict:
    skipped: dict[str, int] = {}
    for r in reports:
        for k, v in r.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    frames = sum(r.frames for r in reports)
    decoded = sum(r.decoded for r in reports)
    failed = [r for r in reports if r.status != "ok"]
    ok_files = [r for r in reports if r.status == "ok"]
    status = "ok" if not failed else ("failed" if not ok_files and not any(r.status == "partial" for r in reports) else "partial")
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "table_schema_version": _native.SCHEMA_VERSION,
        "tool": "tailscope",
        "version": __version__,
        "engine": engine,
        "run_id": run_id,
        "status": status,
        "started": started.isoformat(),
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(),
        "elapsed_s": round(time.monotonic() - t0, 3),
        "argv": argv if argv is not None else sys.argv[1:],
        "inputs_named": list(inputs),
        "options": asdict(options),
        "totals": {
            "files": len(reports),
            "files_ok": len(ok_files),
            "files_partial": sum(r.status == "partial" for r in reports),
            "files_failed": sum(r.status == "failed" for r in reports),
            "frames": frames,
            "decoded": decoded,
            "skipped": sum(skipped.values()),
            "skipped_by_reason": dict(sorted(skipped.items())),
            "flows": totals["flows"],
            "flows_evicted": totals["flows_evicted"],
            "queries_written_unsettled": totals["queries_written_unsettled"],
            "files_already_processed": len(already),
            "files_below_horizon": len(below_horizon),
            "enrichment": totals.get("enrichment"),
            "quic_keylog": totals.get("quic_keylog"),
            "pseudonymization": totals.get("pseudonymization"),
            "rows": dict(rows),
        },
        "recovered_leftovers": removed,
        "already_processed": already,
        # inputs `tailscope prune` removed (every packet older than the retention horizon): not read again
        "below_horizon": list(below_horizon),
        "inputs": [asdict(r) for r in reports],
    }

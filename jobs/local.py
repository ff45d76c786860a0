"""The local engine: the embedded default, no cluster and no JVM.

inputs → probe (time order) → one native Session per capture → staged Parquet → commit + manifest.
The files of one capture (an agent's rotation set) go through one Session in time order, so a
connection that spans files is one flow.
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

import pyarrow as pa

from tailscope import __version__
from tailscope import _native
from tailscope.jobs import ledger, reprocess
from tailscope.jobs.dataset import StagedWriter, recover
from tailscope.jobs.enrich import EnrichmentOptions, open_enrichment
from tailscope.jobs.inputs import InputFile, resolve
from tailscope.jobs.progress import Progress
from tailscope.jobs.pseudonymize import Pseudonymizer, fingerprint, load_key, sidecar_problem
from tailscope.jobs.storage import filesystem, is_url

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
    # take only inputs whose content no committed run processed (jobs/ledger.py); off, a run
    # appends whatever it is given (the same input twice is then counted twice)
    incremental: bool = True
    # analyse inputs the dataset holds again and replace their captures' rows (jobs/reprocess.py)
    reprocess: bool = False
    progress: bool = True
    enrichment: EnrichmentOptions | None = field(default_factory=EnrichmentOptions)
    # SSLKEYLOGFILE paths: QUIC connections they hold secrets for are decrypted (explicit only:
    # the SSLKEYLOGFILE environment variable is never read).
    keylogs: list[str] = field(default_factory=list)
    # a Crypto-PAn key file: client addresses are stored as their pseudonyms (jobs/pseudonymize.py)
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
class _Planned:
    file: InputFile
    report: FileReport
    first_ts_ns: int | None
    group: str


def _plan(files: list[InputFile], reports: list[FileReport], options: AnalyzeOptions) -> list[_Planned]:
    """Probe every file and order them: by capture group, then by first timestamp."""
    planned = []
    key_fp = run_key_fingerprint(options)
    for f in files:
        report = FileReport(path=f.label, size=f.size)
        reports.append(report)
        if problem := sidecar_problem(f.label, f.sidecar, key_fp):
            _fail(report, problem, kind="input")
            continue
        if f.url:
            _fail(report, f"{f.label}: inputs on object storage or HDFS are read by --engine spark (docs/spark.md)", kind="input")
            continue
        if f.stdin:
            # a stream cannot be probed ahead: it is its own capture, read last
            planned.append(_Planned(f, report, None, options.capture_id or "stdin"))
            continue
        try:
            info = _native.probe(str(f.path))
        except _native.CaptureFileError as exc:
            _fail(report, str(exc))
            continue
        except _native.InternalError as exc:
            _fail(report, str(exc), kind="internal")
            continue
        except OSError as exc:
            _fail(report, f"{f.label}: {exc}")
            continue
        report.format, report.compression = info["format"], info["compression"]
        group = options.capture_id or f.capture_id or rotation_group(f.path)
        planned.append(_Planned(f, report, info["first_ts_ns"], group))
    planned.sort(key=plan_order)
    return planned


def plan_order(p: _Planned):
    """Files are read by capture group, then by first frame time (files without one last)."""
    return (p.group, p.first_ts_ns is None, p.first_ts_ns or 0, p.file.label)


def starts_new_capture(group: str | None, last_ts_ns: int | None, p: _Planned) -> bool:
    """Does file `p` start a new capture after one of `group` whose latest packet so far came at
    `last_ts_ns`? A new capture starts at a new group, or when the file overlaps in time what the
    capture already holds (two captures of the same moment are never one)."""
    overlaps = last_ts_ns is not None and p.first_ts_ns is not None and p.first_ts_ns < last_ts_ns
    return p.group != group or overlaps


def take_new(planned: list[_Planned], reports: list[FileReport], out: Path) -> list[str]:
    """Incremental runs: drop inputs the ledger says a committed run processed (their rows are
    in the dataset already). Returns the paths dropped, for the manifest."""
    done = ledger.processed(out)
    kept, dropped = [], []
    for p in planned:
        if p.file.stdin:  # a stream is never known before it is read
            kept.append(p)
            continue
        p.report.sha256 = p.report.sha256 or sha256_of(p.file.path)
        if p.report.sha256 in done:
            dropped.append(p.report.path)
            reports.remove(p.report)
        else:
            kept.append(p)
    planned[:] = kept
    return dropped


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
        _fail(r, f"{name}: {problem}", kind="input")
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


def _fail(report: FileReport, message: str, kind: str = "unreadable") -> None:
    report.status = "failed"
    report.error = message
    report.error_kind = kind


def _capture_id(p: _Planned, options: AnalyzeOptions) -> str:
    if options.capture_id:
        return options.capture_id
    if p.file.capture_id:
        return p.file.capture_id
    if p.file.stdin:
        return "stdin"
    return f"{p.file.path.parent.name or '.'}/{p.file.path.name}"


def _session(capture_id: str, options: AnalyzeOptions) -> "_native.Session":
    session = _native.Session(
        capture_id,
        tcp_idle_timeout_s=options.tcp_idle_timeout_s,
        udp_idle_timeout_s=options.udp_idle_timeout_s,
        tcp_closed_linger_s=options.tcp_closed_linger_s,
        max_flows=options.max_flows,
        batch_rows=options.batch_rows,
    )
    for path in options.keylogs:
        session.add_keylog(str(path))
    if options.packets != "all":
        session.keep_packets(options.packets)
    if options.since_ns is not None or options.until_ns is not None or options.bpf_filter:
        session.select(since_ns=options.since_ns, until_ns=options.until_ns, filter=options.bpf_filter)
    return session


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


def files_table(reports: list[FileReport], run_id: str) -> pa.RecordBatch:
    rows = [
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
            "skipped_by_reason": [{"reason": k, "count": v} for k, v in sorted(r.skipped.items()) if v],
            "first_ts": r.first_ts_ns,
            "last_ts": r.last_ts_ns,
        }
        for r in reports
    ]
    schema = pa.schema(
        [
            ("run_id", pa.string()),
            ("path", pa.string()),
            ("capture_id", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("error_offset", pa.uint64()),
            ("format", pa.string()),
            ("compression", pa.string()),
            ("size", pa.uint64()),
            ("sha256", pa.string()),
            ("frames", pa.uint64()),
            ("decoded", pa.uint64()),
            ("skipped", pa.uint64()),
            ("skipped_by_reason", pa.list_(pa.struct([("reason", pa.string()), ("count", pa.uint64())]))),
            ("first_ts", pa.timestamp("ns", tz="UTC")),
            ("last_ts", pa.timestamp("ns", tz="UTC")),
        ]
    )
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def analyze(inputs: list[str], out: Path, options: AnalyzeOptions | None = None, argv: list[str] | None = None) -> RunResult:
    options = options or AnalyzeOptions()
    # first: a bad enrichment source (EnrichmentError, naming file and line) is a usage error
    check_selection(options)
    enricher = open_enrichment(options.enrichment)
    pseudonymizer = open_pseudonymizer(options)
    out = Path(out)
    run_id = new_run_id()
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    resolved, reports = resolve_inputs(inputs)
    if not resolved.files and not out.exists():
        # Nothing to read (a mistyped name): no dataset directory is left behind for it.
        enricher.close()
        manifest = _manifest(run_id, started, t0, inputs, options, reports, dict.fromkeys(SESSION_COUNTERS, 0), {}, [], argv, [])
        return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)
    out.mkdir(parents=True, exist_ok=True)
    removed = recover(out)
    planned = _plan(resolved.files, reports, options)
    replacement = None
    if options.reprocess:
        for p in planned:
            if not p.file.stdin:
                p.report.sha256 = p.report.sha256 or sha256_of(p.file.path)
        replacement = reprocess.plan(ledger.Ledger(out), [(p.report.path, p.report.sha256) for p in planned if not p.file.stdin])
        already = []
    else:
        already = take_new(planned, reports, out) if options.incremental else []

    writer = StagedWriter(out, run_id)
    retired, carried, rest = [], set(), None
    progress = Progress(sum(p.file.size for p in planned), len(planned), enabled=options.progress)
    totals = dict.fromkeys(SESSION_COUNTERS, 0)
    try:
        if replacement:
            retired, carried, rest = reprocess.stage_rest(out, replacement, run_id, writer.stage + "/rewrite")
        session = None
        session_group = None
        session_capture_id = None
        session_last_ts = None

        session_reports: list[FileReport] = []

        def emit(table, batch):
            out = enricher.apply(table, batch)
            if out is not None:
                if pseudonymizer is not None:  # after enrichment, which reads the real address
                    out = pseudonymizer.apply(table, out)
                writer.write(table, out)

        def close_session():
            nonlocal session
            if session is None:
                return
            try:
                for table, batch in session.finish():
                    emit(table, batch)
            except _native.InternalError as exc:
                # The flows still open are lost with the session: every file that fed it says so.
                for r in session_reports:
                    _internal_error(r, str(exc))
            add_session_totals(totals, session)
            session = None

        for p in planned:
            if session is None or starts_new_capture(session_group, session_last_ts, p):
                close_session()
                session_capture_id = _capture_id(p, options)
                session = _session(session_capture_id, options)
                session_reports = []
                enricher.set_capture_site(session_capture_id, (p.file.sidecar or {}).get("site"))
                session_group, session_last_ts = p.group, None
            p.report.capture_id = session_capture_id
            if options.checksums and p.report.sha256 is None and not p.file.stdin:
                p.report.sha256 = sha256_of(p.file.path)
            try:
                cursor = session.open_stdin(p.file.label) if p.file.stdin else session.open(str(p.file.path), p.file.label)
            except _native.CaptureFileError as exc:
                _fail(p.report, str(exc))
                continue
            except _native.InternalError as exc:
                _fail(p.report, str(exc), kind="internal")
                continue
            session_reports.append(p.report)
            while not cursor.done:
                for table, batch in session.step(cursor):
                    emit(table, batch)
                progress.update(p.file.label, cursor.input_offset, cursor.stats()["frames"])
            flush_error = None
            try:
                for table, batch in session.flush():
                    emit(table, batch)
            except _native.InternalError as exc:
                flush_error = str(exc)
            _record(p.report, cursor.stats())
            if flush_error:
                _internal_error(p.report, flush_error)
            progress.file_done(p.file.size, p.report.frames)
            if p.report.last_ts_ns is not None:
                session_last_ts = max(session_last_ts or p.report.last_ts_ns, p.report.last_ts_ns)
        close_session()
        progress.close()

        writer.write("files", files_table(reports, run_id))
        totals["enrichment"] = enricher.summary()
        totals["pseudonymization"] = pseudonymization_summary(pseudonymizer)
        manifest = _manifest(run_id, started, t0, inputs, options, reports, totals, writer.rows, removed, argv, already)
        if replacement:
            manifest["reprocessed"] = replacement.inputs
            manifest["carried_captures"] = sorted(carried)
        writer.commit(manifest, more_parts=rest.close() if rest else (), retired=retired)
    except BaseException:
        writer.abort()
        raise
    finally:
        enricher.close()
    return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)


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


def _internal_error(report: FileReport, message: str) -> None:
    """A bug of ours lost output after this file was read: what was written is kept."""
    report.error = message
    report.error_kind = "internal"
    report.status = "partial" if report.frames else "failed"


def _record(report: FileReport, stats: dict) -> None:
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


def _manifest(run_id, started, t0, inputs, options, reports, totals, rows, removed, argv, already, engine="local") -> dict:
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
            "enrichment": totals.get("enrichment"),
            "quic_keylog": totals.get("quic_keylog"),
            "pseudonymization": totals.get("pseudonymization"),
            "rows": dict(rows),
        },
        "recovered_leftovers": removed,
        "already_processed": already,
        "inputs": [asdict(r) for r in reports],
    }

"""The local engine: the embedded default, no cluster and no JVM.

inputs → probe (time order) → one native Session per capture → staged Parquet → commit + manifest.
The files of one capture (an agent's rotation set) go through one Session in time order, so a
connection that spans files is one flow. What a run is asked and reports is the run model both
engines share (jobs/run/run_model.py).
"""
from __future__ import annotations

import datetime as dt
import itertools
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tailscope import _native
from tailscope.jobs.dataset import ledger
from tailscope.jobs.dataset.staged import StagedWriter, recover
from tailscope.jobs.enrichment.enrich_options import EnrichmentOptions, capture_site, has_sources, unenriched_summary
from tailscope.jobs.enrichment.pseudonymize import sidecar_problem
from tailscope.jobs.run import reprocess
from tailscope.jobs.run.inputs import InputFile
from tailscope.jobs.run.progress import Progress
from tailscope.jobs.run.run_model import (  # noqa: F401 - AnalyzeOptions, RunResult, ... are this engine's API too
    DEFAULTS,
    SESSION_COUNTERS,
    AnalyzeOptions,
    FileReport,
    Planned,
    RunResult,
    SelectionError,
    add_session_totals,
    build_manifest,
    capture_id_of,
    check_selection,
    fail,
    file_rows,
    internal_error,
    new_run_id,
    open_pseudonymizer,
    plan_order,
    pseudonymization_summary,
    record_stats,
    resolve_inputs,
    rotation_group,
    run_key_fingerprint,
    sha256_of,
    starts_new_capture,
)


def _plan(files: list[InputFile], reports: list[FileReport], options: AnalyzeOptions) -> list[Planned]:
    """Probe every file and order them: by capture group, then by first timestamp."""
    planned = []
    key_fp = run_key_fingerprint(options)
    for f in files:
        report = FileReport(path=f.label, size=f.size)
        reports.append(report)
        if problem := sidecar_problem(f.label, f.sidecar, key_fp):
            fail(report, problem, kind="input")
            continue
        if f.url:
            fail(report, f"{f.label}: inputs on object storage or HDFS are read by --engine spark (docs/spark.md)", kind="input")
            continue
        if f.stdin:
            # a stream cannot be probed ahead: it is its own capture, read last
            planned.append(Planned(f, report, None, options.capture_id or "stdin"))
            continue
        try:
            info = _native.probe(str(f.path))
        except _native.CaptureFileError as exc:
            fail(report, str(exc))
            continue
        except _native.InternalError as exc:
            fail(report, str(exc), kind="internal")
            continue
        except OSError as exc:
            fail(report, f"{f.label}: {exc}")
            continue
        report.format, report.compression = info["format"], info["compression"]
        group = options.capture_id or f.capture_id or rotation_group(f.path)
        planned.append(Planned(f, report, info["first_ts_ns"], group))
    planned.sort(key=plan_order)
    return planned


def take_new(planned: list[Planned], reports: list[FileReport], out: Path) -> list[str]:
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


def batches_pass_through_python(options: AnalyzeOptions) -> bool:
    """Do the flows and queries batches come back to Python (jobs/enrichment/enrich.py, then the
    pseudonyms made after it)? Not without enrichment sources or pseudonyms: the native core
    then appends the unknown enrichment columns itself and writes every table, and pyarrow is
    never loaded."""
    return has_sources(options.enrichment) or options.pseudonymize_key is not None


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


def analyze(inputs: list[str], out: Path, options: AnalyzeOptions | None = None, argv: list[str] | None = None) -> RunResult:
    options = options or AnalyzeOptions()
    # first: a bad enrichment source (EnrichmentError, naming file and line) is a usage error
    check_selection(options)
    enricher = None
    if batches_pass_through_python(options):
        from tailscope.jobs.enrichment.enrich import open_enrichment

        enricher = open_enrichment(options.enrichment)
    pseudonymizer = open_pseudonymizer(options)
    out = Path(out)
    run_id = new_run_id()
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    resolved, reports = resolve_inputs(inputs)
    if not resolved.files and not out.exists():
        # Nothing to read (a mistyped name): no dataset directory is left behind for it.
        if enricher is not None:
            enricher.close()
        manifest = build_manifest(run_id, started, t0, inputs, options, reports, dict.fromkeys(SESSION_COUNTERS, 0), {}, [], argv, [])
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
        unenriched = {"flows": 0, "queries": 0, "flows_without_site": 0}
        lock = threading.Lock()  # the shared state below, and one drain's batches at a time

        def emit_all(drained) -> None:
            # A drain's flows, then its queries: enrichment reads the one for the other, so a
            # drain is emitted whole while other captures wait.
            with lock:
                for table, batch in drained:
                    out = enricher.apply(table, batch) if enricher is not None else batch
                    if out is not None:
                        if pseudonymizer is not None:  # after enrichment, which reads the real address
                            out = pseudonymizer.apply(table, out)
                        writer.write(table, out)

        def run_group(group: list[Planned]) -> None:
            """One capture group's files in time order (a new capture where a file overlaps
            what the capture holds). Groups run in parallel with --jobs."""
            session, session_reports, session_site, session_last_ts, capture_id = None, [], None, None, None

            def close_session():
                try:
                    emit_all(session.finish(writer.native))
                except _native.InternalError as exc:
                    # The flows still open are lost with the session: every file that fed it says so.
                    for r in session_reports:
                        internal_error(r, str(exc))
                with lock:
                    add_session_totals(totals, session)
                    if enricher is None:
                        written = session.written()
                        unenriched["flows"] += written.get("flows", 0)
                        unenriched["queries"] += written.get("queries", 0)
                        if session_site is None:
                            unenriched["flows_without_site"] += written.get("flows", 0)

            for p in group:
                if session is None or starts_new_capture(group[0].group, session_last_ts, p):
                    if session is not None:
                        close_session()
                    capture_id = capture_id_of(p, options)
                    session = _session(capture_id, options)
                    session_reports, session_last_ts = [], None
                    session_site = capture_site(options.enrichment, (p.file.sidecar or {}).get("site"))
                    if enricher is None:
                        session.write_unenriched((options.enrichment or EnrichmentOptions()).h3_res, session_site)
                    else:
                        with lock:
                            enricher.set_capture_site(capture_id, session_site)
                p.report.capture_id = capture_id
                if options.checksums and p.report.sha256 is None and not p.file.stdin:
                    p.report.sha256 = sha256_of(p.file.path)
                try:
                    cursor = session.open_stdin(p.file.label) if p.file.stdin else session.open(str(p.file.path), p.file.label)
                except _native.CaptureFileError as exc:
                    fail(p.report, str(exc))
                    continue
                except _native.InternalError as exc:
                    fail(p.report, str(exc), kind="internal")
                    continue
                session_reports.append(p.report)
                while not cursor.done:
                    emit_all(session.step(cursor, writer=writer.native))
                    with lock:
                        progress.update(p.file.label, cursor.input_offset, cursor.stats()["frames"])
                flush_error = None
                try:
                    emit_all(session.flush(writer.native))
                except _native.InternalError as exc:
                    flush_error = str(exc)
                record_stats(p.report, cursor.stats())
                if flush_error:
                    internal_error(p.report, flush_error)
                with lock:
                    progress.file_done(p.file.size, p.report.frames, p.file.label)
                if p.report.last_ts_ns is not None:
                    session_last_ts = max(session_last_ts or p.report.last_ts_ns, p.report.last_ts_ns)
            if session is not None:
                close_session()

        groups = [list(g) for _, g in itertools.groupby(planned, key=lambda p: p.group)]
        jobs = max(1, min(options.jobs or os.cpu_count() or 1, len(groups)))
        if jobs == 1:
            for g in groups:
                run_group(g)
        else:
            with ThreadPoolExecutor(jobs, thread_name_prefix="tailscope-capture") as pool:
                for f in [pool.submit(run_group, g) for g in groups]:
                    f.result()
        progress.close()

        writer.write_files(file_rows(reports, run_id))
        totals["enrichment"] = (
            enricher.summary() if enricher is not None else unenriched_summary(options.enrichment, **unenriched)
        )
        totals["pseudonymization"] = pseudonymization_summary(pseudonymizer)
        manifest = build_manifest(run_id, started, t0, inputs, options, reports, totals, writer.rows, removed, argv, already)
        if replacement:
            manifest["reprocessed"] = replacement.inputs
            manifest["carried_captures"] = sorted(carried)
        writer.commit(manifest, more_parts=rest.close() if rest else (), retired=retired)
    except BaseException:
        writer.abort()
        raise
    finally:
        if enricher is not None:
            enricher.close()
    return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)

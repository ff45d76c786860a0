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
import shutil
import time
from pathlib import Path

from tailscope import _native
from tailscope.jobs.dataset import ledger
from tailscope.jobs.dataset.staged import StagedWriter, recover
from tailscope.jobs.run import admission, reprocess
from tailscope.jobs.run.groups import GroupRunner, batches_pass_through_python
from tailscope.jobs.run.inputs import InputFile, spool_stdin
from tailscope.jobs.run.progress import Progress
from tailscope.jobs.run.run_model import (  # noqa: F401 - AnalyzeOptions, RunResult, ... are this engine's API too
    DEFAULTS,
    SESSION_COUNTERS,
    AnalyzeOptions,
    FileReport,
    Planned,
    RunResult,
    SelectionError,
    admit,
    build_manifest,
    capture_group_of,
    check_selection,
    fail,
    file_rows,
    new_run_id,
    nothing_to_record,
    open_pseudonymizer,
    plan_order,
    pseudonymization_summary,
    resolve_inputs,
    run_key_fingerprint,
    sha256_of,
)


def _plan(files: list[InputFile], reports: list[FileReport], options: AnalyzeOptions) -> list[Planned]:
    """Probe every file and order them: by capture group, then by first timestamp."""
    planned = []
    key_fp = run_key_fingerprint(options)
    for f in files:
        report = admit(f, reports, key_fp, f.sha256)
        if report is None:
            continue
        if f.url:
            fail(report, f"{f.label}: inputs on object storage or HDFS are read by --engine spark (docs/spark.md)", kind="input")
            continue
        try:
            info = _native.probe(str(f.path))
        except _native.CaptureFileError as exc:
            # a spooled stream is named as the user named it, not by its spool file
            fail(report, str(exc).replace(str(f.path), f.label))
            continue
        except _native.InternalError as exc:
            fail(report, str(exc), kind="internal")
            continue
        except OSError as exc:
            fail(report, f"{f.label}: {exc}")
            continue
        report.format, report.compression = info["format"], info["compression"]
        planned.append(Planned(f, report, info["first_ts_ns"], capture_group_of(f, options)))
    planned.sort(key=plan_order)
    return planned


def capture_shards(options: AnalyzeOptions, captures_at_once: int) -> int:
    """Threads per capture: the jobs the captures running at once leave over (one capture on
    two cores: two shards)."""
    if options.shards is not None:
        return max(1, options.shards)
    return max(1, (options.jobs or os.cpu_count() or 1) // captures_at_once)


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
    spool_dir = out / "_staging" / f"{run_id}-stdin"  # recover() removes it if the run dies
    try:
        known = ledger.Ledger(out)
        # before anything is read: no dataset mixes pseudonyms with real addresses, or two filters
        ledger.check_settings(known, run_key_fingerprint(options), options.bpf_filter)
        spool_stdin(resolved, spool_dir)
        return _run(out, run_id, started, t0, inputs, resolved, reports, options, known, enricher, pseudonymizer, removed, argv)
    finally:
        if enricher is not None:
            enricher.close()
        if spool_dir.exists():
            shutil.rmtree(spool_dir, ignore_errors=True)
            try:
                spool_dir.parent.rmdir()
            except OSError:
                pass  # another run's staging is there


def _run(out, run_id, started, t0, inputs, resolved, reports, options, known, enricher, pseudonymizer, removed, argv) -> RunResult:
    planned = _plan(resolved.files, reports, options)
    replacement = None
    adm = admission.Admission()
    if options.reprocess:
        grown = {}
        for p in planned:
            p.report.sha256 = p.report.sha256 or sha256_of(p.file.path)
            grown[p.report.path] = [e.sha256 for e in admission.grown_from(known, p)]
        replacement = reprocess.plan(known, [(p.report.path, p.report.sha256) for p in planned], grown)
    elif options.incremental:
        adm = admission.take(planned, reports, known, options, sha256_of)
    already = adm.already
    if nothing_to_record(reports, replacement, removed):  # (planned files have reports)
        manifest = build_manifest(run_id, started, t0, inputs, options, reports, dict.fromkeys(SESSION_COUNTERS, 0), {},
                                  removed, argv, already, below_horizon=adm.below_horizon)
        return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)

    writer = StagedWriter(out, run_id)
    retired, carried, rest = [], set(), None
    progress = Progress(sum(p.file.size for p in planned), len(planned), enabled=options.progress)
    try:
        if replacement:
            retired, carried, rest = reprocess.stage_rest(out, replacement, run_id, writer.stage + "/rewrite")
        groups = [list(g) for _, g in itertools.groupby(planned, key=lambda p: p.group)]
        jobs = max(1, min(options.jobs or os.cpu_count() or 1, len(groups)))
        # Fewer captures than jobs: the spare threads analyse each capture's flows (shards).
        runner = GroupRunner(options, writer, enricher, pseudonymizer, progress, shards=capture_shards(options, jobs))
        if jobs == 1:
            for g in groups:
                runner.run(g)
        else:
            from concurrent.futures import ThreadPoolExecutor  # (and logging): not for one capture

            with ThreadPoolExecutor(jobs, thread_name_prefix="tailscope-capture") as pool:
                for f in [pool.submit(runner.run, g) for g in groups]:
                    f.result()
        progress.close()

        writer.write_files(file_rows(reports, run_id))
        totals = {**runner.totals, "enrichment": runner.enrichment_summary()}
        totals["pseudonymization"] = pseudonymization_summary(pseudonymizer)
        manifest = build_manifest(run_id, started, t0, inputs, options, reports, totals, writer.rows, removed, argv, already,
                                  below_horizon=adm.below_horizon)
        if replacement:
            manifest["reprocessed"] = replacement.inputs
            manifest["carried_captures"] = sorted(carried)
        writer.commit(manifest, more_parts=rest.close() if rest else (), retired=retired)
    except BaseException:
        writer.abort()
        raise
    return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)

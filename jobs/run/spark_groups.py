"""The Spark engine's default plan: a capture group per task (docs/spark.md).

driver    group the files by name as the local engine does (rotation set, or the agent's
          capture_id) and deal the groups into bins of about equal bytes
stage     one task per bin: each file of a group is fetched if remote, hashed, dropped if a
          committed run holds its content, probed (format, first frame time); the group's files
          in time order through the local engine's GroupRunner: the same native Session, with no
          frame crossing the network. Each task attempt stages its own Parquet parts and returns
          their names and the files' reports
driver    publish the parts of the attempts Spark accepted, the files table and the manifest

Captures are naturally many (one per edge server and rotation window), so groups fill the
cluster; a capture too large for one task is split by flow group instead
(`--spark-split-captures`, spark_engine's frame shuffle).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import tempfile
from dataclasses import dataclass

import pyarrow as pa

from tailscope import _native
from tailscope.jobs.dataset import storage
from tailscope.jobs.dataset.ledger import Ledger
from tailscope.jobs.dataset.staged import StagedPart, StagedWriter
from tailscope.jobs.enrichment.enrich import open_enrichment
from tailscope.jobs.enrichment.enrich_options import unenriched_summary
from tailscope.jobs.enrichment.pseudonymize import Pseudonymizer
from tailscope.jobs.run import admission
from tailscope.jobs.run.groups import GroupRunner
from tailscope.jobs.run.inputs import InputFile
from tailscope.jobs.run.run_model import SESSION_COUNTERS, AnalyzeOptions, FileReport, Planned, fail, plan_order, sha256_of

# What a task returns, a row each, whichever plan: its staged parts, its totals, its files' reports.
RESULT_COLUMNS = ["kind", "table_name", "date", "path", "info"]
RESULT_SCHEMA = ", ".join(f"{c} string" for c in RESULT_COLUMNS)


def result_batch(parts: list[StagedPart], summary: dict, reports: list[dict] = ()) -> pa.RecordBatch:
    rows = [{"kind": "part", "table_name": p.table, "date": p.date, "path": p.path, "info": None} for p in parts]
    rows += [{"kind": "report", "table_name": None, "date": None, "path": None, "info": json.dumps(r)} for r in reports]
    rows.append({"kind": "totals", "table_name": None, "date": None, "path": None, "info": json.dumps(summary)})
    return pa.RecordBatch.from_pylist(rows, schema=pa.schema([(n, pa.string()) for n in RESULT_COLUMNS]))


def read_results(results) -> tuple[list[StagedPart], list[dict], list[dict]]:
    """The collected rows of result_batch: every task's parts, totals and reports."""
    parts = [StagedPart(r["table_name"], r["date"], r["path"]) for r in results if r["kind"] == "part"]
    summaries = [json.loads(r["info"]) for r in results if r["kind"] == "totals"]
    reports = [json.loads(r["info"]) for r in results if r["kind"] == "report"]
    return parts, summaries, reports


def merge_counts(summaries: list[dict]) -> dict | None:
    """Tasks' count summaries (enrichment, key log) as one: numbers added, the rest kept."""
    merged: dict = {}
    for s in summaries:
        for k, v in s.items():
            if isinstance(v, int) and not isinstance(v, bool):
                merged[k] = merged.get(k, 0) + v
            else:
                merged.setdefault(k, v)
    return merged or None


def merge_totals(summaries: list[dict]) -> dict:
    """The run's session counters, key-log counts and rows per table from its tasks' totals (the
    enrichment summary is the caller's: it depends on whether batches came back to Python)."""
    totals = {
        **{k: sum(s[k] for s in summaries) for k in SESSION_COUNTERS},
        "quic_keylog": merge_counts([s["quic_keylog"] for s in summaries if s.get("quic_keylog")]),
        "rows": {},
    }
    for s in summaries:
        for table, n in s["rows"].items():
            totals["rows"][table] = totals["rows"].get(table, 0) + n
    return totals


def local_copy(path: str, checksums: bool, scratch: contextlib.ExitStack) -> tuple[str | None, str]:
    """(sha256 or None, a local path the native reader can open) for a capture named by path or
    URL: a file on object storage is fetched into `scratch`, hashed on the way; a local one is
    hashed when `checksums`."""
    if storage.is_url(path):
        tmp = scratch.enter_context(tempfile.NamedTemporaryFile(prefix="tailscope-", suffix=".capture"))
        sha = sha256_of(path, copy_to=tmp)
        tmp.flush()
        return sha, tmp.name
    return (sha256_of(path) if checksums else None), path


def probe_files(checksums: bool, fs_config: dict):
    """mapInArrow body: (file_no, path or URL) rows in; per file as JSON its format, compression,
    first frame time and sha256, or the error that stops it (--reprocess must know every input's
    content before the run stages the rows it replaces)."""

    def run(batches):
        storage.apply_config(fs_config)
        for b in batches:
            out = []
            for file_no, path in zip(b.column("file_no").to_pylist(), b.column("path").to_pylist()):
                out.append({"file_no": file_no, "info": json.dumps(_probe(path, checksums))})
            yield pa.RecordBatch.from_pylist(out, schema=pa.schema([("file_no", pa.int32()), ("info", pa.string())]))

    return run


def _probe(path: str, checksums: bool) -> dict:
    with contextlib.ExitStack() as scratch:
        try:
            sha, local = local_copy(path, checksums, scratch)
            info = _native.probe(local)
        except (_native.CaptureFileError, _native.InternalError) as exc:
            return {"open_error": str(exc)}
        except OSError as exc:
            return {"open_error": f"{path}: {exc}"}
    return {"format": info["format"], "compression": info["compression"], "first_frame_ts_ns": info["first_ts_ns"], "sha256": sha}


@dataclass
class GroupJob:
    out: str
    run_id: str
    stage: str
    # per capture group: its name and (index of the file's report on the driver, the file)
    groups: list[tuple[str, list[tuple[int, InputFile]]]]
    # the groups each task runs (a task per bin)
    bins: list[list[int]]
    options: AnalyzeOptions
    fs_config: dict
    pass_through_python: bool
    # the dataset's ledger for an incremental run (None: take every file): each file is judged by
    # the local engine's rules (jobs/run/admission.py)
    known: Ledger | None
    checksums: bool
    # the Crypto-PAn key (the executors do not read the driver's key file)
    pseudonymize_key: bytes | None = None


def run_groups(job: GroupJob):
    """mapInArrow body: bin numbers in; the bin's groups run; staged part names, the session
    totals and each file's report out."""

    def run(batches):
        from pyspark import TaskContext

        tc = TaskContext.get()
        tag = f"g{tc.partitionId():05d}a{tc.taskAttemptId()}n" if tc else "g0a0n"
        storage.apply_config(job.fs_config)
        writer = StagedWriter(job.out, job.run_id, stage=storage.join(job.stage, "tasks", tag), tag=tag)
        enricher = open_enrichment(job.options.enrichment) if job.pass_through_python else None
        pseudonymizer = Pseudonymizer(job.pseudonymize_key) if job.pseudonymize_key else None
        runner = GroupRunner(job.options, writer, enricher, pseudonymizer)
        reports = []
        try:
            for b in batches:
                for g in (g for n in b.column("bin").to_pylist() for g in job.bins[n]):
                    name, files = job.groups[g]
                    with contextlib.ExitStack() as scratch:
                        planned, paths = [], {}
                        for i, f in files:
                            report = FileReport(path=f.label, size=f.size)
                            p = _plan_file(f, name, report, job, paths, scratch)
                            reports.append({"i": i, "dropped": p == DROPPED, "report": report})
                            if isinstance(p, Planned):
                                planned.append(p)
                        planned.sort(key=plan_order)
                        runner.run(planned, paths)
            parts = writer.close()
            summary = {
                "rows": writer.rows,
                "enrichment": enricher.summary() if enricher is not None else None,
                "unenriched": runner.unenriched,
                **runner.totals,
            }
        except BaseException:
            writer.abort()
            raise
        finally:
            if enricher is not None:
                enricher.close()
        for r in reports:
            r["report"] = dataclasses.asdict(r["report"])
        yield result_batch(parts, summary, reports)

    return run


# What _plan_file returns for a file whose content a committed run holds. A string compared with
# ==, not an object() compared with `is`: Spark pickles run_groups' closure with its globals by
# value (cloudpickle), so on an executor the closure's DROPPED was a copy of the one _plan_file
# returns, `is` never matched, and a renamed copy of a held file kept a files row with 0 frames.
DROPPED = "dropped"


def _plan_file(f: InputFile, group: str, report: FileReport, job: GroupJob, paths: dict, scratch) -> Planned | object | None:
    """The task's plan of one file: its Planned entry, DROPPED when a committed run holds its
    content, or None when it cannot be read (the report says why). A file on object storage is
    fetched into `scratch` (hashed on the way) and `paths` says where."""
    try:
        sha, local = local_copy(f.url or str(f.path), job.checksums, scratch)
    except OSError as exc:
        fail(report, f"{f.label}: {exc}")
        return None
    report.sha256 = sha
    if sha is not None and job.known is not None:
        v = admission.judge(job.known, f.label, sha, f.size, job.options, lambda sizes: admission.hashes(local, sizes)[1])
        if v.kind in (admission.ALREADY, admission.BELOW_HORIZON):
            return DROPPED
        if v.kind == admission.REFUSED:
            fail(report, v.reason, kind="input")
            return None
    try:
        info = _native.probe(local)
    except _native.CaptureFileError as exc:
        fail(report, str(exc).replace(local, f.label))
        return None
    except _native.InternalError as exc:
        fail(report, str(exc).replace(local, f.label), kind="internal")
        return None
    except OSError as exc:
        fail(report, f"{f.label}: {exc}")
        return None
    report.format, report.compression = info["format"], info["compression"]
    paths[f.label] = local
    return Planned(f, report, info["first_ts_ns"], group)


def bins_by_size(groups: list[tuple[str, list[tuple[int, InputFile]]]], n: int) -> list[list[int]]:
    """The groups in at most `n` bins of about equal bytes (largest first, each into the lightest
    bin): a task per group would pay a Python worker and a writer per small capture, one bin per
    core would leave cores idle behind one large capture."""
    sizes = sorted(((sum(f.size or 0 for _, f in g), i) for i, (_, g) in enumerate(groups)), reverse=True)
    bins: list[list[int]] = [[] for _ in range(max(1, min(n, len(groups))))]
    loads = [0] * len(bins)
    for size, i in sizes:
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += size
    for b in bins:
        b.sort()  # groups in plan order within a task
    return bins


def collect(spark, job: GroupJob, reports: list[FileReport]) -> tuple[list[StagedPart], dict, list[str]]:
    """Run the bins of groups, one task each; fill the driver's file reports from the tasks'
    (a file dropped as already processed loses its report). Returns the staged parts, the run's
    totals and the dropped files."""
    n = len(job.bins)
    if not job.groups:
        return [], {**dict.fromkeys(SESSION_COUNTERS, 0), "enrichment": unenriched_summary(job.options.enrichment, flows=0, queries=0, flows_without_site=0)}, []
    bins_df = spark.createDataFrame(spark.sparkContext.parallelize([(b,) for b in range(n)], n), "bin int")
    parts, summaries, task_reports = read_results(bins_df.mapInArrow(run_groups(job), RESULT_SCHEMA).collect())
    dropped = {}
    for d in task_reports:
        if d["dropped"]:
            dropped[d["i"]] = reports[d["i"]].path
        else:
            vars(reports[d["i"]]).update(d["report"])
    reports[:] = [r for i, r in enumerate(reports) if i not in dropped]
    totals = merge_totals(summaries)
    if job.pass_through_python:
        totals["enrichment"] = merge_counts([s["enrichment"] for s in summaries])
    else:
        unenriched = {k: sum(s["unenriched"][k] for s in summaries) for k in ("flows", "queries", "flows_without_site")}
        totals["enrichment"] = unenriched_summary(job.options.enrichment, **unenriched)
    return parts, totals, [dropped[i] for i in sorted(dropped)]

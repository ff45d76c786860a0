"""The Spark engine's default plan: a capture group per task (docs/spark.md).

stage 1   probe: one task per file reads its header and first frame time (and its sha256)
driver    plan as the local engine does (capture groups, time order), drop what the ledger holds
stage 2   one task per capture group runs the local engine's GroupRunner over the group's files:
          the same native Session, with no frame crossing the network; each task attempt stages
          its own Parquet parts and returns their names and the files' reports
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
from tailscope.jobs.dataset.staged import StagedPart, StagedWriter
from tailscope.jobs.enrichment.enrich import open_enrichment
from tailscope.jobs.enrichment.enrich_options import unenriched_summary
from tailscope.jobs.enrichment.pseudonymize import Pseudonymizer
from tailscope.jobs.run.groups import GroupRunner
from tailscope.jobs.run.run_model import SESSION_COUNTERS, AnalyzeOptions, Planned, sha256_of

RESULT_COLUMNS = ["kind", "table_name", "date", "path", "info"]


def probe_files(checksums: bool, fs_config: dict):
    """mapInArrow body: (file_no, path or URL) rows in; per file what the planner needs, as
    JSON: format, compression, first frame time and sha256, or the error that stops it."""

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
            if storage.is_url(path):
                # The native reader opens local files: fetch, hashing on the way.
                tmp = scratch.enter_context(tempfile.NamedTemporaryFile(prefix="tailscope-", suffix=".capture"))
                sha, local = sha256_of(path, copy_to=tmp), tmp.name
                tmp.flush()
            else:
                sha, local = (sha256_of(path) if checksums else None), path
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
    # per capture group: (index of the file in the driver's plan, the planned file)
    groups: list[list[tuple[int, Planned]]]
    # the groups each task runs (a task per bin)
    bins: list[list[int]]
    options: AnalyzeOptions
    fs_config: dict
    pass_through_python: bool
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
                    with contextlib.ExitStack() as scratch:
                        paths = _fetch(job.groups[g], scratch)
                        runner.paths = paths
                        runner.run([p for _, p in job.groups[g]])
                    reports += [{"i": i, "report": dataclasses.asdict(p.report)} for i, p in job.groups[g]]
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
        rows = [{"kind": "part", "table_name": p.table, "date": p.date, "path": p.path, "info": None} for p in parts]
        rows += [{"kind": "report", "table_name": None, "date": None, "path": None, "info": json.dumps(r)} for r in reports]
        rows.append({"kind": "totals", "table_name": None, "date": None, "path": None, "info": json.dumps(summary)})
        yield pa.RecordBatch.from_pylist(rows, schema=pa.schema([(n, pa.string()) for n in RESULT_COLUMNS]))

    return run


def _fetch(group: list[tuple[int, Planned]], scratch: contextlib.ExitStack) -> dict[str, str]:
    """Local copies of the group's files on object storage, by label (removed with `scratch`)."""
    paths = {}
    for _, p in group:
        if p.file.url:
            tmp = scratch.enter_context(tempfile.NamedTemporaryFile(prefix="tailscope-", suffix=".capture"))
            sha = sha256_of(p.file.url, copy_to=tmp)
            tmp.flush()
            p.report.sha256 = p.report.sha256 or sha
            paths[p.file.label] = tmp.name
    return paths


def bins_by_size(groups: list[list[tuple[int, Planned]]], n: int) -> list[list[int]]:
    """The groups in at most `n` bins of about equal bytes (largest first, each into the lightest
    bin): a task per group would pay a Python worker and a writer per small capture, one bin per
    core would leave cores idle behind one large capture."""
    sizes = sorted(((sum(p.file.size or 0 for _, p in g), i) for i, g in enumerate(groups)), reverse=True)
    bins: list[list[int]] = [[] for _ in range(max(1, min(n, len(groups))))]
    loads = [0] * len(bins)
    for size, i in sizes:
        k = loads.index(min(loads))
        bins[k].append(i)
        loads[k] += size
    for b in bins:
        b.sort()  # groups in plan order within a task
    return bins


def collect(spark, job: GroupJob, reports_by_index: dict, merge_counts) -> tuple[list[StagedPart], dict]:
    """Run the bins of groups, one task each; fill the driver's file reports from the tasks'.
    Returns the staged parts and the run's totals."""
    n = len(job.bins)
    if not job.groups:
        return [], {**dict.fromkeys(SESSION_COUNTERS, 0), "enrichment": unenriched_summary(job.options.enrichment, flows=0, queries=0, flows_without_site=0)}
    bins_df = spark.createDataFrame(spark.sparkContext.parallelize([(b,) for b in range(n)], n), "bin int")
    schema = ", ".join(f"{c} string" for c in RESULT_COLUMNS)
    results = bins_df.mapInArrow(run_groups(job), schema).collect()
    parts = [StagedPart(r["table_name"], r["date"], r["path"]) for r in results if r["kind"] == "part"]
    for r in results:
        if r["kind"] == "report":
            d = json.loads(r["info"])
            vars(reports_by_index[d["i"]]).update(d["report"])
    summaries = [json.loads(r["info"]) for r in results if r["kind"] == "totals"]
    totals = {
        **{k: sum(s[k] for s in summaries) for k in SESSION_COUNTERS},
        "quic_keylog": merge_counts([s["quic_keylog"] for s in summaries if s.get("quic_keylog")]),
        "rows": {},
    }
    if job.pass_through_python:
        totals["enrichment"] = merge_counts([s["enrichment"] for s in summaries])
    else:
        unenriched = {k: sum(s["unenriched"][k] for s in summaries) for k in ("flows", "queries", "flows_without_site")}
        totals["enrichment"] = unenriched_summary(job.options.enrichment, **unenriched)
    for s in summaries:
        for table, rows in s["rows"].items():
            totals["rows"][table] = totals["rows"].get(table, 0) + rows
    return parts, totals

"""The Spark engine: the local engine's native core, distributed (docs/spark.md).

By default a task runs a whole capture group through the local engine's GroupRunner
(jobs/run/spark_groups.py): no frame crosses the network. With --spark-split-captures, a capture's
flows are spread over many tasks instead, by shuffling its frames:

driver    resolve, probe and order the inputs (jobs/run/run_model.py), drop what the ledger holds
stage 1   decode: one task per file; a native FrameSplitter emits the decodable frames, each
          tagged with its group of flows (5-tuple; server endpoint for UDP so QUIC migration
          stays whole), and stages the file's accounting as JSON
driver    chain files into captures exactly as the local engine does (starts_new_capture)
stage 2   shuffle frames by (capture, group), sort each partition by (capture, group, file,
          frame), and replay them through a native Replayer per capture: the same flow table
          and signatures as the local engine, a group at a time; enrichment; each task attempt
          stages its own Parquet parts and returns their names
driver    publish the parts of the attempts Spark accepted, the files table and the manifest

Only the manifest makes a run visible (jobs/dataset/staged.py), and the ledger of processed files is
those manifests (jobs/dataset/ledger.py): a run killed at any point leaves nothing a reader counts, and
the next run does the work again.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tailscope import _native
from tailscope.jobs.dataset import ledger, storage
from tailscope.jobs.dataset.staged import StagedPart, StagedWriter, recover
from tailscope.jobs.enrichment.enrich import EnrichmentOptions, open_enrichment
from tailscope.jobs.enrichment.pseudonymize import Pseudonymizer, load_key, sidecar_problem
from tailscope.jobs.run import admission, reprocess, spark_groups
from tailscope.jobs.run.groups import batches_pass_through_python
from tailscope.jobs.run.run_model import (
    SESSION_COUNTERS,
    AnalyzeOptions,
    FileReport,
    Planned,
    RunResult,
    add_session_totals,
    admit,
    build_manifest,
    capture_group_of,
    capture_id_of,
    fail,
    files_table,
    new_run_id,
    nothing_to_record,
    open_pseudonymizer,
    plan_order,
    pseudonymization_summary,
    record_stats,
    resolve_inputs,
    run_key_fingerprint,
    starts_new_capture,
)

MIN_JAVA = 17


@dataclass
class SparkOptions:
    master: str | None = None  # None: spark-submit's, else local[*]
    partitions: int | None = None  # tasks (capture groups) or shuffle partitions (frame replay); None: 2 per core
    # A capture per task (default), or its frames shuffled by flow group over many tasks: for
    # captures too large for one task (jobs/run/spark_groups.py)
    split_captures: bool = False
    conf: dict[str, str] = field(default_factory=dict)


class SparkUnavailable(RuntimeError):
    """PySpark or a Java runtime is missing (scripts/install-java.sh installs one)."""


# ---- the Spark session -------------------------------------------------------------------------

def java_version() -> int | None:
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get("JAVA_HOME") else None
    java = java or shutil.which("java")
    if not java:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    # 'openjdk version "17.0.15" 2025-04-15' / 'java version "1.8.0_392"'
    for token in out.split('"')[1:2]:
        parts = token.split(".")
        major = parts[1] if parts[0] == "1" and len(parts) > 1 else parts[0]
        return int(major) if major.isdigit() else None
    return None


def launched_by_spark_submit() -> bool:
    """Whether this driver was started by spark-submit (which hands PySpark its JVM's gateway)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def on_executors(options: AnalyzeOptions, files: list) -> tuple[AnalyzeOptions, list]:
    """Local paths as executors must see them: absolute. An executor runs in a work directory of
    its own, so a path relative to the driver's names nothing there (inputs failed with ENOENT,
    enrichment sources with an internal error). Labels stay as given."""
    import dataclasses

    files = [f if f.url or f.stdin else dataclasses.replace(f, path=Path(f.path).absolute()) for f in files]
    e = options.enrichment
    if e is not None:
        e = dataclasses.replace(
            e,
            prefixes=[Path(p).absolute() for p in e.prefixes],
            sessions=[Path(p).absolute() for p in e.sessions],
            asn_db=Path(e.asn_db).absolute() if e.asn_db else None,
            regions=Path(e.regions).absolute() if e.regions else None,
        )
        options = dataclasses.replace(options, enrichment=e)
    return options, files


def spark_session(options: SparkOptions):
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise SparkUnavailable("the Spark engine needs PySpark: pip install 'tailscope[spark]'") from exc
    version = java_version()
    if version is None or version < MIN_JAVA:
        found = "no Java runtime" if version is None else f"Java {version}"
        raise SparkUnavailable(f"the Spark engine needs Java {MIN_JAVA}+ and found {found}: run scripts/install-java.sh")
    # Executors run the same interpreter (and so the same installed tailscope) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()
    if options.master:
        conf.setMaster(options.master)
    elif not launched_by_spark_submit() and not conf.contains("spark.master"):
        # spark-submit's --master lives in its JVM, which a SparkConf made before the session
        # cannot see: setting one here would override it (docs/spark.md).
        conf.setMaster("local[*]")
    conf.setAppName("tailscope")
    conf.setIfMissing("spark.ui.showConsoleProgress", "false")
    conf.setIfMissing("spark.sql.execution.arrow.maxRecordsPerBatch", "16384")
    for k, v in options.conf.items():
        conf.set(k, v)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    if "spark.log.level" not in options.conf:
        # Spark's WARN lines (loopback hostname, native Hadoop) drown the tool's own messages.
        spark.sparkContext.setLogLevel("ERROR")
    return spark


# ---- stage 1: decode ---------------------------------------------------------------------------

# Spark's cost is per row, and a packet is small: the frames travel packed, one row per run of
# one group's frames in a decode batch (tens to thousands of packets), as list columns.
PACKED_LISTS = ("frame", "ts_ns", "linktype", "wire_len", "data")


def _frames_spark_schema():
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, LongType, StructField, StructType

    return StructType([
        StructField("file_no", IntegerType(), False),
        StructField("flow_group", LongType(), False),
        StructField("first_frame", LongType(), False),
        *(StructField(c, ArrayType(BinaryType() if c == "data" else LongType(), False), False) for c in PACKED_LISTS),
    ])


def _pack(fb: pa.RecordBatch, file_no: int) -> pa.RecordBatch:
    """A FrameSplitter batch as rows of one group each, frames in file order inside a row."""
    fb = fb.take(pc.sort_indices(fb, [("group", "ascending"), ("frame", "ascending")]))
    starts = [s for _, s, _ in _runs(fb.column("group"))]
    offsets = pa.array(starts + [fb.num_rows], pa.int32())
    first = pa.array(starts, pa.int32())
    cols = {
        "frame": fb.column("frame").cast(pa.int64()),
        "ts_ns": fb.column("ts_ns"),
        "linktype": fb.column("linktype").cast(pa.int64()),
        "wire_len": fb.column("wire_len").cast(pa.int64()),
        "data": fb.column("data"),
    }
    return pa.RecordBatch.from_arrays(
        [
            pa.array([file_no] * len(starts), pa.int32()),
            fb.column("group").view(pa.int64()).take(first),  # Spark has no unsigned types
            cols["frame"].take(first),
            *(pa.ListArray.from_arrays(offsets, cols[c]) for c in PACKED_LISTS),
        ],
        names=["file_no", "flow_group", "first_frame", *PACKED_LISTS],
    )


def _decode_files(stats_dir: str, batch_rows: int, checksums: bool, fs_config: dict):
    """mapInArrow body: (file_no, path or URL) rows in, frames out; each file's accounting (and
    sha256: the driver reads no capture) staged as JSON — a retried attempt rewrites the same."""

    def run(batches):
        storage.apply_config(fs_config)
        loc = storage.location(stats_dir)
        for b in batches:
            for file_no, path in zip(b.column("file_no").to_pylist(), b.column("path").to_pylist()):
                stats_path = storage.join(stats_dir, f"{file_no}.json")
                with contextlib.ExitStack() as scratch:
                    try:
                        sha, local = spark_groups.local_copy(path, checksums, scratch)
                        split = _native.FrameSplitter(local, 0, path)
                    except (_native.CaptureFileError, _native.InternalError, OSError) as exc:
                        msg = str(exc) if isinstance(exc, (_native.CaptureFileError, _native.InternalError)) else f"{path}: {exc}"
                        loc.write_text_atomic(stats_path, json.dumps({"open_error": msg}))
                        continue
                    while (fb := split.next_batch(batch_rows)) is not None:
                        yield _pack(fb, file_no)
                    stats = dict(split.stats())
                    stats["sha256"] = sha
                    loc.write_text_atomic(stats_path, json.dumps(stats))

    return run


# ---- driver: captures --------------------------------------------------------------------------

@dataclass
class Capture:
    """One rotation chain, as one local-engine Session sees it."""

    capture_id: str
    group: str
    site: str | None
    files: list[str] = field(default_factory=list)
    horizon_ns: int | None = None
    last_ts_ns: int | None = None


def chain_captures(planned, stats: dict[int, dict], options: AnalyzeOptions) -> tuple[list[Capture], list[tuple[int, int, int]]]:
    """The local engine's capture chaining, from the decode stage's per-file stats. Returns the
    captures and (file_no, capture_no, file_index) for every file that was opened."""
    captures: list[Capture] = []
    file_map = []
    cur = None
    for file_no, p in planned:
        if cur is None or starts_new_capture(cur.group, cur.last_ts_ns, p):
            cur = Capture(capture_id_of(p, options), p.group, (p.file.sidecar or {}).get("site"))
            captures.append(cur)
        p.report.capture_id = cur.capture_id
        s = stats[file_no]
        record_stats(p.report, s)
        file_map.append((file_no, len(captures) - 1, len(cur.files)))
        cur.files.append(p.file.label)
        if s.get("last_decoded_ts_ns") is not None:
            cur.horizon_ns = max(cur.horizon_ns or s["last_decoded_ts_ns"], s["last_decoded_ts_ns"])
        if p.report.last_ts_ns is not None:
            cur.last_ts_ns = max(cur.last_ts_ns or p.report.last_ts_ns, p.report.last_ts_ns)
    return captures, file_map


# ---- stage 2: replay ---------------------------------------------------------------------------

@dataclass
class _ReplayJob:
    out: str
    run_id: str
    stage: str
    captures: list[Capture]
    session_kwargs: dict
    enrichment: EnrichmentOptions | None
    keylogs: list[str]
    fs_config: dict
    # the Crypto-PAn key (the executors do not read the driver's key file)
    pseudonymize_key: bytes | None = None
    packets: str = "all"


def _native_frames(b: pa.RecordBatch) -> pa.RecordBatch:
    """Packed rows (ordered by group, file, first frame) back into one frames batch."""
    parents = pc.list_parent_indices(b.column("frame"))
    data = b.column("data").flatten()
    if pa.types.is_large_binary(data.type):
        data = data.cast(pa.binary())
    return pa.RecordBatch.from_arrays(
        [
            b.column("flow_group").take(parents).view(pa.uint64()),
            b.column("file_index").take(parents).cast(pa.uint32()),
            b.column("frame").flatten().cast(pa.uint64()),
            b.column("ts_ns").flatten(),
            b.column("linktype").flatten().cast(pa.uint32()),
            b.column("wire_len").flatten().cast(pa.uint32()),
            data,
        ],
        schema=_native.frame_schema(),
    )


def _runs(values: pa.Array) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in a sorted column."""
    n = len(values)
    if n == 0:
        return []
    changed = pc.not_equal(values.slice(1), values.slice(0, n - 1))
    cuts = [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
    starts, ends = [0] + cuts, cuts + [n]
    return [(values[s].as_py(), s, e) for s, e in zip(starts, ends)]


def _replay_partitions(job: _ReplayJob):
    """mapInArrow body: sorted frames in; staged part names and counts out."""

    def run(batches):
        from pyspark import TaskContext

        tc = TaskContext.get()
        tag = f"p{tc.partitionId():05d}a{tc.taskAttemptId()}n" if tc else "p0a0n"
        storage.apply_config(job.fs_config)
        writer = StagedWriter(job.out, job.run_id, stage=storage.join(job.stage, "tasks", tag), tag=tag)
        enricher = open_enrichment(job.enrichment)
        for c in job.captures:
            enricher.set_capture_site(c.capture_id, c.site)
        totals = dict.fromkeys(SESSION_COUNTERS, 0)
        replayer, capture_no = None, None

        pseudonymizer = Pseudonymizer(job.pseudonymize_key) if job.pseudonymize_key else None

        def emit(table, batch):
            out = enricher.apply(table, batch)
            if out is not None:  # None: query_flows, consumed by the enrichment
                if pseudonymizer is not None:
                    out = pseudonymizer.apply(table, out)
                writer.write(table, out)

        def end_capture():
            for table, out in replayer.finish():
                emit(table, out)
            add_session_totals(totals, replayer)

        try:
            for b in batches:
                for cno, lo, hi in _runs(b.column("capture_no")):
                    if cno != capture_no:
                        if replayer is not None:
                            end_capture()
                        capture_no, c = cno, job.captures[cno]
                        replayer = _native.Replayer(c.capture_id, c.files, c.horizon_ns, **job.session_kwargs)
                        if job.packets != "all":
                            replayer.keep_packets(job.packets)
                        for k in job.keylogs:
                            replayer.add_keylog(k)
                    for table, out in replayer.feed(_native_frames(b.slice(lo, hi - lo))):
                        emit(table, out)
            if replayer is not None:
                end_capture()
            parts = writer.close()
            summary = {"rows": writer.rows, "enrichment": enricher.summary(), **totals}
        except BaseException:
            writer.abort()
            raise
        finally:
            enricher.close()
        yield spark_groups.result_batch(parts, summary)

    return run


# ---- the run -----------------------------------------------------------------------------------

def analyze(
    inputs: list[str],
    out,
    options: AnalyzeOptions | None = None,
    spark_options: SparkOptions | None = None,
    argv: list[str] | None = None,
) -> RunResult:
    """One run. `inputs` and `out` may be local paths or URLs (s3://, s3a://, hdfs://, ...)."""
    options = options or AnalyzeOptions(incremental=True)
    spark_options = spark_options or SparkOptions()
    # Fail on a bad enrichment source or a missing Java before touching the dataset.
    open_enrichment(options.enrichment).close()
    open_pseudonymizer(options)  # a bad key file: PseudonymKeyError
    spark = spark_session(spark_options)
    log = (lambda msg: print(f"tailscope[spark]: {msg}", file=sys.stderr, flush=True)) if options.progress else (lambda msg: None)

    out = str(out) if storage.is_url(out) else Path(out).absolute()
    if isinstance(out, Path):
        out.mkdir(parents=True, exist_ok=True)
    removed = recover(out)
    run_id = new_run_id()
    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()

    resolved, reports = resolve_inputs(inputs)
    options, files = on_executors(options, resolved.files)
    already: list[str] = []
    # --reprocess takes every input again (and replaces the rows of those the dataset holds)
    # no dataset mixes pseudonyms with real addresses (jobs/dataset/ledger.py; --filter is local only)
    ledger.check_settings(ledger.Ledger(out), run_key_fingerprint(options), options.bpf_filter)
    known = ledger.Ledger(out) if options.incremental and not options.reprocess else None
    if known:
        # Known by name and size: judged without reading (files are immutable once shipped), by
        # the local engine's rules (jobs/run/admission.py): skipped, or refused when the run that
        # took it read a narrower --since/--until window.
        files = _judge_known_names(files, known, reports, options, already)

    writer = StagedWriter(out, run_id)
    frames_df = None
    replacement, retired, carried, rest = None, [], set(), None
    try:
        stats_dir = storage.join(writer.stage, "file_stats")
        writer.loc.mkdirs(stats_dir)
        totals = {**dict.fromkeys(SESSION_COUNTERS, 0), "enrichment": None}
        parts: list[StagedPart] = []
        planned = []
        if files and spark_options.split_captures:
            rows = [(i, f.url or str(f.path)) for i, f in enumerate(files)]
            files_df = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(rows)), "file_no int, path string")
            log(f"decoding {len(files)} files")
            from pyspark import StorageLevel

            frames_df = files_df.mapInArrow(
                _decode_files(stats_dir, options.batch_rows, options.checksums or options.incremental or options.reprocess,
                              storage.config_snapshot()), _frames_spark_schema()
            ).persist(StorageLevel.DISK_ONLY)
            frames_df.count()  # decode every file once; the replay reads the persisted frames
            stats = {int(p.rsplit("/", 1)[-1][: -len(".json")]): json.loads(writer.loc.read_text(p))
                     for p in writer.loc.listdir(stats_dir) if p.endswith(".json")}
            planned, dropped = _plan_decoded(files, stats, reports, options, known)
            already += dropped
            if options.reprocess:
                replacement = reprocess.plan(ledger.Ledger(out), [(p.report.path, p.report.sha256) for _, p in planned])
                if replacement:
                    retired, carried, rest = reprocess.stage_rest(out, replacement, run_id, storage.join(writer.stage, "rewrite"))
            captures, file_map = chain_captures(planned, stats, options)
            log(f"replaying {len(captures)} captures")
            parts, totals = _replay(spark, spark_options, writer, frames_df, captures, file_map, options, run_id)
        elif files:
            if options.reprocess:
                replacement = _reprocess_plan(spark, spark_options, out, files, options, log)
                if replacement:
                    retired, carried, rest = reprocess.stage_rest(out, replacement, run_id, storage.join(writer.stage, "rewrite"))
            parts, totals, dropped = _by_capture_group(spark, spark_options, writer, files, reports, options, run_id, log, known)
            already += dropped
        # the local engine's rule: nothing new, nothing failed, nothing replaced: no run recorded
        # (known only now: a file held under another name is dropped once a task hashed it)
        unchanged = nothing_to_record(reports, replacement, removed)
        if not unchanged:
            writer.write("files", files_table(reports, run_id))
        totals["pseudonymization"] = pseudonymization_summary(open_pseudonymizer(options))
        manifest = build_manifest(run_id, started, t0, inputs, options, reports, totals, _row_counts(writer, totals), removed, argv, already, engine="spark")
        manifest["spark"] = {"master": spark.sparkContext.master, "version": spark.version,
                             "plan": "split_captures" if spark_options.split_captures else "capture_groups",
                             "partitions": _partitions(spark, spark_options)}
        if replacement:
            manifest["reprocessed"] = replacement.inputs
            manifest["carried_captures"] = sorted(carried)
        if unchanged:
            writer.abort()  # the tasks' staging (empty parts, file stats) goes with the run's
            writer.loc.rmdir_if_empty(storage.join(out, "_staging"))
        else:
            writer.commit(manifest, more_parts=parts + (rest.close() if rest else []), retired=retired)
    except BaseException:
        writer.abort()
        raise
    finally:
        if frames_df is not None:
            frames_df.unpersist()
    return RunResult(run_id=run_id, out=out, manifest=manifest, files=reports)


def _judge_known_names(files, known: ledger.Ledger, reports: list[FileReport], options: AnalyzeOptions, already: list[str]):
    """The files the dataset does not hold under their name and size; those it holds are added to
    `already`, or to `reports` refused (admission.judge, whose grown-capture rule never applies
    to content the dataset holds, so nothing is read here)."""
    key_fp = run_key_fingerprint(options)
    rest = []
    for f in files:
        sha = known.by_name.get((f.label, f.size))
        if sha is None:
            rest.append(f)
            continue
        v = admission.judge(known, f.label, sha, f.size, options, lambda sizes: {})
        if v.kind == admission.REFUSED:
            if (report := admit(f, reports, key_fp, sha)) is not None:
                fail(report, v.reason, kind="input")
        elif v.kind == admission.TAKE:
            rest.append(f)
        else:
            already.append(f.label)
    return rest


def _by_capture_group(spark, spark_options, writer: StagedWriter, files, reports: list[FileReport], options: AnalyzeOptions,
                      run_id: str, log, known: ledger.Ledger | None):
    """Capture groups in tasks, each running the local engine's GroupRunner (jobs/run/spark_groups.py).
    The driver groups the files by name and reads none of them."""
    key_fp = run_key_fingerprint(options)
    entries = []
    for f in files:
        if admit(f, reports, key_fp) is not None:
            entries.append((capture_group_of(f, options), len(reports) - 1, f))
    entries.sort(key=lambda e: e[0])
    groups = [(name, [(i, f) for _, i, f in g]) for name, g in itertools.groupby(entries, key=lambda e: e[0])]
    bins = spark_groups.bins_by_size(groups, _partitions(spark, spark_options))
    log(f"analysing {len(groups)} capture groups in {len(bins)} tasks")
    job = spark_groups.GroupJob(
        out=str(writer.out),
        run_id=run_id,
        stage=str(writer.stage),
        groups=groups,
        bins=bins,
        options=options,
        fs_config=storage.config_snapshot(),
        pass_through_python=batches_pass_through_python(options),
        pseudonymize_key=load_key(options.pseudonymize_key) if options.pseudonymize_key else None,
        known=known,
        checksums=options.checksums or options.incremental or options.reprocess,
    )
    return spark_groups.collect(spark, job, reports)


def _reprocess_plan(spark, spark_options, out, files, options: AnalyzeOptions, log):
    """--reprocess replaces the rows of inputs the dataset holds, known by content: every input is
    hashed before the run stages what it replaces."""
    log(f"hashing {len(files)} files")
    rows = [(i, f.url or str(f.path)) for i, f in enumerate(files)]
    files_df = spark.createDataFrame(spark.sparkContext.parallelize(rows, min(len(rows), _partitions(spark, spark_options))),
                                     "file_no int, path string")
    probed = files_df.mapInArrow(spark_groups.probe_files(True, storage.config_snapshot()), "file_no int, info string")
    shas = {r["file_no"]: json.loads(r["info"]).get("sha256") for r in probed.collect()}
    key_fp = run_key_fingerprint(options)
    return reprocess.plan(ledger.Ledger(out), [(f.label, shas[i]) for i, f in enumerate(files)
                                               if shas.get(i) and not sidecar_problem(f.label, f.sidecar, key_fp)])


def _plan_decoded(files, stats: dict[int, dict], reports: list[FileReport], options: AnalyzeOptions, known: ledger.Ledger | None):
    """The local engine's plan (jobs/run/local.py _plan), from what the decode stage found: files that
    could not be opened fail, the rest are ordered by capture group and first frame time. An
    incremental run judges each file as the local engine does (jobs/run/admission.py): content a
    committed run processed (a copy under another name) or pruned is dropped; a narrower window's
    input or a capture that grew is refused."""
    key_fp = run_key_fingerprint(options)
    planned, dropped = [], []
    for file_no, f in enumerate(files):
        s = stats.get(file_no, {"open_error": f"{f.label}: the decode stage reported nothing for this file"})
        verdict = None
        if known is not None and s.get("sha256"):
            verdict = admission.judge(known, f.label, s["sha256"], f.size, options,
                                      lambda sizes, f=f: admission.hashes(f.url or f.path, sizes)[1])
            if verdict.kind in (admission.ALREADY, admission.BELOW_HORIZON):
                dropped.append(f.label)
                continue
        report = admit(f, reports, key_fp, s.get("sha256"))
        if report is None:
            continue
        if verdict is not None and verdict.kind == admission.REFUSED:
            fail(report, verdict.reason, kind="input")
            continue
        if "open_error" in s:
            fail(report, s["open_error"])
            continue
        report.format, report.compression = s["format"], s["compression"]
        planned.append((file_no, Planned(f, report, s.get("first_frame_ts_ns"), capture_group_of(f, options))))
    planned.sort(key=lambda fp: plan_order(fp[1]))
    return planned, dropped


def _partitions(spark, spark_options: SparkOptions) -> int:
    return spark_options.partitions or max(2, 2 * spark.sparkContext.defaultParallelism)


def _replay(spark, spark_options, writer, frames_df, captures, file_map, options, run_id):
    from pyspark.sql import functions as F

    if not file_map:
        return [], {**dict.fromkeys(SESSION_COUNTERS, 0), "enrichment": None}
    fmap = spark.createDataFrame(file_map, "file_no int, capture_no int, file_index int")
    frames = (
        frames_df.join(F.broadcast(fmap), "file_no")
        .repartition(_partitions(spark, spark_options), "capture_no", "flow_group")
        .sortWithinPartitions("capture_no", "flow_group", "file_index", "first_frame")
        .select("capture_no", "flow_group", "file_index", *PACKED_LISTS)
    )
    job = _ReplayJob(
        out=str(writer.out),
        run_id=run_id,
        stage=str(writer.stage),
        captures=captures,
        session_kwargs=dict(
            tcp_idle_timeout_s=options.tcp_idle_timeout_s,
            udp_idle_timeout_s=options.udp_idle_timeout_s,
            tcp_closed_linger_s=options.tcp_closed_linger_s,
            max_flows=options.max_flows,
            batch_rows=options.batch_rows,
        ),
        enrichment=options.enrichment,
        keylogs=[str(k) for k in options.keylogs],
        fs_config=storage.config_snapshot(),
        pseudonymize_key=load_key(options.pseudonymize_key) if options.pseudonymize_key else None,
        packets=options.packets,
    )
    results = frames.mapInArrow(_replay_partitions(job), spark_groups.RESULT_SCHEMA).collect()
    parts, summaries, _ = spark_groups.read_results(results)
    totals = spark_groups.merge_totals(summaries)
    totals["enrichment"] = spark_groups.merge_counts([s["enrichment"] for s in summaries])
    return parts, totals


def _row_counts(writer: StagedWriter, totals: dict) -> dict:
    rows = dict(totals.get("rows", {}))
    for table, n in writer.rows.items():
        rows[table] = rows.get(table, 0) + n
    return rows

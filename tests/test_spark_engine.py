"""The Spark engine against the local engine (issue 6; docs/spark.md).

Proof 1: on the corpus, the lab's sample traces, and a rotation set that splits a connection
across two files, a Spark run (local[2]) and a local run give identical tables, row for row
after sorting (the files table too, but for its run_id).
Proof 2: a spark-submit run killed with SIGKILL in the middle of the flow replay, then run
again: the dataset equals the local engine's, no duplicate or missing row.
Incremental: a second run over the same inputs takes nothing; a new file is taken alone.

All tests share one Spark session (one JVM) in one xdist worker. Needs Java 17+
(scripts/install-java.sh) and the test extra's pyspark.
"""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from support import corpus
from tailscope.jobs.run import spark_engine
from tailscope.jobs.run.local import AnalyzeOptions, analyze

pytestmark = pytest.mark.xdist_group("spark")

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
TABLES = ("packets", "flows", "events", "queries", "files")
SPARK = spark_engine.SparkOptions(master="local[2]")
# The frame shuffle (--spark-split-captures): a capture's flows over many tasks.
SPLIT = spark_engine.SparkOptions(master="local[2]", partitions=4, split_captures=True)
PLANS = pytest.mark.parametrize("plan", [SPARK, SPLIT], ids=["capture_groups", "split_captures"])


@pytest.fixture(scope="module")
def spark():
    try:
        return spark_engine.spark_session(SPARK)
    except spark_engine.SparkUnavailable as exc:  # make test installs Java; a bare checkout may not
        pytest.fail(f"{exc}")


def rows(dataset: Path, table: str) -> list[str]:
    """A table's rows, sorted, as comparable strings (run_id dropped: it names the run)."""
    path = dataset / table
    if not path.is_dir():
        return []
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    if "run_id" in t.column_names:
        t = t.drop(["run_id"])
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def assert_same_tables(local: Path, spark_out: Path) -> dict[str, int]:
    counts = {}
    for table in TABLES:
        a, b = rows(local, table), rows(spark_out, table)
        if a != b:
            only_local = sorted(set(a) - set(b))[:3]
            only_spark = sorted(set(b) - set(a))[:3]
            pytest.fail(f"{table}: local {len(a)} rows, spark {len(b)}; local only {only_local}; spark only {only_spark}")
        counts[table] = len(a)
    return counts


def spark_run(inputs, out, plan=SPARK, **kw):
    options = AnalyzeOptions(progress=False, incremental=kw.pop("incremental", True), **kw)
    return spark_engine.analyze([str(i) for i in inputs], out, options, plan)


def local_run(inputs, out, **kw):
    return analyze([str(i) for i in inputs], out, AnalyzeOptions(progress=False, **kw))


@PLANS
def test_corpus_identical(spark, plan, corpus_run, tmp_path):
    result = spark_run([corpus.corpus_dir() / "pcaps"], tmp_path / "spark", plan)
    counts = assert_same_tables(corpus_run.out, tmp_path / "spark")
    assert counts["packets"] > 9000 and counts["flows"] > 200 and counts["files"] == len(corpus.pcap_names())
    m, ml = result.manifest["totals"], corpus_run.manifest["totals"]
    for key in ("frames", "decoded", "skipped", "skipped_by_reason", "flows", "flows_evicted", "rows"):
        assert m[key] == ml[key], key
    assert result.manifest["engine"] == "spark" and result.manifest["spark"]["master"] == "local[2]"
    assert result.manifest["spark"]["plan"] == ("split_captures" if plan.split_captures else "capture_groups")


@PLANS
def test_lab_samples_identical(spark, plan, tmp_path):
    local_run([SAMPLES], tmp_path / "local")
    spark_run([SAMPLES], tmp_path / "spark", plan)
    counts = assert_same_tables(tmp_path / "local", tmp_path / "spark")
    assert counts["queries"] > 0 and counts["events"] > 0


def split_pcap(src: Path, dest_dir: Path, at_frame: int) -> list[Path]:
    """Cut a classic pcap into a tcpdump -C style rotation set (name.pcap0, name.pcap1)."""
    data = src.read_bytes()
    header, pos, records = data[:24], 24, []
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    while pos < len(data):
        incl = struct.unpack(endian + "I", data[pos + 8 : pos + 12])[0]
        records.append(data[pos : pos + 16 + incl])
        pos += 16 + incl
    dest_dir.mkdir(parents=True)
    out = []
    for i, chunk in enumerate((records[:at_frame], records[at_frame:])):
        p = dest_dir / f"{src.stem}.pcap{i}"
        p.write_bytes(header + b"".join(chunk))
        out.append(p)
    return out


@PLANS
def test_connection_split_across_rotated_files(spark, plan, tmp_path):
    files = split_pcap(SAMPLES / "bufferbloat.pcap", tmp_path / "rot", at_frame=300)
    local_run(files, tmp_path / "local")
    spark_run(files, tmp_path / "spark", plan)
    assert_same_tables(tmp_path / "local", tmp_path / "spark")
    flows = [json.loads(r) for r in rows(tmp_path / "spark", "flows")]
    spanning = [f for f in flows if f["first_file"] != f["last_file"]]
    assert spanning, "no connection spans the two files: the test proves nothing"


def test_incremental_takes_only_new_files(spark, tmp_path):
    a, b = split_pcap(SAMPLES / "clean.pcap", tmp_path / "in", at_frame=40)
    first = spark_run([a], tmp_path / "out")
    assert first.manifest["totals"]["files"] == 1
    again = spark_run([a], tmp_path / "out")
    assert again.manifest["totals"]["files"] == 0 and again.manifest["already_processed"] == [str(a)]
    before = {t: rows(tmp_path / "out", t) for t in ("packets", "flows")}
    third = spark_run([a, b], tmp_path / "out")
    assert [f.path for f in third.files] == [str(b)]
    after = rows(tmp_path / "out", "packets")
    assert len(after) == len(before["packets"]) + third.manifest["totals"]["rows"]["packets"]
    assert len(set(after)) == len(after), "a packet row twice"


@PLANS
def test_bad_inputs_are_reported_and_the_rest_processed(spark, plan, tmp_path):
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\xd4\xc3\xb2\xa1" + b"\x00" * 7)
    result = spark_run([SAMPLES / "clean.pcap", bad, tmp_path / "missing.pcap"], tmp_path / "out", plan)
    by_path = {f.path: f for f in result.files}
    assert by_path[str(SAMPLES / "clean.pcap")].status == "ok"
    assert by_path[str(bad)].status == "failed" and str(bad) in by_path[str(bad)].error
    assert by_path[str(tmp_path / "missing.pcap")].status == "failed"
    assert result.status == "partial"


def _spark_submit() -> str:
    exe = Path(sys.executable).parent / "spark-submit"
    return str(exe) if exe.exists() else "spark-submit"


@pytest.mark.parametrize("split", [False, True], ids=["capture_groups", "split_captures"])
def test_killed_run_then_rerun_loses_and_duplicates_nothing(spark, tmp_path, split):
    out = tmp_path / "out"
    local_run([SAMPLES], tmp_path / "local")
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    # Many small replay tasks on two cores: the replay stage lasts long enough to be killed in
    # (with a task per capture group, samples/ holds a dozen groups).
    plan = ["--spark-split-captures", "--partitions", "64"] if split else []
    cmd = [_spark_submit(), "--master", "local[2]", str(REPO / "jobs" / "run" / "spark_job.py"), str(SAMPLES),
           "--out", str(out), *plan, "--quiet"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    killed_in = None
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            staging = list((out / "_staging").glob("*/tasks/*/*")) if (out / "_staging").is_dir() else []
            if staging:
                killed_in = "replay"
                os.killpg(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None and killed_in is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert killed_in == "replay", f"the run ended before its replay stage could be killed (rc {proc.returncode}): {proc.stderr.read()[-2000:]!r}"
    assert not list(out.glob("_runs/*.json")), "a killed run committed"
    rerun = spark_run([SAMPLES], out, SPLIT if split else SPARK)
    assert rerun.manifest["recovered_leftovers"], "the killed run's staging was not cleaned up"
    assert_same_tables(tmp_path / "local", out)


def test_spark_submit_master_is_the_one_that_runs_the_job(spark, tmp_path):
    """spark-submit's --master reaches the job (a SparkConf made before the JVM could not see it,
    and the job set local[*] over it); relative paths are the driver's, made absolute."""
    (tmp_path / "landing").mkdir()
    (tmp_path / "landing" / "clean.pcap").write_bytes((SAMPLES / "clean.pcap").read_bytes())
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    cmd = [_spark_submit(), "--master", "local[1]", str(REPO / "jobs" / "run" / "spark_job.py"), "landing",
           "--out", "out", "--quiet", "--json"]
    r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads(next((tmp_path / "out" / "_runs").glob("*.json")).read_text())
    assert manifest["spark"]["master"] == "local[1]"
    assert [f["status"] for f in manifest["inputs"]] == ["ok"]


def test_paths_reach_executors_absolute(tmp_path, monkeypatch):
    from tailscope.jobs.enrichment.enrich import EnrichmentOptions
    from tailscope.jobs.run.inputs import InputFile

    monkeypatch.chdir(tmp_path)
    options = AnalyzeOptions(enrichment=EnrichmentOptions(prefixes=["p.csv"], sessions=["s/*.csv"], regions="r.csv"))
    options, files = spark_engine.on_executors(options, [InputFile(path=Path("landing/a.pcap"), label="landing/a.pcap", size=1)])
    assert files[0].path == tmp_path / "landing" / "a.pcap" and files[0].label == "landing/a.pcap"
    e = options.enrichment
    assert (e.prefixes, e.sessions, e.regions) == ([tmp_path / "p.csv"], [tmp_path / "s" / "*.csv"], tmp_path / "r.csv")


def test_cli_engine_spark_help_and_errors(tmp_path):
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", "--help"], capture_output=True, text=True, env=env)
    assert "--engine {local,spark}" in r.stdout and "--spark-master" in r.stdout and "--incremental" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(SAMPLES), "--out", str(tmp_path / "o"),
                        "--engine", "spark", "--spark-conf", "nokeyvalue"], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "--spark-conf 'nokeyvalue': expected KEY=VALUE" in r.stderr
    r = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(SAMPLES), "--out", str(tmp_path / "o"),
                        "--engine", "spark", "--quiet"], capture_output=True, text=True,
                       env=dict(env, JAVA_HOME=str(tmp_path / "nojava"), PATH="/nonexistent"))
    assert r.returncode == 2 and "needs Java 17+" in r.stderr


@PLANS
def test_quic_keylog_identical(spark, plan, tmp_path):
    pytest.importorskip("aioquic")
    from tests.support import quicsim

    sim = quicsim.run(tmp_path / "sim", requests=3, response_bytes=60_000, drop_s2c={20, 21, 35, 60}, drop_c2s={8, 15})
    local = analyze([str(sim.pcap)], tmp_path / "local", AnalyzeOptions(progress=False, keylogs=[str(sim.keylog)]))
    result = spark_engine.analyze([str(sim.pcap)], tmp_path / "spark",
                                  AnalyzeOptions(progress=False, keylogs=[str(sim.keylog)]), plan)
    assert_same_tables(tmp_path / "local", tmp_path / "spark")
    assert result.manifest["totals"]["quic_keylog"] == local.manifest["totals"]["quic_keylog"] == \
        {"decrypted": 1, "not_in_keylog": 0, "unsupported_cipher": 0}
    events = [json.loads(r) for r in rows(tmp_path / "spark", "events")]
    assert any(e["signature"] == "quic_packet_lost" for e in events), "no decrypted loss: the test proves nothing"


def _s3_server(root: Path):
    """s3s-fs (a real S3 server on a directory, scripts/install-agent-deps.sh) on loopback."""
    import socket

    from tests.agent_support.harness import s3s_fs_binary

    binary = s3s_fs_binary()
    if binary is None:
        pytest.fail("s3s-fs not installed (scripts/install-agent-deps.sh installs it)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--host", "127.0.0.1", "--port", str(port), "--access-key", "ts",
                             "--secret-key", "ts-secret", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def test_landing_zone_and_dataset_on_s3(spark, tmp_path, monkeypatch):
    """s3a:// in, s3:// out (the same bucket layout the edge agent ships to); the server keeps
    objects as files, so the dataset it holds is compared with a local run directly."""
    import shutil

    root = tmp_path / "s3"
    (root / "landing" / "site-a").mkdir(parents=True)
    (root / "datasets").mkdir()
    split_pcap(SAMPLES / "bufferbloat.pcap", root / "landing" / "site-a" / "rot", at_frame=300)
    shutil.copy(SAMPLES / "clean.pcap", root / "landing" / "site-a" / "clean.pcap")
    proc, endpoint = _s3_server(root)
    try:
        for proto in ("S3", "S3A"):
            monkeypatch.setenv(f"FSSPEC_{proto}_ENDPOINT_URL", endpoint)
            monkeypatch.setenv(f"FSSPEC_{proto}_KEY", "ts")
            monkeypatch.setenv(f"FSSPEC_{proto}_SECRET", "ts-secret")
        import fsspec.config

        fsspec.config.set_conf_env(fsspec.config.conf)
        first = spark_engine.analyze(["s3a://landing/site-a"], "s3://datasets/ds", AnalyzeOptions(progress=False, incremental=True), SPARK)
        assert first.status == "ok", [(f.path, f.error) for f in first.files]
        assert first.manifest["totals"]["files"] == 3
        assert sorted(f.path for f in first.files) == ["s3a://landing/site-a/clean.pcap", "s3a://landing/site-a/rot/bufferbloat.pcap0",
                                                       "s3a://landing/site-a/rot/bufferbloat.pcap1"]
        again = spark_engine.analyze(["s3a://landing/site-a"], "s3://datasets/ds", AnalyzeOptions(progress=False, incremental=True), SPARK)
        assert again.manifest["totals"]["files"] == 0 and len(again.manifest["already_processed"]) == 3
    finally:
        proc.kill()
        proc.wait()
    local_run([root / "landing" / "site-a"], tmp_path / "local")
    # Same rows but for the file names, which say where each engine read them.
    for table in ("packets", "flows", "events", "queries"):
        a = [r.replace(str(root / "landing"), "s3a://landing") for r in rows(tmp_path / "local", table)]
        assert sorted(a) == rows(root / "datasets" / "ds", table), table
    # (the server keeps empty directories where objects were deleted: objects are what count)
    assert not [p for p in (root / "datasets" / "ds").glob("_staging/**/*") if p.is_file()]
    # the first run's manifest alone: the second took nothing new and records nothing (issue 31 item 5)
    assert len(list((root / "datasets" / "ds" / "_runs").glob("*.json"))) == 1


@PLANS
def test_pseudonyms_identical_to_the_local_engine(spark, plan, tmp_path):
    """Issue 19: the same inputs and key give the same pseudonyms (and every other column) in
    both engines; the executors get the key from the driver, not from the key file."""
    key = tmp_path / "key.hex"
    key.write_text(bytes(range(32)).hex())
    inputs = [SAMPLES / "mobile_mixed.pcap", SAMPLES / "clean_ipv6.pcap"]
    # with --packets tagged too: the executors' sessions keep the same packet rows
    local_run(inputs, tmp_path / "local", pseudonymize_key=str(key), packets="tagged")
    spark_run(inputs, tmp_path / "spark", plan, pseudonymize_key=str(key), packets="tagged")
    assert_same_tables(tmp_path / "local", tmp_path / "spark")
    flows = [json.loads(r) for r in rows(tmp_path / "spark", "flows")]
    local_run(inputs, tmp_path / "plain")
    plain = {json.loads(r)["client_ip"] for r in rows(tmp_path / "plain", "flows")}
    assert flows and not plain & {f["client_ip"] for f in flows}


@PLANS
def test_rerun_and_reprocess(spark, plan, tmp_path):
    """Issue 17, as on the local engine: a second run takes nothing; --reprocess replaces the
    rows, in the same commit, and the tables equal a single local run's."""
    inputs = [SAMPLES / "clean.pcap", SAMPLES / "tail_loss.pcap"]
    local_run(inputs, tmp_path / "local")
    spark_run(inputs, tmp_path / "spark", plan)
    again = spark_run(inputs, tmp_path / "spark", plan)
    assert again.manifest["totals"]["files"] == 0 and again.manifest["totals"]["files_already_processed"] == 2
    redo = spark_run(inputs, tmp_path / "spark", plan, reprocess=True)
    assert redo.manifest["totals"]["files"] == 2 and redo.manifest["retired"]
    assert assert_same_tables(tmp_path / "local", tmp_path / "spark")["flows"] > 0


def _first_ts_ns(pcap: Path, frame: int) -> int:
    """The timestamp of a classic pcap's record `frame` (0-based; microsecond pcap)."""
    data, pos = pcap.read_bytes(), 24
    endian = "<" if data[:4] == b"\xd4\xc3\xb2\xa1" else ">"
    for _ in range(frame):
        pos += 16 + struct.unpack(endian + "I", data[pos + 8 : pos + 12])[0]
    sec, usec = struct.unpack(endian + "II", data[pos : pos + 8])
    return sec * 1_000_000_000 + usec * 1000


def _refused(result) -> list[str]:
    return [f.error for f in result.files if f.status == "failed" and f.error_kind == "input"]


@PLANS
def test_a_wider_window_or_a_grown_capture_is_refused(spark, plan, tmp_path):
    """Issue 30 items 2-3, on the Spark engine by the local engine's rules (jobs/run/admission.py):
    an input the dataset holds from a run that took a narrower --since window is refused, whether
    named as before (judged on the driver by name and size) or copied under another name (judged
    once hashed); a capture that grew since the dataset took its first bytes is refused. Nothing
    is added to the packets; --reprocess is named."""
    clean = SAMPLES / "clean.pcap"
    windowed = tmp_path / "windowed"
    local_run([clean], windowed, since_ns=_first_ts_ns(clean, 40))
    held = len(rows(windowed, "packets"))
    copy = tmp_path / "copy" / "renamed.pcap"
    copy.parent.mkdir()
    copy.write_bytes(clean.read_bytes())
    for inputs in ([clean], [copy]):
        r = spark_run(inputs, windowed, plan)
        (why,) = _refused(r)
        assert "took frames in [" in why and "--reprocess" in why and str(inputs[0]) in why
        assert [f.status for f in r.files] == ["failed"] and len(rows(windowed, "packets")) == held

    first, _ = split_pcap(clean, tmp_path / "landing", at_frame=40)  # tcpdump still writing
    grown = tmp_path / "ds"
    spark_run([first], grown, plan)
    part = len(rows(grown, "packets"))
    first.write_bytes(clean.read_bytes())  # the whole capture, at the same path
    r = spark_run([first], grown, plan)
    (why,) = _refused(r)
    assert "grew since run" in why and "--reprocess" in why and str(first) in why
    assert [f.status for f in r.files] == ["failed"] and len(rows(grown, "packets")) == part > 0


def _manifests(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "_runs").glob("*.json"))


@PLANS
def test_a_renamed_copy_or_nothing_new_adds_nothing(spark, plan, tmp_path):
    """Issue 31 item 5, as on the local engine: a file whose content the dataset holds under
    another name, or the same inputs again, is skipped as already processed: no `files` row
    (the cluster test once counted 60 against 45, the copies' with 0 frames) and, when nothing
    is new, no run manifest either (a cron re-run of a landing zone would add one every time).
    A new file beside a copy is taken alone."""
    clean, tail = SAMPLES / "clean.pcap", SAMPLES / "tail_loss.pcap"
    copy = tmp_path / "copy" / "renamed.pcap"
    copy.parent.mkdir()
    copy.write_bytes(clean.read_bytes())
    local, out = tmp_path / "local", tmp_path / "spark"
    local_run([clean], local)
    spark_run([clean], out, plan)
    for inputs in ([copy], [clean], [clean, copy]):
        want, got = local_run(inputs, local), spark_run(inputs, out, plan)
        for r in (want, got):
            assert r.files == [] and r.manifest["totals"]["files"] == 0, inputs
            assert sorted(r.manifest["already_processed"]) == sorted(map(str, inputs))
        assert len(_manifests(out)) == len(_manifests(local)) == 1, inputs
    want, got = local_run([copy, tail], local), spark_run([copy, tail], out, plan)
    assert [f.path for f in got.files] == [f.path for f in want.files] == [str(tail)]
    assert got.manifest["already_processed"] == want.manifest["already_processed"] == [str(copy)]
    assert len(_manifests(out)) == len(_manifests(local)) == 2
    assert assert_same_tables(local, out)["files"] == 2

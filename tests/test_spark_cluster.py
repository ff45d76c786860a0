"""The Spark engine on a real standalone cluster (issue 31 item 2; docs/spark.md "On a cluster").

A master and two workers (1 core, 1 GB each) run as separate JVMs, started and stopped by
scripts/spark-cluster.sh (the commands the docs give), bound to loopback on free ports. The job is
submitted as the docs say, `spark-submit --master spark://127.0.0.1:PORT jobs/run/spark_job.py
s3a://LANDING --out s3://DATASET`, with the S3 server the other Spark tests use.

Proof 1: the master ran the application (its JSON lists it FINISHED, the manifest names the
master) and the dataset equals a local run's on the same captures, row for row.
Proof 2: a worker (its JVM, its executor and their Python workers) SIGKILLed while the run's
tasks are under way: the run still exits 0 with every input committed exactly once (one `files`
row each, no packet or flow row twice) and the same rows as a local run.

Shares the "spark" xdist group with tests/test_spark_engine.py: one Spark workload at a time on
the 2-core CI machine. Needs Java 17+ (scripts/install-java.sh), the test extra's pyspark and
s3s-fs (scripts/install-agent-deps.sh), all installed by `make test`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_spark_engine import _s3_server, _spark_submit, local_run, rows

pytestmark = pytest.mark.xdist_group("spark")

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
CLUSTER = REPO / "scripts" / "spark-cluster.sh"
JOB = REPO / "jobs" / "run" / "spark_job.py"
DATA_TABLES = ("packets", "flows", "events", "queries")


def _master_json(ui: str) -> dict:
    with urllib.request.urlopen(f"{ui}/json/", timeout=5) as r:
        return json.load(r)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """scripts/spark-cluster.sh start/stop: stopped whatever the tests did."""
    state = tmp_path_factory.mktemp("spark-cluster")
    env = dict(os.environ, PYTHON=sys.executable)
    try:
        r = subprocess.run([str(CLUSTER), "start", str(state)], capture_output=True, text=True, env=env, timeout=180)
        if r.returncode != 0:  # make test installs Java and pyspark; a bare checkout may not have them
            logs = {p.name: p.read_text()[-1500:] for p in state.glob("*.log")}
            pytest.fail(f"spark-cluster.sh start failed ({r.returncode}): {r.stderr[-2000:]} {logs}")
        info = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
        info["WORKER_PIDS"] = [int(p) for p in info["WORKER_PIDS"].strip('"').split()]
        info["state"] = state
        yield info
    finally:
        subprocess.run([str(CLUSTER), "stop", str(state)], env=env, timeout=60)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The tests' S3 server (s3s-fs on a directory) and the environment that reaches it."""
    root = tmp_path_factory.mktemp("s3")
    (root / "landing").mkdir()
    (root / "datasets").mkdir()
    proc, endpoint = _s3_server(root)
    env = {}
    for proto in ("S3", "S3A"):
        env.update({f"FSSPEC_{proto}_ENDPOINT_URL": endpoint, f"FSSPEC_{proto}_KEY": "ts", f"FSSPEC_{proto}_SECRET": "ts-secret"})
    try:
        yield root, env
    finally:
        proc.kill()
        proc.wait()


def _submit_cmd(master: str, landing: str, out: str, *extra: str) -> list[str]:
    # exactly docs/spark.md's standalone recipe
    return [_spark_submit(), "--master", master, str(JOB), landing, "--out", out, "--quiet", "--json", *extra]


def _submit_env(s3_env: dict, spark_home: str) -> dict:
    return dict(os.environ, **s3_env, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=spark_home)


def _only_manifest(dataset: Path) -> dict:
    (path,) = (dataset / "_runs").glob("*.json")
    return json.loads(path.read_text())


def _assert_same_as_local(local: Path, dataset: Path, root: Path) -> dict[str, int]:
    """Same rows but for the file names, which say where each engine read them (s3a:// or a path)."""
    counts = {}
    for table in DATA_TABLES:
        want = sorted(r.replace(str(root / "landing"), "s3a://landing") for r in rows(local, table))
        got = rows(dataset, table)
        if want != got:
            pytest.fail(f"{table}: local {len(want)} rows, cluster {len(got)}; local only {sorted(set(want) - set(got))[:2]}; "
                        f"cluster only {sorted(set(got) - set(want))[:2]}")
        counts[table] = len(got)
    return counts


def test_submitted_to_the_master_same_rows_as_local(cluster, s3, tmp_path):
    root, s3_env = s3
    landing = root / "landing" / "samples"
    landing.mkdir()
    for pcap in sorted(SAMPLES.glob("*.pcap")):
        shutil.copy(pcap, landing / pcap.name)
    r = subprocess.run(_submit_cmd(cluster["MASTER"], "s3a://landing/samples", "s3://datasets/samples"),
                       env=_submit_env(s3_env, cluster["SPARK_HOME"]), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    dataset = root / "datasets" / "samples"
    manifest = _only_manifest(dataset)
    assert manifest["spark"]["master"] == cluster["MASTER"] and manifest["status"] == "ok"
    apps = _master_json(cluster["MASTER_UI"])["completedapps"]
    assert any(a["name"] == "tailscope" and a["state"] == "FINISHED" for a in apps), apps

    local_run([landing], tmp_path / "local")
    counts = _assert_same_as_local(tmp_path / "local", dataset, root)
    assert counts["packets"] > 4000 and counts["flows"] > 10 and counts["queries"] > 0 and counts["events"] > 0
    files = [json.loads(x)["path"] for x in rows(dataset, "files")]
    assert sorted(files) == sorted(f"s3a://landing/samples/{p.name}" for p in landing.glob("*.pcap"))


def _shifted_copy(src: Path, dest: Path, hours: int) -> None:
    """A classic pcap with every record's time moved on by `hours`: the same traffic, another
    file's content (a plain copy would be dropped as already read, by its sha256)."""
    data = bytearray(src.read_bytes())
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    pos = 24
    while pos < len(data):
        sec, incl = struct.unpack_from(endian + "I", data, pos)[0], struct.unpack_from(endian + "I", data, pos + 8)[0]
        struct.pack_into(endian + "I", data, pos, sec + hours * 3600)
        pos += 16 + incl
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(bytes(data))


# Runs after the test above: it leaves the cluster one worker short.
def test_worker_killed_mid_run_every_input_committed_once(cluster, s3, tmp_path):
    root, s3_env = s3
    # 24 edge servers' captures (one directory each: 24 capture groups), one task each, on two
    # 1-core executors: a dozen task waves, so tasks remain when the first has staged its parts.
    n = 24
    landing = root / "landing" / "fleet"
    for i in range(n):
        _shifted_copy(SAMPLES / "mobile_mixed.pcap", landing / f"edge-{i:02d}" / "mobile_mixed.pcap", hours=i)
    dataset = root / "datasets" / "fleet"
    cmd = _submit_cmd(cluster["MASTER"], "s3a://landing/fleet", "s3://datasets/fleet", "--partitions", str(n))
    err = tmp_path / "driver.log"
    with err.open("w") as stderr:
        proc = subprocess.Popen(cmd, env=_submit_env(s3_env, cluster["SPARK_HOME"]), stdout=subprocess.DEVNULL,
                                stderr=stderr, start_new_session=True)
        victim, killed_at = cluster["WORKER_PIDS"][0], None
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                staged = {p.relative_to(dataset).parts[3] for p in dataset.glob("_staging/*/tasks/*/**/*.parquet")}
                if staged:  # a task has written its parts: the analyse stage is under way
                    killed_at = len(staged)
                    os.killpg(victim, signal.SIGKILL)  # the worker JVM, its executor and its Python workers
                    break
                time.sleep(0.05)
            rc = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    log = err.read_text()
    assert killed_at is not None, f"the run ended before a worker could be killed (rc {proc.returncode}): {log[-2000:]}"
    assert rc == 0, log[-3000:]
    assert killed_at < n, "every task had already staged: the kill proved nothing"
    assert "Lost executor" in log or "ExecutorLostFailure" in log, "the driver never saw the executor go: " + log[-2000:]
    workers = {w["id"]: w["state"] for w in _master_json(cluster["MASTER_UI"])["workers"]}
    assert sorted(workers.values()) == ["ALIVE", "DEAD"], workers

    manifest = _only_manifest(dataset)
    assert manifest["status"] == "ok" and manifest["totals"]["files"] == n
    files = [json.loads(x)["path"] for x in rows(dataset, "files")]
    assert sorted(files) == sorted(f"s3a://landing/fleet/edge-{i:02d}/mobile_mixed.pcap" for i in range(n))
    for table in ("packets", "flows"):
        got = rows(dataset, table)
        assert len(set(got)) == len(got), f"a {table} row twice"
    local_run([landing], tmp_path / "local")
    _assert_same_as_local(tmp_path / "local", dataset, root)
    # nothing staged is left behind, neither the killed attempts' parts nor the others'
    assert not [p for p in dataset.glob("_staging/**/*") if p.is_file()]

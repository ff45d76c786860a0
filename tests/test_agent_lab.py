"""Edge capture agent, end to end on real traffic (network namespaces, real tcpdump, real S3 server).

Every test runs the agent as a separate process (``python -m tailscope agent run``) inside a
namespace, generates numbered UDP datagrams plus real TCP (HTTP) connections from a second
namespace, and then reads the landing zone back: every finished file landed exactly once (or is
a quota tombstone), each file's packets match its manifest (re-counted here and by tcpdump), and
where no crash cut the capture, every datagram sent is in exactly one file.

Needs root, iproute2 and tcpdump; the S3 tests also need s3s-fs (scripts/install-agent-deps.sh).
"""
from __future__ import annotations

import collections
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_support import landing_check as lc
from agent_support.harness import AgentProc, S3Server, Sink, finish, generate, s3s_fs_binary, wait_for, write_config
from agent_support.netns import NetnsPair, available

# one xdist worker for all of them: they are timing-sensitive and each keeps a core busy
pytestmark = [pytest.mark.lab, pytest.mark.xdist_group("agent-lab"),
              pytest.mark.skipif(available() is not None, reason=str(available()))]
needs_s3 = pytest.mark.skipif(s3s_fs_binary() is None, reason="s3s-fs not installed (scripts/install-agent-deps.sh)")


def local_fs():
    import fsspec

    return fsspec.filesystem("file")


def config(tmp: Path, ns: NetnsPair, landing: str, **sections) -> Path:
    base = {
        "agent": {"site": "lab", "capture_point": "edge", "agent_id": "labagent",
                  "spool_dir": str(tmp / "spool"), "log_level": "info"},
        "capture": {"interface": ns.server_if, "rotate_seconds": 3, "handover_seconds": 1.5,
                    "rotate_bytes": "8M", "compression": "gzip"},
        "spool": {"quota_bytes": "64M", "min_free_bytes": 0},
        "ship": {"landing": landing, "retry_initial_seconds": 0.2, "retry_max_seconds": 1.0,
                 "poll_seconds": 0.3, "shutdown_timeout_seconds": 15},
    }
    for sec, table in sections.items():
        base.setdefault(sec, {}).update(table)
    return write_config(tmp / "agent.toml", base)


def status(tmp: Path) -> dict:
    r = subprocess.run([sys.executable, "-m", "tailscope", "agent", "status", "--spool-dir", str(tmp / "spool")],
                       capture_output=True, text=True, timeout=30, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def metrics(tmp: Path) -> dict[str, float]:
    r = subprocess.run([sys.executable, "-m", "tailscope", "agent", "metrics", "--spool-dir", str(tmp / "spool")],
                       capture_output=True, text=True, timeout=30, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return lc.parse_metrics(r.stdout)


def assert_exactly_once(tmp: Path, landed: lc.Landed) -> dict:
    """Every file the agent finished (its journal, across all runs) is in the landing zone once,
    or reported as dropped by the quota; nothing else is there. Returns verify()'s result."""
    res = lc.verify(landed)
    finished = {e["file"] for e in lc.journal_events(tmp / "spool", "finalized")}
    dropped = {e["file"] for e in lc.journal_events(tmp / "spool", "dropped")}
    landed_files = {m["file"] for m in landed.manifests.values()}
    tomb_files = {t["file"] for t in landed.tombstones.values()}
    assert landed_files | tomb_files == finished, (
        f"missing: {sorted(finished - landed_files - tomb_files)}; "
        f"unexpected: {sorted((landed_files | tomb_files) - finished)}")
    assert not landed_files & tomb_files
    assert tomb_files == dropped
    st = status(tmp)
    assert st["files_pending"] == 0 and st["tombstones_pending"] == 0 and not st["raw_captures"]
    c = st["counters"]
    assert c["files_finished"] == len(finished)
    assert c["files_shipped"] == len(landed_files)
    assert c["files_dropped_quota"] == len(tomb_files)
    assert c["packets"] == sum(m["packets"] for m in landed.manifests.values()) + sum(
        t["packets"] for t in landed.tombstones.values())
    return res


def assert_chain(landed: lc.Landed) -> None:
    """previous_file links each file (or tombstone) to the one before; seq increases, and can skip
    only where the agent was killed before a capture wrote anything (never inside a session)."""
    for chain in lc.chains(landed).values():
        for prev, cur in zip(chain, chain[1:], strict=False):
            assert cur["previous_file"] == prev["file"], (prev["file"], cur["previous_file"])
            assert cur["seq"] > prev["seq"]
            if cur["seq"] != prev["seq"] + 1:
                assert not cur["contiguous_with_previous"] and cur["session_id"] != prev["session_id"]


# --------------------------------------------------------------------------------------------------
def test_directory_landing_rotation_and_completeness(tmp_path):
    """Time and size rotation, hand-over without loss or duplicates, filter, manifests, metrics."""
    landing = tmp_path / "landing"
    landing.mkdir()
    with NetnsPair(11) as ns:
        sink = Sink(ns)
        # Unaligned rotation: each file's deadline is 4 s after its start, so while the fast phase
        # lasts every rotation is a size one. Aligned to the wall clock, a 4 s boundary pre-empted
        # one of the two or three size rotations whenever it fell inside a hand-over, and a loaded
        # machine (slow tcpdump start) left one size rotation (CI of bb10c20: time 3, size 1).
        cfg = config(tmp_path, ns, str(landing),
                     capture={"rotate_seconds": 4, "rotate_bytes": "128K", "align_rotation": False})
        agent = AgentProc(ns, cfg, tmp_path).start()
        try:
            agent.wait_event("capture_started")
            fast = generate(ns, "fast", duration=6, rate=800)   # ~140 KB/s raw: size rotations
            slow = generate(ns, "slow", duration=5, rate=40)    # time rotations
            time.sleep(2.0)  # the last second of packets is still in libpcap's ring (README)
            assert agent.stop() == 0
        finally:
            agent.close()
            sink.close()
    landed = lc.load(local_fs(), str(landing))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)
    # every datagram sent is in exactly one file: no gap and no duplicate at any rotation
    for g in (fast, slow):
        seen = res["seqs"][g["tag"]]
        assert sorted(seen) == list(range(g["udp_sent"])), (g["tag"], set(range(g["udp_sent"])) - set(seen))
        assert max(seen.values()) == 1
    ms = sorted(landed.manifests.values(), key=lambda m: m["seq"])
    reasons = collections.Counter(m["end_reason"] for m in ms)
    assert reasons["size"] >= 2 and reasons["time"] >= 1 and reasons["shutdown"] == 1, reasons
    assert all(m["contiguous_with_previous"] for m in ms[1:]) and not ms[0]["contiguous_with_previous"]
    assert sum(m["overlap_duplicates_removed"] for m in ms) > 0
    assert all(m["kernel_drops"] == 0 and m["capture_stats_complete"] for m in ms)
    assert all(m["snaplen"] == 192 and m["linktype"] == 1 for m in ms)
    ports = collections.Counter()
    for stem in landed.manifests:
        ports += lc.udp_tcp_ports(lc.records(landed.data[stem], "gzip")[1])
    assert ports[(6, 80)] > 100 and ports[(6, "src", 80)] > 100  # both directions of real TCP
    assert ports[(17, 9999)] == 0  # the BPF filter kept the noise out
    assert fast["tcp_ok"] > 10
    m = metrics(tmp_path)
    assert m["tailscope_agent_packets_total"] == sum(x["packets"] for x in ms)
    assert m["tailscope_agent_files_shipped_total"] == len(ms)
    assert m["tailscope_agent_files_pending"] == 0
    assert m["tailscope_agent_last_success_timestamp_seconds"] > time.time() - 120
    assert_landing_zone_analyzes(tmp_path, landing, ms)


def assert_landing_zone_analyzes(tmp_path, landing, manifests):
    """Issue proof 3: the local engine reads the landing zone as the agent left it: every file,
    every packet the manifests count, one capture (the manifests' capture_id) whose rotated files
    chain into one flow table, so connections crossing a rotation stay whole."""
    from tailscope.jobs.run.local import AnalyzeOptions, analyze

    run = analyze([str(landing)], tmp_path / "dataset", AnalyzeOptions(progress=False))
    assert run.manifest["status"] == "ok", [r.error for r in run.files if r.error]
    assert len(run.files) == len(manifests)
    assert {r.capture_id for r in run.files} == {m["capture_id"] for m in manifests}
    assert sum(r.frames for r in run.files) == sum(m["packets"] for m in manifests)
    assert all(r.frames == r.decoded + sum(r.skipped.values()) for r in run.files)
    import duckdb

    con = duckdb.connect()
    spanning = con.execute(
        f"SELECT count(*) FROM read_parquet('{tmp_path}/dataset/flows/*/*.parquet') WHERE first_file <> last_file"
    ).fetchone()[0]
    assert spanning >= 1  # the long-lived sink connections cross rotations and stay one flow


@needs_s3
def test_s3_landing_zstd(tmp_path):
    """Ship to a real S3 server (s3s-fs), zstd, tcpdump in immediate mode with a short hand-over;
    scrape the live /metrics endpoint; read everything back through the S3 API."""
    with NetnsPair(12) as ns:
        sink = Sink(ns)
        s3 = S3Server(ns, tmp_path / "s3").start()
        cfg = config(tmp_path, ns, "s3://pcaps/landing",
                     capture={"compression": "zstd", "immediate_mode": True, "handover_seconds": 0.5},
                     ship=s3.ship_settings(tmp_path),
                     metrics={"listen": "127.0.0.1:9561"})
        agent = AgentProc(ns, cfg, tmp_path).start()
        try:
            agent.wait_event("capture_started")
            g = generate(ns, "s3", duration=5, rate=300)
            time.sleep(0.3)  # immediate mode: nothing waits in libpcap's ring (README "Capture")
            # the live /metrics endpoint, scraped from inside the namespace
            scrape = subprocess.run(ns.cmd(ns.server, sys.executable, "-c",
                                           "import urllib.request;print(urllib.request.urlopen("
                                           "'http://127.0.0.1:9561/metrics',timeout=5).read().decode())"),
                                    capture_output=True, text=True, timeout=30)
            assert scrape.returncode == 0, scrape.stderr
            live = lc.parse_metrics(scrape.stdout)
            assert live["tailscope_agent_capture_running"] == 1
            assert live["tailscope_agent_files_shipped_total"] >= 1
            assert agent.stop() == 0
            s3.download("landing", tmp_path / "downloaded")
            # issue 19: nothing the agent wrote (spool, logs, landing zone) holds the credentials
            leaks = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "s3-credentials.toml"
                     and s3.SECRET.encode() in p.read_bytes()]
            assert not leaks, leaks
        finally:
            agent.close()
            s3.stop()
            sink.close()
    landed = lc.load(local_fs(), str(tmp_path / "downloaded"))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)
    assert all(m["compression"] == "zstd" and m["file"].endswith(".pcap.zst") for m in landed.manifests.values())
    assert sorted(res["seqs"]["s3"]) == list(range(g["udp_sent"]))
    assert max(res["seqs"]["s3"].values()) == 1


def test_kill9_mid_upload_directory(tmp_path):
    """kill -9 while a file is being uploaded (a hidden .part exists), restart: the partial upload
    was never visible, the interrupted file and the raw capture of the killed run both land once."""
    landing = tmp_path / "landing"
    landing.mkdir()
    with NetnsPair(13) as ns:
        sink = Sink(ns)
        cfg = config(tmp_path, ns, str(landing))
        agent = AgentProc(ns, cfg, tmp_path)
        gen = generate(ns, "k9", duration=14, rate=400, background=True)
        try:
            agent.start("--rate-limit", "8K")  # slow uplink: each upload takes seconds
            part = wait_for(lambda: [p for p in landing.rglob(".*.part")], 20, "an upload in progress")
            visible_before = {p.name for p in landing.rglob("*") if p.is_file() and not p.name.startswith(".")}
            assert part[0].name[1:-len(".part")] not in visible_before  # the partial is not visible
            agent.kill9()
            leftover = [p for p in landing.rglob(".*.part")]
            assert leftover, "the kill should have interrupted an upload"
            agent.start("--rate-limit", "0")
            rec = agent.wait_event("recovering_capture")
            assert rec
            g = finish(gen)
            time.sleep(2.0)
            assert agent.stop() == 0
        finally:
            agent.close()
            sink.close()
    assert not list(landing.rglob(".*.part")), "stale partial upload left behind"
    landed = lc.load(local_fs(), str(landing))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)
    seen = res["seqs"]["k9"]
    assert max(seen.values()) == 1  # never twice, even across the crash
    assert len(seen) > 0.7 * g["udp_sent"]  # only the crash gap (agent down ~1 s) is missing
    st = status(tmp_path)
    assert st["counters"]["recovered_files"] >= 1
    sessions = {m["session_id"] for m in landed.manifests.values()}
    assert len(sessions) == 2


@needs_s3
def test_kill9_at_chosen_and_random_points_s3(tmp_path):
    """kill -9 mid-upload, right after a file is finished, during a hand-over and at random moments,
    restarting each time, with an S3 landing zone; then a clean run: every finished file is in the
    bucket exactly once and no packet is in two files."""
    rng = random.Random(int(os.environ.get("AGENT_KILL_SEED", "0")) or None)
    kills = []
    with NetnsPair(14) as ns:
        sink = Sink(ns)
        s3 = S3Server(ns, tmp_path / "s3").start()
        cfg = config(tmp_path, ns, "s3://pcaps/landing", capture={"rotate_seconds": 2, "handover_seconds": 1.2},
                     ship={**s3.ship_settings(tmp_path), "rate_limit_bytes_per_second": 4000})
        agent = AgentProc(ns, cfg, tmp_path)
        gen = generate(ns, "rk", duration=22, rate=300, background=True)
        try:
            for point in ("upload", "finished", "handover", "random", "random"):
                agent.start()
                agent.wait_event("capture_started", timeout=20)
                if point == "upload":  # a (slow, rate-limited) upload is streaming
                    agent.wait_event("file_upload_started", timeout=20)
                    time.sleep(0.3)
                    assert not agent.events("file_shipped"), "upload finished too fast to be interrupted"
                elif point == "finished":
                    agent.wait_event("file_finished", timeout=20)
                elif point == "handover":  # the second tcpdump is up, the first still running
                    agent.wait_event("capture_started", count=2, timeout=20)
                    time.sleep(0.2)
                else:
                    time.sleep(rng.uniform(0.1, 3.0))
                kills.append((point, len(agent.events("file_finished")), len(agent.events("file_shipped"))))
                agent.kill9()
            agent.start("--rate-limit", "0")  # the clean run catches up with the backlog
            agent.wait_event("capture_started", timeout=20)
            g = finish(gen)
            time.sleep(2.0)
            assert agent.stop() == 0, kills
            s3.download("landing", tmp_path / "downloaded")
        finally:
            agent.close()
            s3.stop()
            sink.close()
    landed = lc.load(local_fs(), str(tmp_path / "downloaded"))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)
    assert max(res["seqs"]["rk"].values()) == 1, kills
    assert len({m["session_id"] for m in landed.manifests.values()}) == 6
    assert status(tmp_path)["counters"]["recovered_files"] >= 4
    assert g["udp_sent"] > 0


@needs_s3
def test_landing_unreachable_then_back_s3(tmp_path):
    """The S3 server goes away for a while: uploads fail and back off, files wait in the spool,
    and when it is back everything lands, once, with no packet lost."""
    with NetnsPair(15) as ns:
        sink = Sink(ns)
        s3 = S3Server(ns, tmp_path / "s3").start()
        cfg = config(tmp_path, ns, "s3://pcaps/landing", capture={"rotate_seconds": 2, "handover_seconds": 1.2},
                     ship=s3.ship_settings(tmp_path))
        agent = AgentProc(ns, cfg, tmp_path).start()
        try:
            agent.wait_event("capture_started")
            gen = generate(ns, "down", duration=12, rate=300, background=True)
            agent.wait_event("file_shipped", timeout=20)
            s3.stop()  # outage
            agent.wait_event("ship_failed", count=3, timeout=30)
            wait_for(lambda: status(tmp_path)["files_pending"] >= 2, 20, "files piling up in the spool")
            s3.start()
            agent.wait_event("ship_recovered", timeout=30)
            g = finish(gen)
            time.sleep(2.0)
            assert agent.stop() == 0
            s3.download("landing", tmp_path / "downloaded")
        finally:
            agent.close()
            s3.stop()
            sink.close()
    landed = lc.load(local_fs(), str(tmp_path / "downloaded"))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)
    assert sorted(res["seqs"]["down"]) == list(range(g["udp_sent"]))
    assert max(res["seqs"]["down"].values()) == 1
    assert status(tmp_path)["counters"]["upload_failures"] >= 3


def test_spool_quota_full_drops_oldest_and_reports(tmp_path):
    """Landing zone unreachable (not mounted) and traffic fills the spool quota: the oldest finished
    files are dropped, counted, logged and tombstoned; the rest land once the landing zone is back."""
    landing = tmp_path / "landing"  # absent: the agent never creates the root ("not mounted")
    with NetnsPair(16) as ns:
        sink = Sink(ns)
        cfg = config(tmp_path, ns, str(landing),
                     capture={"rotate_seconds": 2, "handover_seconds": 1.2, "rotate_bytes": "128K"},
                     spool={"quota_bytes": "512K"})
        agent = AgentProc(ns, cfg, tmp_path).start()
        try:
            agent.wait_event("capture_started")
            g = generate(ns, "quota", duration=10, rate=500, size=160, random_payload=True)
            agent.wait_event("file_dropped", count=2, timeout=20)
            assert status(tmp_path)["spool_bytes"] <= 1.6 * 512 * 1024
            landing.mkdir()  # "mounted" again
            wait_for(lambda: (lambda s: s["files_pending"] == 0 and s["tombstones_pending"] == 0)(status(tmp_path)),
                     30, "the spool to drain")
            time.sleep(1.0)
            assert agent.stop() == 0
        finally:
            agent.close()
            sink.close()
    landed = lc.load(local_fs(), str(landing))
    res = assert_exactly_once(tmp_path, landed)
    assert_chain(landed)  # tombstones keep the chain whole: the gap is explicit
    drops = agent.events("file_dropped", all_runs=True)
    st = status(tmp_path)
    assert len(landed.tombstones) == len(drops) == st["counters"]["files_dropped_quota"] >= 2
    assert {d["file"] for d in st["dropped_files"]} == {t["file"] for t in landed.tombstones.values()}
    assert all(t["status"] == "dropped_quota" and t["kind"] == "tailscope.capture.tombstone"
               for t in landed.tombstones.values())
    m = metrics(tmp_path)
    assert m["tailscope_agent_quota_dropped_files_total"] == len(drops)
    assert m["tailscope_agent_quota_dropped_packets_total"] == sum(t["packets"] for t in landed.tombstones.values())
    # the datagrams in landed files plus those in dropped files account for everything sent
    dropped_packets = sum(t["packets"] for t in landed.tombstones.values())
    assert dropped_packets > 0
    assert max(res["seqs"]["quota"].values()) == 1
    assert len(res["seqs"]["quota"]) < g["udp_sent"]



@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv (util-linux) not installed")
def test_runs_unprivileged_with_two_capabilities(tmp_path):
    """Issue 19: the agent as the systemd unit runs it, an unprivileged user holding only ambient
    CAP_NET_RAW and CAP_NET_ADMIN (inherited by tcpdump): it captures, spools 0600 files it owns,
    and ships them."""
    import pwd
    import tempfile

    nobody = pwd.getpwnam("nobody")
    # pytest's own temporary directories are root's alone: the agent's user could not enter them
    work = Path(tempfile.mkdtemp(prefix="tailscope-unprivileged-", dir="/tmp"))
    try:
        work.chmod(0o755)
        for d in ("landing", "spool"):
            (work / d).mkdir()
            os.chown(work / d, nobody.pw_uid, nobody.pw_gid)
        setpriv = ("setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                   "--inh-caps=-all,+net_raw,+net_admin", "--ambient-caps=-all,+net_raw,+net_admin",
                   "--bounding-set=-all,+net_raw,+net_admin")
        with NetnsPair(17) as ns:
            sink = Sink(ns)
            cfg = config(work, ns, str(work / "landing"), capture={"rotate_seconds": 2})
            agent = AgentProc(ns, cfg, tmp_path, prefix=setpriv).start()
            try:
                agent.wait_event("capture_started")
                g = generate(ns, "unpriv", duration=3, rate=200)
                time.sleep(2.0)
                assert agent.stop() == 0
            finally:
                agent.close()
                sink.close()
        landed = lc.load(local_fs(), str(work / "landing"))
        res = assert_exactly_once(work, landed)
        assert sorted(res["seqs"][g["tag"]]) == list(range(g["udp_sent"]))
        spooled = [p for p in (work / "spool").rglob("*")]
        assert spooled and all(p.stat().st_uid == nobody.pw_uid for p in spooled)
        assert all(p.stat().st_mode & 0o777 == (0o700 if p.is_dir() else 0o600) for p in spooled)
        shipped = [p for p in (work / "landing").rglob("*") if p.is_file()]
        assert shipped and all(p.stat().st_uid == nobody.pw_uid for p in shipped)
    finally:
        shutil.rmtree(work, ignore_errors=True)

"""The agent process end to end with a stand-in tcpdump (agent_support/fake_tcpdump.py): rotation,
hand-over, per-file statistics, capture failures and restarts, without root or a network."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agent_support import landing_check as lc
from agent_support.harness import wait_for, write_config

FAKE = str(Path(__file__).parent / "agent_support" / "fake_tcpdump.py")


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")] if log.exists() else []


def _count(event: str, n: int):
    """A stop condition: the agent logged `event` at least `n` times."""
    return lambda events: sum(e["event"] == event for e in events) >= n


def run_agent(tmp: Path, seconds: float, env_extra: dict | None = None, until=None, ship: dict | None = None,
              agent: dict | None = None, **capture) -> tuple[int, list[dict]]:
    """Run the agent for `seconds`, or, with `until`, until it logged what the test needs (at most
    `seconds`, which is then a generous limit: a loaded machine starts processes slowly), or until
    it exits by itself; then SIGTERM it."""
    (tmp / "landing").mkdir(exist_ok=True)
    cfg = write_config(tmp / "agent.toml", {
        "agent": {"site": "fake", "capture_point": "cp", "agent_id": "a1", "spool_dir": str(tmp / "spool"), **(agent or {})},
        "capture": {"interface": "fake0", "tcpdump": FAKE, "rotate_seconds": 1, "handover_seconds": 0.3,
                    "rotate_bytes": "1M", **capture},
        "spool": {"quota_bytes": "16M", "min_free_bytes": 0},
        "ship": {"landing": str(tmp / "landing"), "poll_seconds": 0.2, "retry_initial_seconds": 0.1, **(ship or {})},
    })
    log = tmp / f"agent-{time.monotonic_ns()}.log"
    proc = subprocess.Popen([sys.executable, "-m", "tailscope", "agent", "run", "-c", str(cfg)], cwd=tmp,
                            stderr=open(log, "wb"), env={**os.environ, **(env_extra or {})})
    try:
        if until is None:
            time.sleep(seconds)
        else:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and proc.poll() is None and not until(_events(log)):
                time.sleep(0.1)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rc, _events(log)


def landed(tmp: Path) -> lc.Landed:
    import fsspec

    return lc.load(fsspec.filesystem("file"), str(tmp / "landing"))


def test_rotation_handover_and_stats(tmp_path):
    # until the third file is being captured: two ended by rotation, the third by the shutdown
    rc, events = run_agent(tmp_path, 60.0, {"FAKE_TCPDUMP_INTERVAL": "0.001"}, _count("capture_started", 3),
                           rotate_bytes="64K", rotate_seconds=2)
    assert rc == 0, events[-5:]
    zone = landed(tmp_path)
    lc.verify(zone, use_tcpdump=False)
    ms = sorted(zone.manifests.values(), key=lambda m: m["seq"])
    assert len(ms) >= 3
    assert {m["end_reason"] for m in ms} >= {"size", "shutdown"}
    assert all(m["kernel_drops"] == 2 and m["packets_received_by_filter"] == m["packets"] + 2 for m in ms)
    assert [m["seq"] for m in ms] == list(range(len(ms)))
    for a, b in zip(ms, ms[1:], strict=False):
        assert b["previous_file"] == a["file"] and b["contiguous_with_previous"]
    assert all(m["tcpdump_version"] == "0.0-fake" for m in ms)
    started = [e for e in events if e["event"] == "capture_started"]
    assert len(started) == len(ms)


def test_capture_exits_and_is_restarted(tmp_path):
    rc, events = run_agent(tmp_path, 60.0, {"FAKE_TCPDUMP_FAIL": "after:40"}, _count("capture_exited", 2),
                           rotate_seconds=10)
    assert rc == 0
    exited = [e for e in events if e["event"] == "capture_exited"]
    assert len(exited) >= 2 and "went down" in exited[0]["stderr"]
    assert [e["restart_in_seconds"] for e in exited[:2]] == [1.0, 2.0]  # backoff, no restart loop
    ms = sorted(landed(tmp_path).manifests.values(), key=lambda m: m["seq"])
    failed = [m for m in ms if m["end_reason"] == "capture_error"]
    assert len(failed) == len(exited) and all(m["packets"] == 40 for m in failed)
    assert not any(m["contiguous_with_previous"] for m in ms)  # a gap follows every failure


def test_capture_cannot_start_agent_keeps_trying(tmp_path):
    rc, events = run_agent(tmp_path, 60.0, {"FAKE_TCPDUMP_FAIL": "start"}, _count("capture_start_failed", 2))
    assert rc == 0
    failed = [e for e in events if e["event"] == "capture_start_failed"]
    assert len(failed) >= 2 and "No such device" in failed[0]["stderr"]
    assert not landed(tmp_path).manifests


def test_bad_filter_exits_2(tmp_path):
    # it exits by itself
    rc, events = run_agent(tmp_path, 60.0, until=lambda events: False, bpf_filter="bad filter")
    assert rc == 2 and any(e["event"] == "bad_filter" for e in events)


def test_kill9_then_drain(tmp_path):
    """kill -9 (no root needed here), then `agent drain` finishes the raw capture and ships it."""
    (tmp_path / "landing").mkdir()
    cfg = write_config(tmp_path / "agent.toml", {
        "agent": {"site": "fake", "agent_id": "a1", "spool_dir": str(tmp_path / "spool")},
        "capture": {"interface": "fake0", "tcpdump": FAKE, "rotate_seconds": 60, "handover_seconds": 0.3},
        "ship": {"landing": str(tmp_path / "landing")},
    })
    log = open(tmp_path / "agent.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "tailscope", "agent", "run", "-c", str(cfg)], cwd=tmp_path,
                            stderr=log)
    wait_for(lambda: (tmp_path / "agent.log").read_text().count("capture_started"), 20, "capture")
    time.sleep(0.5)
    proc.kill()
    proc.wait(10)
    raw = list((tmp_path / "spool" / "capture").glob("*.pcap"))
    assert len(raw) == 1
    # tcpdump got SIGTERM from the kernel (parent-death signal) and printed its statistics
    err = raw[0].with_suffix(".stderr")
    wait_for(lambda: "packets captured" in err.read_text(), 10, "tcpdump exit statistics")
    r = subprocess.run([sys.executable, "-m", "tailscope", "agent", "drain", "-c", str(cfg), "--timeout", "30"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    (m,) = landed(tmp_path).manifests.values()
    assert m["end_reason"] == "recovered" and m["capture_stats_complete"] and m["packets"] > 10
    st = json.loads(subprocess.run([sys.executable, "-m", "tailscope", "agent", "status", "-c", str(cfg)],
                                   cwd=tmp_path, capture_output=True, text=True, timeout=60).stdout)
    assert st["counters"]["recovered_files"] == 1 and st["files_pending"] == 0 and not st["raw_captures"]


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the -Z root default of a root agent")
def test_root_agent_keeps_pdeathsig(tmp_path):
    from tailscope.capture.config import load_config
    from tailscope.capture.tcpdump import build_command

    cmd = build_command(load_config(None, [("capture.interface", "x")]).capture, "/x.pcap")
    assert cmd[cmd.index("-Z") + 1] == "root"


def test_missing_landing_driver_fails_fast(tmp_path):
    """gs:// without gcsfs installed: a clear error and exit 2 at start, not a retry loop."""
    r = subprocess.run([sys.executable, "-m", "tailscope", "agent", "run", "--site", "x", "-i", "fake0",
                        "--set", f'capture.tcpdump="{FAKE}"', "--spool-dir", str(tmp_path / "spool"),
                        "--landing", "gs://bucket/prefix"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    try:
        import gcsfs  # noqa: F401
        pytest.skip("gcsfs is installed")
    except ImportError:
        pass
    assert r.returncode == 2 and "landing_driver_missing" in r.stderr


def test_files_are_private_and_no_secret_is_written(tmp_path):
    """Issue 19: spool files 0600 in 0700 directories, landing files 0640; credentials from the
    environment or the credentials file appear in nothing the agent writes."""
    creds = tmp_path / "creds.toml"
    creds.write_text('token = "planted-file-secret-4711"\n')
    creds.chmod(0o600)
    rc, events = run_agent(tmp_path, 20, until=_count("file_shipped", 2), ship={"credentials_file": str(creds)},
                           env_extra={"AWS_SECRET_ACCESS_KEY": "planted-env-secret-0815"})
    assert rc == 0 and sum(e["event"] == "file_shipped" for e in events) >= 2
    spool = tmp_path / "spool"
    for p in [spool, *spool.rglob("*")]:
        mode = p.stat().st_mode & 0o777
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))
    shipped = [p for p in (tmp_path / "landing").rglob("*") if p.is_file()]
    assert shipped and all(p.stat().st_mode & 0o777 == 0o640 for p in shipped)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != creds]
    assert any(p.suffix == ".log" for p in written)
    for secret in (b"planted-file-secret-4711", b"planted-env-secret-0815"):
        assert not [p for p in written if secret in p.read_bytes()], secret


def test_a_site_key_is_named_in_every_manifest(tmp_path):
    """agent.pseudonymize_clients: the manifests carry the key's fingerprint, never the key."""
    from tailscope.jobs.enrichment.pseudonymize import fingerprint

    key = bytes(range(7, 39))
    kf = tmp_path / "site.key"
    kf.write_text(key.hex())
    kf.chmod(0o600)
    cfg_extra = {"pseudonymize_clients": str(kf)}
    rc, events = run_agent(tmp_path, 20, until=_count("file_shipped", 1), agent=cfg_extra)
    assert rc == 0
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "landing").rglob("*.manifest.json")]
    assert manifests and all(m["pseudonymize_clients"] == {"key_fingerprint": fingerprint(key)} for m in manifests)
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p != kf and key.hex().encode() in p.read_bytes()]

"""Run the real agent (``python -m tailscope agent run``) inside a lab namespace and watch it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from .netns import NetnsPair

TRAFFIC = str(Path(__file__).with_name("traffic.py"))


def wait_for(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    return json.dumps(str(v))


def write_config(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    lines = []
    for sec, table in sections.items():
        lines.append(f"[{sec}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


class AgentProc:
    """One agent run; ``start`` again after ``kill9``/``stop`` for the next run on the same spool."""

    def __init__(self, ns: NetnsPair, config: Path, workdir: Path, prefix: tuple[str, ...] = ()):
        """`prefix` runs the agent under a wrapper, e.g. setpriv to drop to another user."""
        self.prefix = prefix
        self.ns = ns
        self.config = config
        self.workdir = workdir
        self.proc: subprocess.Popen | None = None
        self.runs = 0
        self.log_path: Path | None = None

    def start(self, *extra: str) -> "AgentProc":
        self.runs += 1
        self.log_path = self.workdir / f"agent-{self.runs}.log"
        cmd = self.ns.cmd(self.ns.server, *self.prefix, sys.executable, "-m", "tailscope", "agent", "run",
                          "--config", str(self.config), *extra)
        # cwd outside the repository: `python -m` puts the cwd first on sys.path, and the source
        # tree's tailscope/ (without capture/ mapped in) must not shadow the installed package
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "wb"),
                                     env=dict(os.environ), cwd=self.workdir)
        return self

    def events(self, name: str | None = None, all_runs: bool = False) -> list[dict]:
        paths = sorted(self.workdir.glob("agent-*.log")) if all_runs else [self.log_path]
        out = []
        for p in paths:
            for line in p.read_text(errors="replace").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if name is None or rec.get("event") == name:
                    out.append(rec)
        return out

    def wait_event(self, name: str, timeout: float = 20, count: int = 1) -> list[dict]:
        def check():
            if self.proc and self.proc.poll() is not None:
                raise AssertionError(f"agent exited ({self.proc.returncode}) waiting for {name}:\n"
                                     + self.log_path.read_text()[-3000:])
            ev = self.events(name)
            return ev if len(ev) >= count else None
        return wait_for(check, timeout, f"{count} x {name}")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 40) -> int:
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout)
        return rc

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Sink:
    def __init__(self, ns: NetnsPair, max_seconds: float = 150):
        self.proc = subprocess.Popen(
            ns.cmd(ns.server, sys.executable, TRAFFIC, "sink", "--bind", ns.server_ip,
                   "--max-seconds", str(max_seconds)), stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def generate(ns: NetnsPair, tag: str, duration: float, rate: float = 300, size: int = 120,
             background: bool = False, random_payload: bool = False):
    cmd = ns.cmd(ns.client, sys.executable, TRAFFIC, "gen", "--dst", ns.server_ip, "--tag", tag,
                 "--duration", str(duration), "--rate", str(rate), "--size", str(size))
    if random_payload:
        cmd.append("--random")
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def finish(gen: subprocess.Popen, timeout: float = 60) -> dict:
    out, _ = gen.communicate(timeout=timeout)
    return json.loads(out)


def s3s_fs_binary() -> str | None:
    import shutil

    return (os.environ.get("S3S_FS") or shutil.which("s3s-fs")
            or next((str(p) for p in [Path.home() / ".cargo/bin/s3s-fs"] if p.exists()), None))


class S3Server:
    """s3s-fs (a real S3 server from crates.io, on a directory) in the server namespace."""

    ACCESS, SECRET = "tailscope-lab", "tailscope-lab-secret"

    def __init__(self, ns: NetnsPair, root: Path, port: int = 9014, bucket: str = "pcaps"):
        self.ns, self.root, self.port, self.bucket = ns, root, port, bucket
        (root / bucket).mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.endpoint = f"http://127.0.0.1:{port}"

    def start(self) -> "S3Server":
        self.proc = subprocess.Popen(
            self.ns.cmd(self.ns.server, s3s_fs_binary(), "--host", "127.0.0.1", "--port", str(self.port),
                        "--access-key", self.ACCESS, "--secret-key", self.SECRET, str(self.root)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        probe = ("import socket,time\nfor _ in range(200):\n    try:\n"
                 f"        socket.create_connection(('127.0.0.1',{self.port}),0.2).close(); break\n"
                 "    except OSError: time.sleep(0.05)\nelse: raise SystemExit(1)\n")
        r = subprocess.run(self.ns.cmd(self.ns.server, sys.executable, "-c", probe), timeout=30)
        assert r.returncode == 0, "s3s-fs did not start"
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def storage_options(self) -> dict[str, str]:
        return {"endpoint_url": self.endpoint}

    def ship_settings(self, workdir: Path) -> dict:
        """The agent's [ship] settings for this server: the credentials in a 0600 file (never in
        the configuration) and plain HTTP explicitly allowed (the lab has no certificates)."""
        creds = workdir / "s3-credentials.toml"
        creds.write_text(f'key = "{self.ACCESS}"\nsecret = "{self.SECRET}"\n')
        creds.chmod(0o600)
        return {"storage_options": self.storage_options(), "credentials_file": str(creds), "allow_insecure_tls": True}

    def download(self, prefix: str, dest: Path) -> None:
        """Copy every object under prefix through the S3 API into dest (run inside the namespace)."""
        code = f"""
import json, os, s3fs
fs = s3fs.S3FileSystem(key={self.ACCESS!r}, secret={self.SECRET!r}, endpoint_url={self.endpoint!r})
# recursive ls: s3s-fs 0.14 treats the empty Delimiter that s3fs.find sends as a delimiter
def walk(p):
    for e in fs.ls(p, detail=True, refresh=True):
        if e["type"] == "directory":
            yield from walk(e["name"])
        else:
            yield e["name"]
root = {self.bucket + '/' + prefix!r}
for key in walk(root):
    rel = key[len(root) + 1:]
    out = os.path.join({str(dest)!r}, rel)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(fs.cat_file(key))
"""
        r = subprocess.run(self.ns.cmd(self.ns.server, sys.executable, "-c", code), capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-3000:]

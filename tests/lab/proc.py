"""Subprocess plumbing for the lab: every call has a timeout, every background
process can be stopped (gently, then firmly), and nothing is left running.

Commands that must run inside a namespace are prefixed with `ip netns exec NS`
rather than using setns() in-process: a child process cannot leak a namespace
switch into the test runner, and killing it cleans everything it opened.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


class LabError(RuntimeError):
    """Something in the lab (not the system under test) went wrong."""


def ns_prefix(ns: str | None) -> list[str]:
    return ["ip", "netns", "exec", ns] if ns else []


def run(cmd: list[str], *, ns: str | None = None, timeout: float = 10.0, check: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run a short command (optionally inside netns `ns`) and return its result."""
    full = ns_prefix(ns) + [str(c) for c in cmd]
    try:
        cp = subprocess.run(full, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timeout after {timeout}s: {' '.join(full)}") from e
    if check and cp.returncode != 0:
        raise LabError(f"failed ({cp.returncode}): {' '.join(full)}\n{cp.stderr.strip()}")
    return cp


def python_module(module: str, *args: str) -> list[str]:
    """argv to run one of the lab's own modules with the interpreter running us."""
    return [sys.executable, "-m", module, *[str(a) for a in args]]


def _child_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Background:
    """A long-running child (relay, tcpdump, server) with a readiness handshake.

    Output lines are drained by reader threads so the child never blocks on a
    full pipe; `wait_ready` returns once a line matches `ready` (a regex).
    """

    def __init__(self, cmd: list[str], *, ns: str | None = None, name: str = "",
                 ready: str | None = None, ready_stream: str = "stdout"):
        self.name = name or cmd[0]
        self.cmd = ns_prefix(ns) + [str(c) for c in cmd]
        self._ready_re = re.compile(ready) if ready else None
        self._ready_stream = ready_stream
        self._ready = threading.Event()
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=REPO_ROOT, env=_child_env(),
                                     start_new_session=True)  # own group: signals don't hit us
        self._threads = [threading.Thread(target=self._drain, args=(s,), daemon=True)
                         for s in ("stdout", "stderr")]
        for t in self._threads:
            t.start()

    def _drain(self, stream: str) -> None:
        pipe = getattr(self.proc, stream)
        for line in pipe:
            line = line.rstrip("\n")
            self.lines[stream].append(line)
            if self._ready_re and stream == self._ready_stream and self._ready_re.search(line):
                self._ready.set()

    def ready_line(self) -> str | None:
        for line in self.lines[self._ready_stream]:
            if self._ready_re and self._ready_re.search(line):
                return line
        return None

    def wait_ready(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ready.wait(0.05):
                return self.ready_line() or ""
            if self.proc.poll() is not None:
                break
        self.stop()
        raise LabError(f"{self.name} not ready within {timeout}s (rc={self.proc.returncode}); "
                       f"stderr: {' | '.join(self.lines['stderr'][-5:])}")

    def wait(self, timeout: float) -> int:
        """Wait for a child that is expected to exit by itself."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise LabError(f"{self.name} did not finish within {timeout}s")
        self._join()
        return rc

    def stop(self, sig: int = signal.SIGINT, timeout: float = 5.0) -> int | None:
        """Ask the child to stop with `sig`, escalate to SIGKILL. Idempotent.

        The signal goes to the child's own process group: `ip netns exec`
        execs the command in place, so that group is exactly our child."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(timeout=5)
        self._join()
        return self.proc.returncode

    def _join(self) -> None:
        for t in self._threads:
            t.join(timeout=2)

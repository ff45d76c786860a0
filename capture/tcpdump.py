"""Driving tcpdump, the libpcap front end: command line, process lifetime, exit statistics.

One tcpdump process writes one file. Its statistics on exit (``N packets captured / received by
filter / dropped by kernel``) are therefore exactly the counts of that file, which is why the agent
rotates by starting a new tcpdump instead of using tcpdump's own -G/-C rotation (those only report
totals for the whole run). stderr goes to a file beside the capture, so the statistics survive the
agent: if the agent is killed, tcpdump still prints them on its way out and recovery reads them.
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .config import CaptureSection

PR_SET_PDEATHSIG = 1
# Loaded in the parent: the child between fork and exec must not dlopen (another thread may hold
# the loader lock at fork time).
_prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
_SIGTERM = int(signal.SIGTERM)


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    # When the agent dies (even by SIGKILL), the kernel sends tcpdump SIGTERM: it closes its file
    # cleanly and prints its statistics, and no orphan keeps capturing into a spool nobody rotates.
    # Cleared by a uid change, hence the advice against tcpdump -Z (config.CaptureSection).
    _prctl(PR_SET_PDEATHSIG, _SIGTERM, 0, 0, 0)


def build_command(c: CaptureSection, out_path: str) -> list[str]:
    cmd = [c.tcpdump, "-i", c.interface, "-s", str(c.snaplen), "-B", str(c.buffer_kib),
           "--time-stamp-precision=nano", "-n", "-w", out_path]
    if not c.promiscuous:
        cmd.append("-p")
    if c.immediate_mode:
        cmd.append("--immediate-mode")
    if c.tcpdump_user:
        cmd += ["-Z", c.tcpdump_user]
    elif os.geteuid() == 0:
        cmd += ["-Z", "root"]  # Debian's tcpdump would otherwise drop to user tcpdump (see above)
    cmd += list(c.extra_args)
    cmd.append(c.bpf_filter)
    return cmd


_STAT_RE = {
    "captured": re.compile(r"^(\d+) packets? captured", re.M),
    "received_by_filter": re.compile(r"^(\d+) packets? received by filter", re.M),
    "kernel_drops": re.compile(r"^(\d+) packets? dropped by kernel", re.M),
    "interface_drops": re.compile(r"^(\d+) packets? dropped by interface", re.M),
}


def parse_stats(stderr_text: str) -> dict[str, int | None]:
    """tcpdump's exit statistics; None for what it did not print (e.g. it was killed by SIGKILL)."""
    out: dict[str, int | None] = {}
    for key, rx in _STAT_RE.items():
        m = rx.findall(stderr_text)
        out[key] = int(m[-1]) if m else None
    if out["kernel_drops"] is not None and out["interface_drops"] is None:
        out["interface_drops"] = 0  # tcpdump prints the line only when the count is non-zero
    return out


def versions(tcpdump: str = "tcpdump") -> dict[str, str | None]:
    try:
        text = subprocess.run([tcpdump, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {"tcpdump_version": None, "libpcap_version": None}
    t = re.search(r"tcpdump version (\S+)", text)
    p = re.search(r"libpcap version (\S+)", text)
    return {"tcpdump_version": t.group(1) if t else None, "libpcap_version": p.group(1) if p else None}


def check_filter(c: CaptureSection) -> str | None:
    """Compile the BPF filter without capturing (tcpdump -d); returns an error text or None."""
    try:
        r = subprocess.run([c.tcpdump, "-d", "-y", "EN10MB", c.bpf_filter], capture_output=True,
                           text=True, timeout=10)
    except OSError as exc:
        return f"cannot run {c.tcpdump}: {exc}"
    return None if r.returncode == 0 else (r.stderr.strip() or f"tcpdump -d exited {r.returncode}")


@dataclass
class TcpdumpProcess:
    proc: subprocess.Popen
    pcap_path: Path
    stderr_path: Path
    spawned_ns: int

    @classmethod
    def spawn(cls, c: CaptureSection, pcap_path: Path, stderr_path: Path) -> "TcpdumpProcess":
        spawned_ns = time.time_ns()
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen(build_command(c, str(pcap_path)), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_set_pdeathsig,
                                    close_fds=True,
                                    # own session: a Ctrl-C on the agent's terminal must not stop the
                                    # capture before the agent has handed over to the next file
                                    start_new_session=True)
        return cls(proc, pcap_path, stderr_path, spawned_ns)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_listening(self, timeout: float) -> bool:
        """True once tcpdump reports it is capturing (filter installed, file open)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "listening on" in self.stderr_text():
                return True
            if self.proc.poll() is not None:
                return False
            time.sleep(0.01)
        return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (tcpdump flushes and prints its statistics), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # tcpdump writes its statistics just before exiting; the file is complete once it has exited
        return self.proc.returncode

    def file_size(self) -> int:
        try:
            return self.pcap_path.stat().st_size
        except FileNotFoundError:
            return 0


def stop_stale(pid: int, pcap_path: str, timeout: float = 10.0) -> bool:
    """Stop a tcpdump left running by a previous agent (e.g. one started with -Z, whose parent-death
    signal was cleared). Only if /proc shows it is really our tcpdump writing that file."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if pcap_path.encode() not in cmdline:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        # a zombie (its parent died and init has not reaped it yet) has an empty cmdline
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True

"""tcpdump at the server's interface - the vantage point tailscope is built for
(captures taken at edge servers, DESIGN.md §4).

Started before any traffic and confirmed ready (tcpdump prints "listening on"
only after the capture handle is active), stopped with SIGINT so it flushes
and prints its counters; a capture that lost packets in the kernel is reported,
because a pcap with holes we did not make would corrupt the ground truth.
"""
from __future__ import annotations

import re
import signal
from pathlib import Path

from .proc import Background, LabError


class Capture:
    def __init__(self, ns: str, iface: str, path: Path, *, snaplen: int = 0,
                 precision: str = "micro", bpf: str | None = None):
        self.ns, self.iface, self.path = ns, iface, Path(path)
        self.snaplen, self.precision, self.bpf = snaplen, precision, bpf
        self.proc: Background | None = None
        self.stats: dict = {}

    def start(self, timeout: float = 5.0) -> "Capture":
        cmd = ["tcpdump", "-i", self.iface, "-w", str(self.path), "-n",
               "-s", str(self.snaplen or 262144),
               "-U",                       # write each packet as it arrives (no loss on stop)
               "--immediate-mode",         # no batching delay inside libpcap
               "-B", "8192",               # 8 MB kernel buffer: no drops in bursts
               "-Z", "root",               # keep root so it can write into any out dir
               f"--time-stamp-precision={self.precision}"]
        if self.bpf:
            cmd.append(self.bpf)
        self.proc = Background(cmd, ns=self.ns, name="tcpdump", ready=r"listening on", ready_stream="stderr")
        self.proc.wait_ready(timeout)
        return self

    def stop(self, timeout: float = 5.0) -> dict:
        if self.proc is None:
            return self.stats
        self.proc.stop(signal.SIGINT, timeout)
        text = "\n".join(self.proc.lines["stderr"])
        for key, pat in (("captured", r"(\d+) packets? captured"),
                         ("received_by_filter", r"(\d+) packets? received by filter"),
                         ("dropped_by_kernel", r"(\d+) packets? dropped by kernel")):
            m = re.search(pat, text)
            self.stats[key] = int(m.group(1)) if m else None
        self.proc = None
        if not self.path.exists():
            raise LabError(f"tcpdump wrote no file: {text[-500:]}")
        return self.stats

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

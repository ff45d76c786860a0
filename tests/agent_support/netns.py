"""A pair of network namespaces joined by a veth pair, for generating real traffic.

Safety rules (the lab may run on a shared host): addresses are taken only from 198.18.0.0/15
(RFC 2544 benchmarking space), traffic is only ever sent between the two namespaces created
here, every process started here has a time limit, and ``close()`` deletes both namespaces (and
with them the veth pair and anything still bound to them).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import uuid


def available() -> str | None:
    """None if namespaces can be used here, else the reason they cannot."""
    if os.geteuid() != 0:
        return "needs root (ip netns)"
    if not shutil.which("ip") or not shutil.which("tcpdump"):
        return "needs iproute2 and tcpdump"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=30)


class NetnsPair:
    def __init__(self, subnet_index: int = 0):
        tag = uuid.uuid4().hex[:6]
        self.client = f"tsag-{tag}-c"
        self.server = f"tsag-{tag}-s"
        self.client_if = "tsc0"
        self.server_if = "tss0"
        # one /30 per pair inside 198.18.0.0/15
        base = 4 * (subnet_index % 16384)
        b2, b3 = 18 + (base >> 16), (base >> 8) & 0xFF
        self.client_ip = f"198.{b2}.{b3}.{(base & 0xFF) + 1}"
        self.server_ip = f"198.{b2}.{b3}.{(base & 0xFF) + 2}"
        assert self.client_ip.startswith(("198.18.", "198.19."))
        self._up = False

    def __enter__(self) -> "NetnsPair":
        try:
            _run("ip", "netns", "add", self.client)
            _run("ip", "netns", "add", self.server)
            # created directly inside the namespaces: never visible in (or routed from) the host's
            _run("ip", "link", "add", self.client_if, "netns", self.client, "type", "veth",
                 "peer", "name", self.server_if, "netns", self.server)
            for ns, ifname, ip in ((self.client, self.client_if, self.client_ip),
                                   (self.server, self.server_if, self.server_ip)):
                _run("ip", "-n", ns, "addr", "add", f"{ip}/30", "dev", ifname)
                _run("ip", "-n", ns, "link", "set", ifname, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._up = True
        except Exception:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for ns in (self.client, self.server):
            # kill whatever is still running in the namespace (only processes we started live there)
            pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _run("ip", "netns", "del", ns, check=False)
        self._up = False

    def cmd(self, ns: str, *argv: str) -> list[str]:
        """A command line that runs argv inside namespace ns, killed after its own time limit by
        the caller (every caller passes a timeout or a --max-seconds)."""
        return ["ip", "netns", "exec", ns, *argv]

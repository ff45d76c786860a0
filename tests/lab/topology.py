"""Three network namespaces in a line: client -- router -- server.

    client ns               router ns                         server ns
  +-----------+      +-------------------------+         +-----------+
  | eth0      |veth  | toc      relay0    tos  |  veth   | eth0      |
  | .1.2 ::2  |------| .1.1  (TUN, relay)  .2.1|---------| .2.2 ::2  |
  +-----------+      +-------------------------+         +-----------+
   198.18.1.0/24                                          198.18.2.0/24
   fd00:7473:1::/64                                       fd00:7473:2::/64

The router forwards nothing by itself: policy routing sends every packet that
arrives on toc/tos into the TUN device `relay0`, where the userspace relay reads
it, applies the scenario's impairments, and writes it back; packets coming
*from* relay0 use the main table and go out of toc/tos. So every packet between
client and server crosses the relay exactly once and is logged there.

Nothing is configured in the root namespace: the veth pairs are created inside
the namespaces, and all addresses are from 198.18.0.0/15 (benchmarking) and a
fd00::/8 ULA prefix, reachable only between these namespaces. Names carry our
pid and a random suffix so scenarios can run in parallel, and stale namespaces
of dead runs can be recognised and removed (`cleanup_stale`).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass, field

from .proc import LabError, run

PREFIX = "tsl"
TUN = "relay0"
RELAY_TABLE = 100

CLIENT_V4, ROUTER_C_V4, CLIENT_NET_V4 = "198.18.1.2", "198.18.1.1", "198.18.1.0/24"
SERVER_V4, ROUTER_S_V4, SERVER_NET_V4 = "198.18.2.2", "198.18.2.1", "198.18.2.0/24"
CLIENT_V6, ROUTER_C_V6, CLIENT_NET_V6 = "fd00:7473:1::2", "fd00:7473:1::1", "fd00:7473:1::/64"
SERVER_V6, ROUTER_S_V6, SERVER_NET_V6 = "fd00:7473:2::2", "fd00:7473:2::1", "fd00:7473:2::/64"

# Applied to client and server unless a scenario overrides them.
DEFAULT_HOST_SYSCTLS = {
    # Each connection starts cold: no cached ssthresh/RTT from an earlier
    # connection of the same scenario, so every flow is governed only by what
    # the relay did to it (otherwise losses in flow 1 change flow 2's behaviour).
    "net.ipv4.tcp_no_metrics_save": "1",
}

# All three namespaces.
NS_SYSCTLS = {
    # No duplicate address detection: while link-local addresses are
    # 'tentative' the first IPv6 packets of a run are lost (a 1 s stall in
    # the first ping); nothing else can own these addresses anyway.
    "net.ipv6.conf.all.accept_dad": "0",
    "net.ipv6.conf.default.accept_dad": "0",
}

ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv6.conf.all.forwarding": "1",
    # Packets re-enter from relay0 with client/server sources; strict reverse
    # path filtering would drop them because those sources route via veths.
    "net.ipv4.conf.all.rp_filter": "0",
    "net.ipv4.conf.default.rp_filter": "0",
    "net.ipv4.conf.all.send_redirects": "0",
}


@dataclass
class Topology:
    """Context manager owning the three namespaces; `with Topology() as t:`."""
    tag: str = ""
    host_sysctls: dict = field(default_factory=dict)   # {"client": {...}, "server": {...}, "router": {...}}
    offloads: str = ""          # "server": TSO/GSO on at the server's eth0 (Scenario.offloads)
    client: str = ""
    router: str = ""
    server: str = ""

    def __post_init__(self):
        base = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}"
        if self.tag:
            base += "-" + re.sub(r"[^a-z0-9]", "", self.tag.lower())[:12]
        self.client, self.router, self.server = f"{base}-c", f"{base}-r", f"{base}-s"
        self._created: list[str] = []

    # addresses for the scenario's address family
    def addr(self, role: str, family: int = 4) -> str:
        table = {("client", 4): CLIENT_V4, ("server", 4): SERVER_V4,
                 ("client", 6): CLIENT_V6, ("server", 6): SERVER_V6}
        return table[(role, family)]

    @property
    def namespaces(self) -> list[str]:
        return [self.client, self.router, self.server]

    def __enter__(self) -> "Topology":
        try:
            self._build()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def _sysctl(self, ns: str, settings: dict) -> None:
        for key, val in settings.items():
            run(["sysctl", "-q", "-w", f"{key}={val}"], ns=ns)

    def _build(self) -> None:
        for ns in self.namespaces:
            run(["ip", "netns", "add", ns])
            self._created.append(ns)
            run(["ip", "link", "set", "lo", "up"], ns=ns)
        c, r, s = self.client, self.router, self.server
        # Sysctls first: interfaces created afterwards inherit conf.default.
        self._sysctl(r, {**NS_SYSCTLS, **ROUTER_SYSCTLS, **self.host_sysctls.get("router", {})})
        for ns, role in ((c, "client"), (s, "server")):
            self._sysctl(ns, {**NS_SYSCTLS, **DEFAULT_HOST_SYSCTLS, **self.host_sysctls.get(role, {})})
        # veth pairs born inside the namespaces: the root namespace never sees them.
        run(["ip", "-n", c, "link", "add", "eth0", "type", "veth", "peer", "name", "toc", "netns", r])
        run(["ip", "-n", s, "link", "add", "eth0", "type", "veth", "peer", "name", "tos", "netns", r])

        for ns, dev, v4, v6 in ((c, "eth0", CLIENT_V4, CLIENT_V6), (s, "eth0", SERVER_V4, SERVER_V6),
                                (r, "toc", ROUTER_C_V4, ROUTER_C_V6), (r, "tos", ROUTER_S_V4, ROUTER_S_V6)):
            # Offloads off so that what tcpdump records is what crosses the
            # wire: no 64 KB TSO/GSO super-segments, no GRO merging at the
            # router, and (tx off) real checksums instead of partial ones.
            run(["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", "tx", "off"], ns=ns)
            if self.offloads == "server" and ns == s:
                # the GSO axis (draws.py): the server hands its eth0 super-segments as a TSO host
                # does, so tcpdump there records them (TSO needs tx checksumming, so partial
                # checksums too). Past the veth the router forwards them into the TUN, which has no
                # offloads: the kernel segments them there, and the relay still sees and logs
                # wire-size segments.
                run(["ethtool", "-K", dev, "tx", "on", "tso", "on", "gso", "on"], ns=ns)
            _one_backlog(ns, dev)
            run(["ip", "addr", "add", f"{v4}/24", "dev", dev], ns=ns)
            run(["ip", "-6", "addr", "add", f"{v6}/64", "dev", dev, "nodad"], ns=ns)
            run(["ip", "link", "set", dev, "up"], ns=ns)
        for ns, gw4, gw6 in ((c, ROUTER_C_V4, ROUTER_C_V6), (s, ROUTER_S_V4, ROUTER_S_V6)):
            run(["ip", "route", "add", "default", "via", gw4], ns=ns)
            run(["ip", "-6", "route", "add", "default", "via", gw6], ns=ns)

        # The relay's TUN device: persistent so routes can point at it before
        # the relay attaches. A long queue so bursts wait for the (Python)
        # relay instead of being dropped unlogged; tx_dropped is checked after.
        run(["ip", "tuntap", "add", "dev", TUN, "mode", "tun"], ns=r)
        # No IPv6 link-local on the TUN: otherwise the router sends its own
        # MLD reports into the relay, which are noise in the ground truth.
        self._sysctl(r, {f"net.ipv6.conf.{TUN}.addr_gen_mode": "1"})
        run(["ip", "link", "set", TUN, "up", "txqueuelen", "20000"], ns=r)
        for fam in ("-4", "-6"):
            run(["ip", fam, "route", "add", "default", "dev", TUN, "table", str(RELAY_TABLE)], ns=r)
            for dev in ("toc", "tos"):
                run(["ip", fam, "rule", "add", "iif", dev, "lookup", str(RELAY_TABLE), "pref", "100"], ns=r)
        self.wait_links_up()

    def wait_links_up(self, timeout: float = 3.0) -> None:
        """Wait until the kernel's linkwatch has marked every veth
        operationally UP. Until then the device still has the noop qdisc and
        silently discards what the host sends (the first IPv6 neighbour
        advertisement, typically), which costs a 1 s retry."""
        want = {(self.client, "eth0"), (self.server, "eth0"), (self.router, "toc"), (self.router, "tos")}
        deadline = time.monotonic() + timeout
        while want and time.monotonic() < deadline:
            for ns, dev in list(want):
                cp = run(["ip", "-j", "link", "show", dev], ns=ns, check=False)
                try:
                    if json.loads(cp.stdout)[0].get("operstate") == "UP":
                        want.discard((ns, dev))
                except (ValueError, IndexError):
                    pass
            if want:
                time.sleep(0.02)
        if want:
            raise LabError(f"links not up after {timeout}s: {sorted(want)}")

    def wait_reachable(self, family: int = 4, timeout: float = 5.0) -> None:
        """Ping server from client until it answers (bounded), so a broken
        topology fails here with a clear message, not as a connect timeout."""
        target = self.addr("server", family)
        deadline = time.monotonic() + timeout
        tries = 0
        while time.monotonic() < deadline and tries < 20:
            tries += 1
            cp = run(["ping", f"-{family}", "-c", "1", "-W", "1", target], ns=self.client,
                     timeout=3, check=False)
            if cp.returncode == 0:
                return
        raise LabError(f"server {target} unreachable from client after {tries} pings")

    def link_stats(self) -> dict:
        """Per-interface kernel counters; drops here would be impairments the
        relay did not log, so the harness reports them."""
        out = {}
        for ns, devs in ((self.client, ["eth0"]), (self.router, ["toc", "tos", TUN]), (self.server, ["eth0"])):
            role = ns.rsplit("-", 1)[1]
            for dev in devs:
                cp = run(["ip", "-s", "-j", "link", "show", dev], ns=ns, check=False)
                if cp.returncode != 0:
                    continue
                st = json.loads(cp.stdout)[0].get("stats64", {})
                out[f"{role}:{dev}"] = {
                    "rx_packets": st.get("rx", {}).get("packets"), "rx_dropped": st.get("rx", {}).get("dropped"),
                    "tx_packets": st.get("tx", {}).get("packets"), "tx_dropped": st.get("tx", {}).get("dropped"),
                }
        return out

    def teardown(self) -> None:
        """Kill whatever still runs in our namespaces, then delete them.
        Safe to call twice and after a partial build."""
        for ns in reversed(self._created):
            _kill_ns_processes(ns)
            run(["ip", "netns", "del", ns], check=False)
        self._created.clear()


RPS_CPU_MASK = "1"     # CPU 0: every machine has it


def _one_backlog(ns: str, dev: str) -> None:
    """Every packet a veth receives goes through one CPU's backlog, in the order it was sent.

    A veth hands a packet to the backlog of the CPU that sent it. When the sender (the relay
    writing into the TUN, or a host's stack) moves between CPUs mid-burst, packets sit in two
    backlogs and the busier CPU's come out later: on a loaded 2-core machine the client's capture
    showed segments arriving 30-140 us out of the order the relay wrote them in, reordering that
    is in no relay log (2026-12-07, draw0016_clean_client). Receive packet steering to one CPU
    keeps the wire's order; the truth stays what the relay did. Without RPS in the kernel the
    file is missing and nothing changes."""
    path = f"/sys/class/net/{dev}/queues/rx-0/rps_cpus"
    run(["sh", "-c", f"[ ! -e {path} ] || echo {RPS_CPU_MASK} > {path}"], ns=ns)


def _kill_ns_processes(ns: str) -> None:
    # Only our own namespaces reach here, so every process in them is ours.
    cp = run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in cp.stdout.split() if p.isdigit()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 2
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
        time.sleep(0.02)


def cleanup_stale() -> list[str]:
    """Remove lab namespaces left behind by runs whose process is gone
    (e.g. a test runner killed with SIGKILL). Returns the names removed."""
    cp = run(["ip", "netns", "list"], check=False)
    removed = []
    for line in cp.stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.match(rf"{PREFIX}-(\d+)-[0-9a-f]+", name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or os.path.exists(f"/proc/{pid}"):
            continue  # its owner is alive (us, or a parallel run): leave it
        _kill_ns_processes(name)
        run(["ip", "netns", "del", name], check=False)
        removed.append(name)
    return removed

"""Kernel-side impairments, used where the kernel does the job as well as the
relay: tbf as a bottleneck with a deep queue (bufferbloat), and nftables for
random loss (`numgen random`) and policing (`limit rate over`).

The relay logs each of its decisions; the kernel does not. So kernel
impairments come with their own evidence: tbf backlog is sampled during the run
and qdisc / nft counters are read at the end, all written into the emulator log
(README: kernel records). Probing is done in a throwaway namespace of our own,
never in the root namespace.
"""
from __future__ import annotations

import functools
import json
import os
import secrets
import threading
import time

from .proc import run
from .topology import PREFIX, TUN

# Direction -> router interface whose egress carries it.
EGRESS = {"s2c": "toc", "c2s": "tos"}


def _probe(cmds: list[list[str]]) -> bool:
    ns = f"{PREFIX}-{os.getpid()}-{secrets.token_hex(3)}-probe"
    try:
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "set", "lo", "up"], ns=ns)
        return all(run(c, ns=ns, check=False).returncode == 0 for c in cmds)
    except Exception:
        return False
    finally:
        run(["ip", "netns", "del", ns], check=False)


@functools.lru_cache(maxsize=None)
def tbf_available() -> bool:
    return _probe([["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "1mbit",
                    "burst", "10kb", "limit", "100kb"]])


@functools.lru_cache(maxsize=None)
def netem_available() -> bool:
    return _probe([["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]])


@functools.lru_cache(maxsize=None)
def nft_available() -> bool:
    return _probe([["nft", "add", "table", "inet", "probe"]])


class TbfBottleneck:
    """A token-bucket *shaper* on the router's egress: packets beyond the rate
    wait in a FIFO of `queue_bytes` (deep = bufferbloat), drop only when full."""

    def __init__(self, ns: str, direction: str, rate_kbit: float, queue_bytes: int, burst_bytes: int = 4500):
        self.ns, self.dev = ns, EGRESS[direction]
        self.direction = direction
        self.rate_kbit, self.queue_bytes, self.burst_bytes = rate_kbit, queue_bytes, burst_bytes

    def apply(self) -> None:
        run(["tc", "qdisc", "replace", "dev", self.dev, "root", "tbf", "rate", f"{self.rate_kbit}kbit",
             "burst", str(self.burst_bytes), "limit", str(self.queue_bytes)], ns=self.ns)

    def stats(self) -> dict:
        cp = run(["tc", "-s", "-j", "qdisc", "show", "dev", self.dev], ns=self.ns, timeout=5, check=False)
        try:
            q = next(x for x in json.loads(cp.stdout) if x.get("kind") == "tbf")
        except (ValueError, StopIteration):
            return {}
        return {"backlog_bytes": q.get("backlog"), "backlog_pkts": q.get("qlen"), "drops": q.get("drops"),
                "sent_bytes": q.get("bytes"), "sent_pkts": q.get("packets"), "overlimits": q.get("overlimits")}

    def describe(self) -> dict:
        return {"backend": "tbf", "dev": self.dev, "dir": self.direction, "rate_kbit": self.rate_kbit,
                "queue_bytes": self.queue_bytes, "burst_bytes": self.burst_bytes}


class QueueSampler:
    """Polls a TbfBottleneck's backlog while traffic runs (bounded in time and
    count) so the log shows how deep the queue got and when."""

    def __init__(self, tbf: TbfBottleneck, interval_s: float = 0.05, max_samples: int = 2000):
        self.tbf, self.interval, self.max_samples = tbf, interval_s, max_samples
        self.records: list[dict] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> "QueueSampler":
        self._t.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.records) < self.max_samples:
            st = self.tbf.stats()
            if st:
                self.records.append({"ts_ns": time.time_ns(), "action": "queue_sample", "backend": "tbf",
                                     "dev": self.tbf.dev, "dir": self.tbf.direction, **st})
            self._stop.wait(self.interval)

    def stop(self) -> list[dict]:
        self._stop.set()
        self._t.join(timeout=5)
        return self.records


class NftImpairments:
    """Kernel loss / policing in the router's forward path, applied once per
    packet: only on the hop from relay0 to the egress veth."""

    TABLE = "tslab"

    def __init__(self, ns: str, loss: dict | None = None, police: dict | None = None):
        self.ns, self.loss, self.police = ns, loss, police

    def apply(self) -> None:
        lines = [f"table inet {self.TABLE} {{", "  chain lab_forward {",
                 "    type filter hook forward priority 0; policy accept;"]
        if self.loss:
            pct = float(self.loss["pct"])
            for d in self._dirs(self.loss):
                # numgen over 10000 so fractional percentages (e.g. 1.5%) work.
                lines.append(f'    iifname "{TUN}" oifname "{EGRESS[d]}" meta l4proto {{ tcp, udp }} '
                             f'numgen random mod 10000 < {int(round(pct * 100))} counter drop '
                             f'comment "loss_{d}"')
        if self.police:
            rate_kbytes = max(1, int(self.police["rate_kbit"] / 8))
            for d in self._dirs(self.police):
                lines.append(f'    iifname "{TUN}" oifname "{EGRESS[d]}" limit rate over {rate_kbytes} kbytes/second '
                             f'burst {int(self.police["burst_bytes"])} bytes counter drop comment "police_{d}"')
        lines += ["  }", "}"]
        run(["nft", "-f", "-"], ns=self.ns, input="\n".join(lines) + "\n")

    @staticmethod
    def _dirs(spec: dict) -> list[str]:
        d = spec.get("dir", "s2c")
        return ["c2s", "s2c"] if d == "both" else [d]

    def stats(self) -> dict:
        return _nft_counters(self.ns, self.TABLE)

    def describe(self) -> dict:
        return {"backend": "nft", "loss": self.loss, "police": self.police}


class ServerSynDrop:
    """Drop the first SYN of every `every`-th connection *inside the server
    namespace*, after the capture point: tcpdump (AF_PACKET, before netfilter)
    records the SYN, the listener never gets it, so the client retransmits it
    ~1 s later and the capture shows both - the server-side picture of a SYN
    lost between the NIC and the socket (full SYN backlog / accept queue).

    A relay `syn` rule instead drops the SYN *before* the capture point, which
    a server-side vantage cannot see at all (README: SYN loss and vantage).

    Ground truth: the 4-tuples whose first SYN was dropped are added to an nft
    set, listed after the run into a `kernel_stats` record (`dropped`)."""

    TABLE = "tslab_server"

    def __init__(self, ns: str, port: int, every: int = 2):
        self.ns, self.port, self.every = ns, int(port), max(1, int(every))

    def apply(self) -> None:
        lines = [f"table inet {self.TABLE} {{"]
        for fam, addr_t in ((4, "ipv4_addr"), (6, "ipv6_addr")):
            for s in ("seen", "dropped"):
                lines.append(f"  set {s}{fam} {{ type {addr_t} . inet_service; size 65535; flags dynamic; }}")
        lines += ["  chain lab_input {", "    type filter hook input priority 0; policy accept;"]
        for fam, ip in ((4, "ip"), (6, "ip6")):
            first_syn = f"tcp dport {self.port} tcp flags & (syn | ack) == syn"
            key = f"{ip} saddr . tcp sport"
            # A SYN of a 4-tuple already seen (the client's retransmission) passes.
            lines.append(f"    meta nfproto ipv{fam} {first_syn} {key} @seen{fam} accept")
            # Every first SYN is remembered; every `every`-th one is dropped.
            lines.append(f"    meta nfproto ipv{fam} {first_syn} add @seen{fam} {{ {key} }} "
                         f"numgen inc mod {self.every} == 0 add @dropped{fam} {{ {key} }} "
                         f'counter drop comment "syn_drop_v{fam}"')
        lines += ["  }", "}"]
        run(["nft", "-f", "-"], ns=self.ns, input="\n".join(lines) + "\n")

    def stats(self) -> dict:
        """{'dropped': [[client_ip, client_port], ...], 'counters': {...}}"""
        dropped = []
        for fam in (4, 6):
            cp = run(["nft", "-j", "list", "set", "inet", self.TABLE, f"dropped{fam}"], ns=self.ns, check=False)
            try:
                for item in json.loads(cp.stdout).get("nftables", []):
                    for el in item.get("set", {}).get("elem", []):
                        val = el.get("elem", {}).get("val", el) if isinstance(el, dict) else el
                        dropped.append(list(val["concat"]))
            except (ValueError, KeyError, TypeError):
                pass
        counters = _nft_counters(self.ns, self.TABLE)
        return {"dropped": sorted(dropped), "counters": counters}

    def describe(self) -> dict:
        return {"backend": "nft", "where": "server input", "syn_drop": {"every": self.every, "port": self.port}}


class ServerUdpDrop:
    """UDP (QUIC) drops *inside the server namespace*, after the capture point (nftables input
    hook; tcpdump's AF_PACKET tap sees the datagram first), per client 4-tuple:

    * mode "first": drop the first datagram of every `every`-th 4-tuple (a QUIC client's first
      Initial), as ServerSynDrop does for SYNs: the capture shows the Initial and, one PTO later,
      its retransmission, which passes.
    * mode "all": drop every datagram of every `every`-th 4-tuple: UDP blocked in front of the
      server (a firewall), so the capture shows the client's Initials and no reply.

    A QUIC client opens a new 4-tuple (source port) per connection attempt, so `every` selects
    attempts. Ground truth: the 4-tuples are listed after the run (`kernel_stats` record,
    `dropped`), with the rule counters."""

    TABLE = "tslab_server_udp"

    def __init__(self, ns: str, port: int, every: int = 1, mode: str = "first"):
        if mode not in ("first", "all"):
            raise ValueError(f"server_udp_drop mode {mode!r}: first | all")
        self.ns, self.port, self.every, self.mode = ns, int(port), max(1, int(every)), mode

    def apply(self) -> None:
        lines = [f"table inet {self.TABLE} {{"]
        for fam, addr_t in ((4, "ipv4_addr"), (6, "ipv6_addr")):
            for s in ("seen", "dropped"):
                lines.append(f"  set {s}{fam} {{ type {addr_t} . inet_service; size 65535; flags dynamic; }}")
        lines += ["  chain lab_input {", "    type filter hook input priority 0; policy accept;"]
        for fam, ip in ((4, "ip"), (6, "ip6")):
            m = f"meta nfproto ipv{fam} udp dport {self.port}"
            key = f"{ip} saddr . udp sport"
            if self.mode == "all":
                # later datagrams of a blocked 4-tuple
                lines.append(f'    {m} {key} @dropped{fam} counter drop comment "udp_block_v{fam}"')
            lines.append(f"    {m} {key} @seen{fam} accept")
            lines.append(f"    {m} add @seen{fam} {{ {key} }} numgen inc mod {self.every} == 0 "
                         f'add @dropped{fam} {{ {key} }} counter drop comment "udp_first_v{fam}"')
        lines += ["  }", "}"]
        run(["nft", "-f", "-"], ns=self.ns, input="\n".join(lines) + "\n")

    def stats(self) -> dict:
        """{'dropped': [[client_ip, client_port], ...], 'counters': {...}}"""
        return {"dropped": _nft_set_tuples(self.ns, self.TABLE, "dropped"),
                "counters": _nft_counters(self.ns, self.TABLE)}

    def describe(self) -> dict:
        return {"backend": "nft", "where": "server input",
                "udp_drop": {"every": self.every, "mode": self.mode, "port": self.port}}


def _nft_set_tuples(ns: str, table: str, prefix: str) -> list:
    out = []
    for fam in (4, 6):
        cp = run(["nft", "-j", "list", "set", "inet", table, f"{prefix}{fam}"], ns=ns, check=False)
        try:
            for item in json.loads(cp.stdout).get("nftables", []):
                for el in item.get("set", {}).get("elem", []):
                    val = el.get("elem", {}).get("val", el) if isinstance(el, dict) else el
                    out.append(list(val["concat"]))
        except (ValueError, KeyError, TypeError):
            pass
    return sorted(out)


def _nft_counters(ns: str, table: str) -> dict:
    """{rule comment: {"packets", "bytes"}} of an inet table's counters."""
    cp = run(["nft", "-j", "list", "table", "inet", table], ns=ns, check=False)
    out = {}
    try:
        for item in json.loads(cp.stdout).get("nftables", []):
            rule = item.get("rule")
            if not rule:
                continue
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    out[rule.get("comment", f"rule{rule.get('handle')}")] = expr["counter"]
    except ValueError:
        pass
    return out

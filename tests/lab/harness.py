"""Run one scenario end to end and hand back what it produced.

    with Topology:                       # namespaces, veths, tun, routes
        relay (router ns)   -> READY     # impairments + ground-truth log
        kernel impairments  (tbf / nft)  # if the scenario asks for them
        ping client->server              # topology sanity, before the capture
        server app (server ns) -> READY  # apps.py, or quic_apps.py (QUIC + TLS) for app="quic"
        tcpdump (server eth0)  -> READY
        client app (client ns)  ... exits
        linger, stop tcpdump, stop server, stop relay
    merge relay log + kernel records -> <name>.emulator.jsonl

Teardown runs on every path (context managers + finally), and every wait is
bounded. Order matters at the end: the capture stops before the relay, so no
packet reaches the capture point after the relay has stopped logging.
"""
from __future__ import annotations

import json
import platform
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import impair
from .capture import Capture
from .proc import Background, LabError, python_module, run
from .scenarios import Scenario, get
from .topology import (CLIENT_NET_V4, CLIENT_NET_V6, SERVER_NET_V4, SERVER_NET_V6, TUN, Topology,
                       cleanup_stale)


@dataclass
class ScenarioResult:
    """Paths and facts of one finished scenario run (README: Python API)."""
    name: str
    params: dict                 # Scenario.to_dict() as run (after overrides)
    out_dir: Path
    pcap: Path                   # tcpdump at the server's eth0 (or the client's: Scenario.vantage)
    emulator_log: Path           # JSONL ground truth (relay + kernel records)
    client_log: Path             # JSONL written by the client app
    meta: Path                   # JSON: params + everything below
    duration_s: float = 0.0      # wall time of the whole run, setup to teardown
    traffic_s: float = 0.0       # capture start to capture stop
    client_rc: int | None = None
    capture_stats: dict = field(default_factory=dict)
    link_stats: dict = field(default_factory=dict)
    kernel_counters: dict = field(default_factory=dict)   # {"client"|"server": {"TcpExt": {...}, "Tcp": {...}}}
    backends: dict = field(default_factory=dict)          # which component did what
    problems: list = field(default_factory=list)          # reasons the run is not trustworthy
    files: dict = field(default_factory=dict)             # app-specific extras (QUIC: keylog, qlogs, server log)

    @classmethod
    def load(cls, meta_path: str | Path) -> "ScenarioResult":
        """Re-open a finished run from its <name>.scenario.json (e.g. a
        bundled sample in samples/), without root or a rerun."""
        meta_path = Path(meta_path)
        m = json.loads(meta_path.read_text())
        d = meta_path.parent
        f = m["files"]
        return cls(m["scenario"]["name"], m["scenario"], d, d / f["pcap"], d / f["emulator_log"],
                   d / f["client_log"], meta_path, m.get("duration_s", 0.0), m.get("traffic_s", 0.0),
                   m.get("client_rc"), m.get("capture_stats", {}), m.get("link_stats", {}),
                   m.get("kernel_counters", {}), m.get("backends", {}), m.get("problems", []),
                   {k: d / v for k, v in f.items() if k not in ("pcap", "emulator_log", "client_log")})

    @property
    def ok(self) -> bool:
        return not self.problems

    def emulator_records(self) -> list[dict]:
        return _read_jsonl(self.emulator_log)

    def client_records(self) -> list[dict]:
        return _read_jsonl(self.client_log)

    def drops(self) -> list[dict]:
        return [r for r in self.emulator_records() if r.get("action") == "drop" and r.get("reason") != "shutdown"]

    def requests(self) -> list[dict]:
        return [r for r in self.client_records() if r.get("kind") == "request"]

    def connects(self) -> list[dict]:
        return [r for r in self.client_records() if r.get("kind") == "connect"]

    def quic_attempts(self) -> list[dict]:
        """The QUIC app client's connection attempts (tests/lab/quic_apps.py; none for the TCP app)."""
        return [r for r in self.client_records() if r.get("kind") == "quic_attempt"]


def _read_jsonl(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def lab_available() -> tuple[bool, str]:
    """Can this host run the lab? (root, netns, tun, tools)"""
    import os
    if os.geteuid() != 0:
        return False, "needs root (network namespaces)"
    if not Path("/dev/net/tun").exists():
        return False, "no /dev/net/tun"
    for tool in ("ip", "tcpdump", "ethtool", "ping", "sysctl"):
        if not shutil.which(tool):
            return False, f"missing {tool} (run scripts/install-lab-deps.sh)"
    try:
        run(["ip", "netns", "list"], timeout=5)
    except LabError as e:
        return False, str(e)
    return True, ""


# States of a connection that still sends: its teardown is not over (TIME-WAIT sends nothing
# unless the peer's FIN comes again).
_TEARING_DOWN = ("ESTAB", "FIN-WAIT-1", "FIN-WAIT-2", "CLOSE-WAIT", "LAST-ACK", "CLOSING", "SYN-SENT", "SYN-RECV")


def _await_teardown(namespaces, port: int, limit_s: float = 5.0) -> None:
    """Wait until no connection to `port` is still closing at either end. Under loss a FIN or its
    ACK is resent after the client process has exited; stopping the capture and the relay
    before that ends would drop the teardown's last packets (logged as `shutdown` drops) and
    leave the capture without them."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        open_ = False
        for ns in namespaces:
            out = run(["ss", "-Htan"], ns=ns, check=False).stdout
            for line in out.splitlines():
                f = line.split()
                if len(f) >= 5 and f[0] in _TEARING_DOWN and (f[3].endswith(f":{port}") or f[4].endswith(f":{port}")):
                    open_ = True
        if not open_:
            return
        time.sleep(0.02)


def _kernel_counters(ns: str) -> dict:
    """The host's own TCP MIB counters (fresh namespace => this scenario only):
    the sender's classification of its retransmissions (TLP, RTO, fast
    retransmit, SYN retransmits...), a second opinion next to the relay log."""
    out: dict = {}
    for path in ("/proc/net/netstat", "/proc/net/snmp"):
        cp = run(["cat", path], ns=ns, check=False)
        lines = cp.stdout.splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            sect, keys = head.split(":", 1)
            _, nums = vals.split(":", 1)
            if sect not in ("TcpExt", "Tcp", "IpExt", "Udp"):
                continue
            out[sect] = {k: int(v) for k, v in zip(keys.split(), nums.split())
                         if v.lstrip("-").isdigit() and int(v) != 0}
    return out


def _relay_config(sc: Scenario, bottleneck_in_relay: bool) -> dict:
    return {
        "tun": TUN,
        "client_nets": [CLIENT_NET_V4, CLIENT_NET_V6],
        "server_nets": [SERVER_NET_V4, SERVER_NET_V6],
        "seed": sc.seed,
        "delay": {d: {"ms": sc.delay_ms, "jitter_ms": sc.jitter_ms} for d in ("c2s", "s2c")},
        "rules": list(sc.rules),
        "loss": sc.loss,
        "police": sc.police,
        "bottleneck": sc.bottleneck if bottleneck_in_relay else None,
        "max_runtime_s": sc.deadline_s + 60,
    }


def run_scenario(scenario: str | Scenario, out_dir: str | Path, *, strict: bool = False,
                 **overrides) -> ScenarioResult:
    """Run one scenario; files land in out_dir as <name>.{pcap,emulator.jsonl,
    client.jsonl,scenario.json}. Overrides replace Scenario fields (e.g.
    snaplen=128, seed=4). strict=True raises LabError if the run has problems."""
    sc = get(scenario, **overrides) if isinstance(scenario, str) else scenario.replace(**overrides)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = out / f".work-{sc.name}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    res = ScenarioResult(sc.name, sc.to_dict(), out, out / f"{sc.name}.pcap",
                         out / f"{sc.name}.emulator.jsonl", out / f"{sc.name}.client.jsonl",
                         out / f"{sc.name}.scenario.json")
    if sc.app == "quic":
        res.files = {k: out / f"{sc.name}.{suffix}" for k, suffix in
                     (("keylog", "keys.log"), ("client_qlog", "client.qlog"), ("server_log", "server.jsonl"),
                      ("server_qlog", "server.qlog"))}
    elif sc.app == "tcp":
        # apps.py's server: the kernel's tcp_info of every connection at its close
        res.files = {"server_log": out / f"{sc.name}.server.jsonl"}
    elif sc.app != "go":
        raise LabError(f"scenario {sc.name}: unknown app {sc.app!r}")
    for p in (res.pcap, res.emulator_log, res.client_log, res.meta, *res.files.values()):
        p.unlink(missing_ok=True)

    t0 = time.monotonic()
    cleanup_stale()
    use_tbf = False
    if sc.bottleneck:
        if sc.bottleneck_backend == "tbf" or (sc.bottleneck_backend == "auto" and impair.tbf_available()):
            use_tbf = True
        res.backends["bottleneck"] = "tbf" if use_tbf else "relay"
    res.backends["delay_loss_rules"] = "relay"
    if sc.kernel:
        res.backends["kernel"] = "nftables"

    relay_cfg = _relay_config(sc, bottleneck_in_relay=bool(sc.bottleneck) and not use_tbf)
    (work / "relay.json").write_text(json.dumps(relay_cfg))
    relay_log = work / "relay.jsonl"
    extra_records: list[dict] = []
    procs: list[Background] = []
    with Topology(tag=sc.name, host_sysctls=sc.sysctls, offloads=sc.offloads) as topo:
        try:
            relay = Background(python_module("tests.lab.relay", work / "relay.json", relay_log),
                               ns=topo.router, name="relay", ready=r"^READY")
            procs.append(relay)
            relay.wait_ready(10)

            tbf = nft = syn_drop = udp_drop = sampler = None
            if use_tbf:
                b = sc.bottleneck
                tbf = impair.TbfBottleneck(topo.router, b.get("dir", "s2c"), b["rate_kbit"], b["queue_bytes"])
                tbf.apply()
            if sc.kernel and (sc.kernel.get("loss") or sc.kernel.get("police")):
                nft = impair.NftImpairments(topo.router, loss=sc.kernel.get("loss"), police=sc.kernel.get("police"))
                nft.apply()
            if sc.kernel and sc.kernel.get("server_syn_drop"):
                # inside the server namespace, after the capture point (impair.ServerSynDrop)
                syn_drop = impair.ServerSynDrop(topo.server, sc.port, **sc.kernel["server_syn_drop"])
                syn_drop.apply()
            if sc.kernel and sc.kernel.get("server_udp_drop"):
                # QUIC Initial loss / blocked UDP after the capture point (impair.ServerUdpDrop)
                udp_drop = impair.ServerUdpDrop(topo.server, sc.port, **sc.kernel["server_udp_drop"])
                udp_drop.apply()
            for k in (tbf, nft, syn_drop, udp_drop):
                if k:
                    extra_records.append({"ts_ns": time.time_ns(), "action": "kernel_impairment", **k.describe()})

            topo.wait_reachable(sc.family)
            server_addr = topo.addr("server", sc.family)
            plan_extra: dict = {}
            if sc.app == "quic":
                # aioquic server + TLS/TCP fallback on the same port (quic_apps.py); the client
                # trusts the run's self-signed certificate and writes a key log and a qlog
                from .quic_apps import make_cert
                cert, key = make_cert(work)
                (work / "server.json").write_text(json.dumps(
                    {"addr": server_addr, "port": sc.port, "cc": sc.cc, "cert": str(cert), "key": str(key),
                     "log": str(res.files["server_log"]), "qlog": str(res.files["server_qlog"]),
                     **sc.workload.get("server_options", {})}))
                server_cmd = python_module("tests.lab.quic_apps", "server", work / "server.json")
                plan_extra = {"cert": str(cert), "keylog": str(res.files["keylog"]),
                              "qlog": str(res.files["client_qlog"])}
            elif sc.app == "go":
                # quic-go HTTP/3 and Go's HTTP/2 + HTTP/1.1 on one port (go/lab.py)
                from .go.lab import binaries
                bins = binaries()
                (work / "server.json").write_text(json.dumps({"addr": server_addr, "port": sc.port, "bin": bins,
                                                                  "cc": sc.cc}))
                server_cmd = python_module("tests.lab.go.lab", "serve", work / "server.json")
                plan_extra = {"bin": bins}
            else:
                server_cmd = python_module("tests.lab.apps", "server", server_addr, sc.port, sc.cc,
                                           res.files["server_log"])
            server = Background(server_cmd, ns=topo.server, name="server", ready=r"^READY")
            procs.append(server)
            ready = server.wait_ready(10)
            if f"cc={sc.cc}" not in ready:
                raise LabError(f"server congestion control is not {sc.cc}: {ready}")
            res.backends["congestion_control"] = sc.cc

            plan = {"server": server_addr, "port": sc.port, "family": sc.family, "cc": sc.cc,
                    "deadline_s": sc.deadline_s, **sc.workload, **plan_extra}
            (work / "plan.json").write_text(json.dumps(plan))

            # Drop counters are cumulative since the interfaces were created (a link coming up
            # before its peer may count an early IPv6 packet): only the traffic window counts.
            link_before = topo.link_stats()
            cap = Capture(topo.client if sc.vantage == "client" else topo.server, "eth0", res.pcap,
                          snaplen=sc.snaplen, precision=sc.ts_precision)
            cap.start()
            t_traffic = time.monotonic()
            try:
                sampler = impair.QueueSampler(tbf).start() if tbf else None
                extra_records.append({"ts_ns": time.time_ns(), "action": "traffic_start"})
                client_mod = {"quic": "tests.lab.quic_apps", "go": "tests.lab.go.lab"}.get(sc.app, "tests.lab.apps")
                client = Background(python_module(client_mod, "client", work / "plan.json", res.client_log),
                                    ns=topo.client, name="client")
                procs.append(client)
                res.client_rc = client.wait(sc.deadline_s + 15)
                if sc.app != "quic":
                    _await_teardown((topo.client, topo.server), sc.port)
                time.sleep(max(sc.linger_s, 4 * sc.delay_ms / 1000))
                extra_records.append({"ts_ns": time.time_ns(), "action": "traffic_end"})
            finally:
                res.capture_stats = cap.stop()
                res.traffic_s = round(time.monotonic() - t_traffic, 3)
                if sampler:
                    extra_records.extend(sampler.stop())
            # Counters for the traffic window, while the relay still reads the
            # TUN (after it stops, stray packets would count as tun drops).
            res.link_stats = topo.link_stats()
            for iface, st in res.link_stats.items():
                for k in ("rx_dropped", "tx_dropped"):
                    st[f"{k}_before"] = link_before.get(iface, {}).get(k)
            if tbf:
                extra_records.append({"ts_ns": time.time_ns(), "action": "kernel_stats", **tbf.describe(),
                                      **tbf.stats()})
            if nft:
                extra_records.append({"ts_ns": time.time_ns(), "action": "kernel_stats", **nft.describe(),
                                      "counters": nft.stats()})
            for k in (syn_drop, udp_drop):
                if k:
                    extra_records.append({"ts_ns": time.time_ns(), "action": "kernel_stats", **k.describe(),
                                          **k.stats()})
            for role, ns in (("client", topo.client), ("server", topo.server)):
                res.kernel_counters[role] = _kernel_counters(ns)
        finally:
            for p in reversed(procs):
                p.stop()
            if not res.link_stats:
                res.link_stats = topo.link_stats()

    _merge_logs(relay_log, extra_records, res.emulator_log)
    if procs and procs[0].proc.returncode not in (0, None):
        res.problems.append(f"relay exited {procs[0].proc.returncode}: {procs[0].lines['stderr'][-3:]}")
    _check(res)
    res.duration_s = round(time.monotonic() - t0, 3)
    res.meta.write_text(json.dumps(_meta(res), indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)
    if strict and res.problems:
        raise LabError(f"scenario {sc.name}: " + "; ".join(res.problems))
    return res


def _merge_logs(relay_log: Path, extra: list[dict], dest: Path) -> None:
    """One time-ordered ground-truth file: relay decisions plus kernel records."""
    recs = _read_jsonl(relay_log) if relay_log.exists() else []
    recs.extend(extra)
    recs.sort(key=lambda r: r.get("ts_ns", 0))   # stable: equal stamps keep their order
    with open(dest, "w") as f:
        for r in recs:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


def _check(res: ScenarioResult) -> None:
    """Things that would make the ground truth incomplete or the run unusable."""
    if res.client_rc != 0:
        res.problems.append(f"client exited {res.client_rc}")
    if res.capture_stats.get("dropped_by_kernel"):
        res.problems.append(f"tcpdump dropped {res.capture_stats['dropped_by_kernel']} packets")
    for iface, st in res.link_stats.items():
        for k in ("rx_dropped", "tx_dropped"):
            n = (st.get(k) or 0) - (st.get(f"{k}_before") or 0)
            if n:
                res.problems.append(f"{iface} {k}={n} during the traffic (a loss the relay did not log)")
    for r in _read_jsonl(res.emulator_log) if res.emulator_log.exists() else []:
        if r.get("action") == "kernel_stats" and r.get("backend") == "tbf" and r.get("drops"):
            res.problems.append(f"tbf dropped {r['drops']} packets (counted, not logged per packet)")
        if r.get("action") == "drop" and r.get("reason") == "tun_write_error":
            res.problems.append("relay failed to write a packet")


def _meta(res: ScenarioResult) -> dict:
    tool = {}
    for name, cmd in (("tcpdump", ["tcpdump", "--version"]),):
        try:
            tool[name] = subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            pass
    return {
        "scenario": res.params,
        "files": {"pcap": res.pcap.name, "emulator_log": res.emulator_log.name, "client_log": res.client_log.name,
                  **{k: p.name for k, p in res.files.items() if p.exists()}},
        "vantage": f"{res.params.get('vantage', 'server')} eth0 (tcpdump)",
        "backends": res.backends,
        "duration_s": res.duration_s, "traffic_s": res.traffic_s, "client_rc": res.client_rc,
        "capture_stats": res.capture_stats, "link_stats": res.link_stats,
        "kernel_counters": res.kernel_counters, "problems": res.problems,
        "host": {"kernel": platform.release(), **tool},
    }


def load_finished(d: Path, scenarios) -> dict:
    """The finished runs of `scenarios` kept in directory `d` (`--reuse`), by name. A missing
    directory, or one holding none of them, is an error naming it (an empty table would look
    like a scored run)."""
    d = Path(d)
    if not d.is_dir():
        raise SystemExit(f"--reuse {d}: no such directory")
    found = {s.name: ScenarioResult.load(d / f"{s.name}.scenario.json") for s in scenarios
             if (d / f"{s.name}.scenario.json").exists()}
    if not found:
        raise SystemExit(f"--reuse {d}: none of the scenarios ({', '.join(s.name for s in scenarios)}) "
                         f"has a finished run there (<name>.scenario.json)")
    return found


def run_scenarios(scenarios, out_dir: str | Path, *, max_parallel: int = 3, return_exceptions: bool = False,
                  **overrides) -> dict[str, ScenarioResult]:
    """Run several scenarios (names or Scenario objects, distinct names)
    concurrently; each has its own namespaces. With return_exceptions=True a
    failed run maps to its exception instead of aborting the others."""
    items = [(s if isinstance(s, str) else s.name, s) for s in scenarios]
    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(items)))) as ex:
        futs = {name: ex.submit(run_scenario, s, out_dir, **overrides) for name, s in items}
        out = {}
        for name, f in futs.items():
            try:
                out[name] = f.result()
            except Exception as e:   # noqa: BLE001 - handed to the caller
                if not return_exceptions:
                    raise
                out[name] = e
        return out

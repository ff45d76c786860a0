"""Ground-truth lab for tailscope (DESIGN.md §5.2).

Real Linux TCP in network namespaces, impairments injected by a logging relay
(plus tbf / nftables where the kernel has them), captures at the server.

    from tests.lab import run_scenario
    res = run_scenario("tail_loss", tmp_path)
    res.pcap, res.emulator_log, res.client_log, res.params

See tests/lab/README.md for the topology, the impairments and the log formats.
"""
from .harness import ScenarioResult, lab_available, run_scenario, run_scenarios
from .proc import LabError
from .scenarios import QUIC_SCENARIOS, SCENARIOS, Scenario, get

__all__ = ["ScenarioResult", "lab_available", "run_scenario", "run_scenarios", "LabError",
           "SCENARIOS", "QUIC_SCENARIOS", "Scenario", "get"]

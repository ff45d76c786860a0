"""QUIC with a key log, without the lab: two real aioquic endpoints in simulated time
(tests/support/quicsim.py), captured at the server, with the client's SSLKEYLOGFILE. tailscope
decrypts the capture and its per-packet findings are compared with the endpoints' own qlogs (read
as in the lab: tests/lab/quic_keylog_eval.sender_truth). The runs are deterministic (simulated
clock, chosen drops), so the agreement asked for is exact."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("aioquic")

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tailscope import api  # noqa: E402
from tests.lab.quic_keylog_eval import sender_truth  # noqa: E402
from tests.support import quicsim  # noqa: E402


def _lost(events, direction, cause=None):
    return {e["seq"] for e in events if e["signature"] == "quic_packet_lost" and e["direction"] == direction
            and (cause is None or e["cause"] == cause)}


def _seqs(events, signature, direction):
    return {e["seq"] for e in events if e["signature"] == signature and e["direction"] == direction}


def _truth(sim):
    server = sender_truth(sim.server_qlog["traces"][0])
    client = sender_truth(sim.client_qlog["traces"][0])
    return server, client


def _decryptable_packets(sim) -> int:
    """Handshake and 1-RTT packets in the capture: what the server sent and what it received."""
    n = 0
    for e in sim.server_qlog["traces"][0]["events"]:
        if e["name"] in ("transport:packet_sent", "transport:packet_received"):
            n += e["data"]["header"]["packet_type"] in ("handshake", "1RTT")
    return n


@pytest.fixture(scope="module")
def lossy(tmp_path_factory):
    sim = quicsim.run(tmp_path_factory.mktemp("lossy"), requests=3, response_bytes=60_000,
                      drop_s2c={20, 21, 35, 60}, drop_c2s={8, 15})
    return sim, api.tables([sim.pcap], keylogs=[sim.keylog])


def test_decrypts_every_handshake_and_1rtt_packet(lossy):
    sim, t = lossy
    assert sim.responses == 3
    (f,) = t["flows"].to_pylist()
    assert f["quic_keys"] == "decrypted"
    assert f["quic_undecryptable_packets"] == 0
    assert f["quic_decrypted_packets"] == _decryptable_packets(sim)
    assert f["quic_rtt_min_ns"] == pytest.approx(2 * 20e6, abs=2e6)


def test_losses_and_retransmissions_are_the_endpoints_own(lossy):
    sim, t = lossy
    server, client = _truth(sim)
    ev = t["events"].to_pylist()
    assert server.lost and client.lost
    assert _lost(ev, "s2c") == set(server.lost)
    assert _lost(ev, "c2s") == set(client.lost)
    for cause in ("packet_threshold", "time_threshold", "pto"):
        assert _lost(ev, "s2c", cause) == {p for p, c in server.lost.items() if c == cause}, cause
    assert _seqs(ev, "retransmission", "s2c") == server.retx
    (f,) = t["flows"].to_pylist()
    assert f["s2c_quic_lost"] == len(server.lost) and f["c2s_quic_lost"] == len(client.lost)
    assert "quic_loss" in f["signatures"]


def test_each_stream_is_a_query(lossy):
    sim, t = lossy
    qs = sorted(t["queries"].to_pylist(), key=lambda q: q["query_index"])
    assert [q["request_bytes"] for q in qs] == [300] * 3
    assert [q["response_bytes"] for q in qs] == [60_000] * 3
    assert all(q["first_byte"] is not None and q["latency_ns"] > 0 for q in qs)
    # The client acknowledges each whole response before asking again (sequential requests).
    assert all(q["complete"] for q in qs[:2])
    assert sum(q["retransmissions"] for q in qs) == len(_truth(sim)[0].retx)


def test_tail_loss_is_recovered_by_pto(tmp_path):
    base = quicsim.run(tmp_path / "base", requests=1, response_bytes=20_000)
    tail = quicsim.stream_datagrams(base.server_qlog)[-2:]
    sim = quicsim.run(tmp_path / "tail", requests=1, response_bytes=20_000, drop_s2c=set(tail))
    server, _ = _truth(sim)
    assert "pto" in server.lost.values(), server.lost
    ev = api.tables([sim.pcap], keylogs=[sim.keylog])["events"].to_pylist()
    assert {(e["seq"], e["cause"]) for e in ev if e["signature"] == "quic_packet_lost"} == set(server.lost.items())
    assert _seqs(ev, "retransmission", "s2c") == server.retx


@pytest.mark.parametrize("cipher", ["AES_256_GCM_SHA384", "CHACHA20_POLY1305_SHA256"])
def test_other_cipher_suites(tmp_path, cipher):
    sim = quicsim.run(tmp_path, requests=1, response_bytes=10_000, cipher=cipher)
    (f,) = api.tables([sim.pcap], keylogs=[sim.keylog])["flows"].to_pylist()
    assert f["quic_keys"] == "decrypted"
    assert f["quic_decrypted_packets"] == _decryptable_packets(sim) and f["quic_undecryptable_packets"] == 0


def test_without_the_connections_keys_nothing_changes(tmp_path, lossy):
    sim, _ = lossy
    other = tmp_path / "other.keys"
    other.write_text(f"CLIENT_TRAFFIC_SECRET_0 {'ab' * 32} {'01' * 32}\n")
    plain = api.tables([sim.pcap])
    missing = api.tables([sim.pcap], keylogs=[other])
    (fp,), (fm,) = plain["flows"].to_pylist(), missing["flows"].to_pylist()
    assert fp["quic_keys"] is None and fm["quic_keys"] == "not_in_keylog"
    keyed = {c for c in fp if c.startswith(("quic_", "c2s_quic", "s2c_quic"))} - {
        "quic_keys", "quic_version", "quic_ocid", "quic_handshake", "quic_spin", "quic_handshake_rtt_ns",
        "quic_initial_retx", "quic_server_initial_retx", "quic_initial_loss_delay_ns", "quic_spin_rtt_p50_ns",
        "quic_spin_samples", "quic_migrations", "quic_retry", "quic_version_negotiation"}
    assert keyed and all(fp[c] is None and fm[c] is None for c in keyed)
    assert {k: v for k, v in fp.items() if k != "quic_keys"} == {k: v for k, v in fm.items() if k != "quic_keys"}
    assert plain["packets"].equals(missing["packets"])
    assert plain["events"].num_rows == missing["events"].num_rows == 0


def test_cli_keylog_counts_in_the_manifest(tmp_path, lossy):
    import json

    sim, _ = lossy
    other = tmp_path / "other.keys"
    other.write_text("")
    cp = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(sim.pcap), "--out", str(tmp_path / "ds"),
                         "--keylog", str(sim.keylog), "--keylog", str(other), "--json", "--no-checksums"],
                        capture_output=True, text=True, check=True)
    totals = json.loads(cp.stdout)["totals"]
    assert totals["quic_keylog"] == {"decrypted": 1, "not_in_keylog": 0, "unsupported_cipher": 0}
    cp = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(sim.pcap), "--out", str(tmp_path / "ds2"),
                         "--json", "--no-checksums"], capture_output=True, text=True, check=True)
    assert json.loads(cp.stdout)["totals"]["quic_keylog"] is None
    cp = subprocess.run([sys.executable, "-m", "tailscope", "analyze", str(sim.pcap), "--out", str(tmp_path / "ds3"),
                         "--keylog", str(tmp_path / "nope.keys")], capture_output=True, text=True)
    assert cp.returncode != 0 and "--keylog" in cp.stderr

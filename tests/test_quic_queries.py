"""QUIC queries without keys (docs/queries.md#quic-without-keys), without the lab:

* on two real aioquic endpoints in simulated time (tests/support/quicsim.py), captured at the
  server, the queries inferred from the encrypted packets against the per-stream queries the same
  capture gives with the client's key log (the reference): one for one, same start, latency
  within one RTT;
* on the corpus' QUIC captures (tests/corpus): queries where the traces hold requests
  (HTTP/3 clients: Chromium, Firefox, curl; quic-go's interop download), none where they hold a
  handshake and nothing after it.

The lab's scoring against real clients' request logs is tests/test_lab_quic_queries.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tailscope import api  # noqa: E402
from tests.support.corpus import corpus_dir  # noqa: E402

OWD_S = 0.02
RTT_NS = int(2 * OWD_S * 1e9)


def _quic_queries(pcap, keylogs=()):
    t = api.tables([str(pcap)], keylogs=[str(k) for k in keylogs])
    quic = {f["flow_id"] for f in t["flows"].to_pylist() if f["protocol"] == "quic"}
    return sorted((q for q in t["queries"].to_pylist() if q["flow_id"] in quic), key=lambda q: q["start"])


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    pytest.importorskip("aioquic")
    from tests.support import quicsim

    clean = quicsim.run(tmp_path_factory.mktemp("clean"), requests=4, response_bytes=40_000, owd_s=OWD_S)
    # server datagrams lost after the capture point, among them a response's tail
    lossy = quicsim.run(tmp_path_factory.mktemp("lossy"), requests=3, response_bytes=60_000, owd_s=OWD_S,
                        drop_s2c={20, 21, 35, 60}, drop_c2s={8, 15})
    return {"clean": clean, "lossy": lossy}


@pytest.mark.parametrize("name", ["clean", "lossy"])
def test_inferred_queries_match_the_key_logs_streams(sims, name):
    sim = sims[name]
    inferred = _quic_queries(sim.pcap)
    keyed = _quic_queries(sim.pcap, [sim.keylog])
    assert [q["method"] for q in keyed] == ["quic_streams"] * sim.responses
    assert [q["method"] for q in inferred] == ["quic_inferred"] * sim.responses
    assert all(q["confidence"] == 1.0 for q in keyed)
    assert all(0 < q["confidence"] < 1 for q in inferred)
    assert [q["start"] for q in inferred] == [q["start"] for q in keyed], "the same request packets open them"
    for i, k in zip(inferred, keyed):
        if k["complete"]:   # the last stream's ACK may not be in the capture (see the lab's eval)
            assert abs(i["latency_ns"] - k["latency_ns"]) <= RTT_NS, (i, k)
        assert i["response_packets"] >= k["response_packets"], "re-sends are data without keys"
    assert inferred[0]["setup_ns"] and inferred[0]["setup_ns"] > 0


def test_no_stall_where_nothing_stalled(sims):
    assert not any(q["signatures"] for q in _quic_queries(sims["clean"].pcap))


# Traces holding requests after the handshake (MANIFEST.tsv's descriptions): HTTP/3 page and API
# loads by browsers and curl, and the QUIC interop runner's "handshake" test case, which downloads
# a small file (handshake.pcap: quic-go's 42-byte HTTP/0.9 GET, frame 8, and its 1,045-byte answer).
WITH_REQUESTS = [
    "chromium-115.0.5790.110-api-cirrus-com.pcap",
    "chromium-115.0.5790.110-google-de-fragmented.pcap",
    "curl-8.1.2-dev-http3-www-google-de.pcap",
    "firefox-102.13.0esr-blog-cloudflare-com.pcap",
    "quic_win11_firefox_google.pcap",
    "quicv2-http3-443.pcap",
    "handshake.pcap",
]
# Traces with a handshake and nothing after it (tshark's quic.long.packet_type: no short-header
# packets from both sides).
HANDSHAKE_ONLY = [
    "quic-multiple-initial-fragmented-crypto-only-initial.pcap",   # the client's Initials only
    "quic-multiple-initial-fragmented-crypto.pcap",                # Initials and 0-RTT, no answer to them
    "quic-34.pcap",                                                # one Initial exchange
    "quic_interop_V.pcapng",                                       # Initials and Version Negotiation
]


def _corpus(name: str) -> Path:
    return corpus_dir() / "pcaps" / name


@pytest.mark.parametrize("name", WITH_REQUESTS)
def test_corpus_requests_are_found(name):
    qs = _quic_queries(_corpus(name))
    assert qs, f"{name}: no query inferred"
    assert all(q["method"] == "quic_inferred" and q["response_packets"] > 0 for q in qs)
    assert all(q["latency_ns"] >= 0 and q["request_bytes"] > 0 for q in qs)


@pytest.mark.parametrize("name", HANDSHAKE_ONLY)
def test_corpus_handshake_only_traces_have_no_query(name):
    assert _quic_queries(_corpus(name)) == []


def test_handshake_rtt_from_headers_when_the_initials_are_cut():
    """samples/quic_clean.pcap is cut at 128 bytes (no Initial can be decrypted) on a 40 ms path:
    the handshake RTT comes from the packet headers - the server's Initial to the client's first
    Handshake packet - a path RTT plus the client's certificate check (docs/schemas.md)."""
    pcap = Path(_ROOT) / "samples" / "quic_clean.pcap"
    flows = [f for f in api.tables([str(pcap)])["flows"].to_pylist() if f["protocol"] == "quic"]
    assert flows and all(f["sni"] is None for f in flows), "the Initials must be unreadable here"
    for f in flows:
        assert RTT_NS <= f["quic_handshake_rtt_ns"] < 2 * RTT_NS, f

"""QUIC flows against Zeek's quic.log: every QUIC connection Zeek logs is one of our flows with the
same client Initial DCID, server name, first ALPN and version."""
from __future__ import annotations

import pytest

from support import corpus, peers

# Zeek prints QUIC versions its own way; ours are labels.
ZEEK_VERSION = {"1": "v1", "quicv2": "v2", "6b3343cf": "v2"}

# Zeek connections that are not QUIC flows of ours, and why.
NOT_QUIC = {
    ("vector-max-size-crash.pcap", 45492): "frame 1 (1.2.3.4:45492 -> 7.7.7.7:443) is a fuzzer's long header "
    "of the unknown version 0x10010000; Zeek's QUIC analyzer on port 443 logs it (history 'U', "
    "unfamiliar version), tshark dissects the datagram as DNS. A long header of no known version is "
    "not evidence of QUIC, so it stays a UDP flow here.",
}

QUIC_LOGS = [(n, log) for n in corpus.pcap_names() for log in peers.zeek_logs(n, log="quic") if "client_initial_dcid" in log.columns]


def _match(flows, row):
    key = peers.endpoint_key(row["id.orig_h"], row["id.orig_p"], row["id.resp_h"], row["id.resp_p"])
    same_path = [f for f in flows if peers.endpoint_key(f["client_ip"], f["client_port"], f["server_ip"], f["server_port"]) == key]
    by_cid = [f for f in same_path if f["quic_ocid"] == row["client_initial_dcid"]]
    return by_cid or same_path


@pytest.mark.parametrize("name,log", QUIC_LOGS, ids=[f"{n}:{log.test}" for n, log in QUIC_LOGS])
def test_quic_flows_match_zeek_quic_log(name, log, corpus_flows):
    flows = [f for f in corpus_flows.get(name, []) if f["protocol"] == "quic"]
    assert log.rows
    for row in log.rows:
        matched = _match(flows, row)
        if (name, row["id.orig_p"]) in NOT_QUIC:
            assert not matched and row["version"].startswith("unknown"), "documented difference no longer occurs"
            continue
        assert matched, (name, row["id.orig_h"], row["id.orig_p"])
        f = matched[0]
        if row.get("server_name"):
            assert f["sni"] == row["server_name"], (name, row["uid"])
        if row.get("client_protocol"):
            assert (f["alpn"] or "").split(",")[0] == row["client_protocol"], (name, row["uid"])
        if row.get("version") in ZEEK_VERSION:
            assert f["quic_version"] == ZEEK_VERSION[row["version"]], (name, row["version"])


def test_quic_logs_cover_the_corpus():
    assert len({n for n, _ in QUIC_LOGS}) >= 12

"""Exact network copies are duplicates, not reordering (issue 29 item 7): a router's second copy
of a datagram (same IPv4 ID, sequence and length; one TTL lower, as on a SPAN port that sees both
sides of a router) that reaches the capture after later packets of a sender numbering its packets
has an ID behind theirs. The "numbered before" test took such copies for held originals
(`reordered`, out of the duplicate counters); the duplicate test now comes first."""
from __future__ import annotations

import duckdb

from support import pcapgen
from tailscope.jobs.analytics import db
from tailscope.jobs.run.local import AnalyzeOptions, analyze

MS = 1_000_000
T0 = 1_700_000_000 * 10**9
CLIENT, SERVER = "10.0.0.1", "10.0.0.2"
ISN_C, ISN_S = 1_000, 5_000_000
MSS = 1_000


def frame(ms: float, c2s: bool, seq: int, ack: int, flags: int, plen: int = 0, ident: int = 0,
          ttl: int = 64) -> tuple[int, bytes]:
    sport, dport, src, dst = (40_000, 443, CLIENT, SERVER) if c2s else (443, 40_000, SERVER, CLIENT)
    l4 = pcapgen.tcp(sport, dport, seq, ack, flags, payload=b"x" * plen)
    return T0 + int(ms * MS), pcapgen.ethernet(pcapgen.ipv4(src, dst, 6, l4, ident=ident, ttl=ttl))


def capture(copies: dict[int, int]) -> list[tuple[int, bytes]]:
    """A client-side capture (40 ms RTT): a 100-byte request, a 12-segment response from a server
    numbering its packets (IDs 200, 201, ...; TTL 128), each segment in `copies` repeated by the
    network (TTL 127, same ID) after that many later segments, before the client's ACKs."""
    out = [frame(0, True, ISN_C, 0, 0x02, ident=10),
           frame(40, False, ISN_S, ISN_C + 1, 0x12, ident=199, ttl=128),
           frame(40.1, True, ISN_C + 1, ISN_S + 1, 0x10, ident=11),
           frame(41, True, ISN_C + 1, ISN_S + 1, 0x18, 100, ident=12)]
    late: dict[int, list[int]] = {}
    for i in range(12):
        seq = ISN_S + 1 + i * MSS
        out.append(frame(81 + i * 0.1, False, seq, ISN_C + 101, 0x18, MSS, ident=200 + i, ttl=128))
        if i in copies:
            late.setdefault(i + copies[i], []).append(i)
        for j in late.pop(i, []):
            out.append(frame(81 + i * 0.1 + 0.05, False, ISN_S + 1 + j * MSS, ISN_C + 101, 0x18, MSS,
                             ident=200 + j, ttl=127))
    # the client's ACKs leave after the burst (a copy of data already acknowledged would be
    # `spurious` by Wireshark's flag, a case of its own)
    for i in range(1, 12, 2):
        out.append(frame(83 + i * 0.01, True, ISN_C + 101, ISN_S + 1 + (i + 1) * MSS, 0x10, ident=13 + i))
    return out


def test_network_copies_after_later_packets_are_duplicates(tmp_path):
    pcap = pcapgen.write_pcap(tmp_path / "copies.pcap", capture({2: 3, 5: 4, 6: 2}))
    out = analyze([str(pcap)], tmp_path / "ds", AnalyzeOptions(progress=False)).out
    con = duckdb.connect(str(db.build(out)), read_only=True)
    try:
        causes = con.execute("SELECT ttl, retx_cause, count(*) FROM packets WHERE direction = 's2c' "
                             "AND payload_len > 0 GROUP BY ALL ORDER BY ALL").fetchall()
        flows = con.execute("SELECT s2c_reordered, s2c_network_duplicates, s2c_retx_packets FROM flows").fetchall()
    finally:
        con.close()
    assert causes == [(127, "network_duplicate", 3), (128, None, 12)]
    assert flows == [(0, 3, 3)]

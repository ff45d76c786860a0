"""Write tests/repro/held_original_fast_retx.pcap: a server-side capture on a 200 ms path, no TCP
timestamps and no SACK (neither SYN offers them). The server sends a 10-segment response; the
network holds segment 2 for 30 ms, so the client's ACKs of segments 3-9 repeat the ACK of
segment 1 (seven duplicate ACKs) and the server fast-retransmits segment 2 after the third. That
resend is lost on the way; the held original reaches the client 30 ms late, and the client's ACK
of the whole response reaches the capture 29.5 ms after the resend left - sooner than any ACK of
the resend could (a round trip, 200 ms). The resend was spurious; nothing in the capture but that
timing says so (no D-SACK, no timestamp echo). Usage: python make_held_original.py [OUT]"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from support import pcapgen  # noqa: E402

MS = 1_000_000
T0 = 1_700_000_000 * 10**9
CLIENT, SERVER = ("192.0.2.10", 51000), ("198.51.100.20", 443)
ISN_C, ISN_S, MSS = 100_000, 900_000, 1000


def main(out: Path) -> None:
    ids = {True: 4000, False: 7000}
    frames = []

    def pkt(ms: float, c2s: bool, seq: int, ack: int, flags: int, plen: int = 0, options: bytes = b"") -> None:
        (src, sport), (dst, dport) = (CLIENT, SERVER) if c2s else (SERVER, CLIENT)
        ids[c2s] += 1
        l4 = pcapgen.tcp(sport, dport, seq, ack, flags, 64240, options, b"\x17" * plen)
        frames.append((T0 + int(ms * MS), pcapgen.ethernet(pcapgen.ipv4(src, dst, 6, l4, ident=ids[c2s]))))

    mss = b"\x02\x04" + MSS.to_bytes(2, "big")
    pkt(0, True, ISN_C, 0, 0x02, options=mss)                      # SYN (no SACK-permitted, no TS)
    pkt(0.1, False, ISN_S, ISN_C + 1, 0x12, options=mss)           # SYN-ACK
    pkt(200.1, True, ISN_C + 1, ISN_S + 1, 0x10)                   # ACK: RTT 200 ms
    pkt(200.2, True, ISN_C + 1, ISN_S + 1, 0x18, 100)              # request
    s, c = ISN_S + 1, ISN_C + 101
    for i in range(10):                                            # response, 10 segments
        pkt(201 + i * 0.1, False, s + i * MSS, c, 0x18, MSS)
    # the client's ACKs, 200 ms after each segment left: segments 0 and 1, then one duplicate
    # ACK per segment 3-9 (segment 2 is held 30 ms on the way)
    pkt(401.1, True, c, s + 2 * MSS, 0x10)
    for i in range(3, 10):
        pkt(401 + i * 0.1, True, c, s + 2 * MSS, 0x10)
        if i == 5:                                                 # third duplicate: fast retransmit
            pkt(401.55, False, s + 2 * MSS, c, 0x18, MSS)          # (lost on the way)
    pkt(431.05, True, c, s + 10 * MSS, 0x10)                       # the held original arrived: ACK all
    pkt(600, True, c, s + 10 * MSS, 0x11)                          # client FIN
    pkt(600.1, False, s + 10 * MSS, c + 1, 0x11)                   # server FIN
    pkt(800.1, True, c + 1, s + 10 * MSS + 1, 0x10)
    pcapgen.write_pcap(out, frames)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "held_original_fast_retx.pcap")

"""Per-connection state the relay needs to aim its drop rules.

The relay must recognise "the 1st SYN of connection 0", "the last segment of
response 2" or "the 5th segment of request 1" *as the packet passes*. It can,
because the lab's application protocol (apps.py) is framed: every message is a
16-byte header carrying its body length. Tracking the byte stream in each
direction therefore tells where each message starts and ends, without waiting
to see the next packet.

New data reaches the relay in order (client->relay and server->relay are
clean veths), so a segment is a first transmission iff it starts at or beyond
the highest byte seen in its direction; anything else is a retransmission.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .packet import Packet

HEADER = struct.Struct("!2sHIII")   # magic, flags, msg id, body length, response length
HEADER_LEN = HEADER.size            # 16
MAGIC_REQUEST = b"TQ"
MAGIC_RESPONSE = b"TR"
UNFRAMED = 1 << 62              # next_msg value once a stream is not ours


def seq_diff(a: int, b: int) -> int:
    """a - b in 32-bit sequence space."""
    d = (a - b) & 0xFFFFFFFF
    return d - (1 << 32) if d >= (1 << 31) else d


@dataclass
class Stream:
    """One direction of a TCP connection."""
    isn: int | None = None
    high: int = 0                   # highest stream offset seen (exclusive end)
    mss: int = 0                    # largest payload seen (== MSS once the stream has bulk data)
    next_msg: int = 0               # stream offset where the next message header starts
    hdr_buf: bytes = b""            # header bytes carried over a segment boundary
    messages: list = field(default_factory=list)   # [start, end) offsets per message
    new_segs: dict = field(default_factory=dict)   # msg index -> first transmissions seen
    acked_msgs: int = 0             # messages whose last byte the other side has acknowledged

    def feed_new(self, start: int, payload: bytes) -> None:
        """Account a first transmission covering [start, start+len(payload)):
        parse every message header that begins (or finishes) inside it."""
        end = start + len(payload)
        while self.next_msg < end:
            hdr_pos = self.next_msg + len(self.hdr_buf)   # next header byte we need
            if hdr_pos < start:
                # We missed bytes (cannot happen on the lab's clean feeds);
                # stop framing rather than guess.
                self.next_msg = UNFRAMED
                return
            if hdr_pos >= end:
                break
            need = HEADER_LEN - len(self.hdr_buf)
            self.hdr_buf += payload[hdr_pos - start:hdr_pos - start + need]
            if len(self.hdr_buf) < HEADER_LEN:
                break                                    # header continues in the next segment
            magic, _flags, _mid, body_len, _resp = HEADER.unpack(self.hdr_buf)
            self.hdr_buf = b""
            if magic not in (MAGIC_REQUEST, MAGIC_RESPONSE):
                self.next_msg = UNFRAMED                 # not our protocol: no message rules
                return
            msg_end = self.next_msg + HEADER_LEN + body_len
            self.messages.append([self.next_msg, msg_end])
            self.next_msg = msg_end

    def message_of(self, offset: int) -> int | None:
        """Index of the message containing stream byte `offset`."""
        for i in range(len(self.messages) - 1, -1, -1):
            s, e = self.messages[i]
            if s <= offset < e:
                return i
            if e <= offset:
                break
        return None


@dataclass
class Conn:
    index: int
    client: tuple
    server: tuple
    proto: str
    syn_seen: int = 0
    synack_seen: int = 0
    streams: dict = field(default_factory=lambda: {"c2s": Stream(), "s2c": Stream()})
    closed: bool = False
    udp_index: int | None = None    # UDP flows: ordinal among the relay's UDP flows (0-based)
    datagrams: dict = field(default_factory=lambda: {"c2s": 0, "s2c": 0})


@dataclass
class SegInfo:
    """What the relay knows about one packet; copied into its log record."""
    conn: int | None = None
    rel_seq: int | None = None
    rel_ack: int | None = None
    retx: bool = False
    syn_n: int | None = None        # 1-based transmission number of a SYN / SYN-ACK
    msg: int | None = None          # message index in this direction (request/response number)
    seg: int | None = None          # 1-based index of a first transmission within its message
    msg_last: bool = False          # segment ends exactly at its message's end
    msg_remaining: int | None = None  # bytes of the message after this segment
    mss: int = 0                    # largest payload seen in this direction (not logged)
    udp_flow: int | None = None     # UDP: ordinal of the flow among UDP flows (0-based)
    dgram_n: int | None = None      # UDP: 1-based datagram number in this direction of the flow
    quic: str | None = None         # UDP: QUIC header of the datagram's first packet (quic_first_type)
    acked_msg: int | None = None    # TCP ACK: the other direction's message whose end it acknowledges first

    def as_log(self) -> dict:
        d = {"conn": self.conn, "rel_seq": self.rel_seq, "rel_ack": self.rel_ack}
        if self.udp_flow is not None:
            d.update({"udp_flow": self.udp_flow, "dgram_n": self.dgram_n, "quic": self.quic})
        if self.syn_n is not None:
            d["syn_n"] = self.syn_n
        if self.rel_seq is not None and self.conn is not None:
            d["retx"] = self.retx
        if self.acked_msg is not None:
            d["acked_msg"] = self.acked_msg
        if self.msg is not None:
            d["msg"] = self.msg
            d["msg_last"] = self.msg_last
            if self.seg is not None:
                d["seg"] = self.seg
        return d


def quic_first_type(payload: bytes) -> str | None:
    """The unprotected part of a QUIC header (RFC 8999/9000/9369): the long-header packet type of
    the datagram's first packet (`initial`, `0rtt`, `handshake`, `retry`), `vn` (version 0),
    `short` (1-RTT), or None when the datagram does not look like QUIC. Header protection masks
    only the low bits of the first byte, so this needs no keys."""
    if len(payload) < 1:
        return None
    b = payload[0]
    if not b & 0x80:
        return "short" if b & 0x40 else None
    if len(payload) < 5:
        return None
    version = int.from_bytes(payload[1:5], "big")
    if version == 0:
        return "vn"
    ty = (b >> 4) & 0x03
    if version == 0x6B3343CF:    # QUIC v2 (RFC 9369) rotates the type codes
        return ("retry", "initial", "0rtt", "handshake")[ty]
    return ("initial", "0rtt", "handshake", "retry")[ty]


class FlowTable:
    def __init__(self):
        self.conns: dict[tuple, Conn] = {}
        self.count = 0
        self.udp_count = 0

    def classify(self, pkt: Packet, direction: str, raw: bytes) -> SegInfo:
        if pkt.sport is None or direction not in ("c2s", "s2c"):
            return SegInfo()
        if direction == "c2s":
            key = (pkt.proto, pkt.src, pkt.sport, pkt.dst, pkt.dport)
        else:
            key = (pkt.proto, pkt.dst, pkt.dport, pkt.src, pkt.sport)
        conn = self.conns.get(key)
        if not pkt.is_tcp:
            if conn is None:
                conn = self._new(key, "udp")
                conn.udp_index = self.udp_count
                self.udp_count += 1
            conn.datagrams[direction] += 1
            payload = raw[pkt.payload_off:pkt.payload_off + min(pkt.payload_len, 8)] if pkt.payload_off else b""
            return SegInfo(conn=conn.index, udp_flow=conn.udp_index, dgram_n=conn.datagrams[direction],
                           quic=quic_first_type(payload) if pkt.proto_name == "udp" else None)

        syn_only = pkt.syn and not pkt.ackf
        if syn_only and (conn is None or (conn.closed and conn.streams["c2s"].isn != pkt.seq)):
            conn = self._new(key, "tcp")   # a new connection (also: port reuse after close)
        if conn is None:
            return SegInfo()               # mid-stream packet of a connection we never saw open
        st = conn.streams[direction]
        other = conn.streams["s2c" if direction == "c2s" else "c2s"]
        info = SegInfo(conn=conn.index)
        if pkt.syn:
            if st.isn is None or st.isn != pkt.seq:
                st.isn = pkt.seq
            if direction == "c2s":
                conn.syn_seen += 1
                info.syn_n = conn.syn_seen
            else:
                conn.synack_seen += 1
                info.syn_n = conn.synack_seen
        if pkt.fin or pkt.rst:
            conn.closed = True
        if st.isn is None:
            return info
        info.rel_seq = seq_diff(pkt.seq, st.isn)
        if pkt.ackf and other.isn is not None:
            info.rel_ack = seq_diff(pkt.ack, other.isn)
            # the first ACK of the end of a message the other side sent (a response's "final ACK")
            msgs = other.messages
            while other.acked_msgs < len(msgs) and info.rel_ack - 1 >= msgs[other.acked_msgs][1]:
                info.acked_msg = other.acked_msgs
                other.acked_msgs += 1
        if pkt.payload_len == 0:
            return info
        start = info.rel_seq - 1           # stream offset of the first payload byte (SYN takes seq 0)
        end = start + pkt.payload_len
        info.retx = start < st.high
        st.mss = max(st.mss, pkt.payload_len)
        info.mss = st.mss
        if not info.retx:
            payload = raw[pkt.payload_off:pkt.payload_off + pkt.payload_len]
            st.feed_new(start, payload)
            st.high = end
        msg = st.message_of(end - 1)
        if msg is not None:
            m_start, m_end = st.messages[msg]
            info.msg = msg
            info.msg_last = end == m_end
            info.msg_remaining = max(0, m_end - end)
            if not info.retx:
                st.new_segs[msg] = st.new_segs.get(msg, 0) + 1
                info.seg = st.new_segs[msg]
        return info

    def _new(self, key: tuple, proto: str) -> Conn:
        conn = Conn(self.count, (key[1], key[2]), (key[3], key[4]), proto)
        self.count += 1
        self.conns[key] = conn
        return conn

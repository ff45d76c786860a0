//! Per-packet signature tags: a bit mask in `packets.tags` and the readable names in
//! `packets.tag_names`. Names follow Wireshark's `tcp.analysis.*` vocabulary where one exists;
//! every tag is defined in docs/signatures.md (the one place rules are explained).

pub const RETRANSMISSION: u32 = 1 << 0;
pub const FAST_RETRANSMISSION: u32 = 1 << 1;
pub const SPURIOUS_RETRANSMISSION: u32 = 1 << 2;
pub const OUT_OF_ORDER: u32 = 1 << 3;
pub const LOST_SEGMENT: u32 = 1 << 4;
pub const ACK_LOST_SEGMENT: u32 = 1 << 5;
pub const DUPLICATE_ACK: u32 = 1 << 6;
pub const ZERO_WINDOW: u32 = 1 << 7;
pub const ZERO_WINDOW_PROBE: u32 = 1 << 8;
pub const ZERO_WINDOW_PROBE_ACK: u32 = 1 << 9;
pub const WINDOW_FULL: u32 = 1 << 10;
pub const WINDOW_UPDATE: u32 = 1 << 11;
pub const KEEP_ALIVE: u32 = 1 << 12;
pub const KEEP_ALIVE_ACK: u32 = 1 << 13;
pub const SYN_RETRANSMISSION: u32 = 1 << 14;
pub const SYNACK_RETRANSMISSION: u32 = 1 << 15;
/// Retransmission causes (Tstat classes, refined with RFC 8985 and RFC 6298): exactly one is set
/// on every packet tailscope judges a retransmission. (`retransmission` itself is Wireshark's
/// flag: a packet can carry it without a cause when our judgement differs.)
pub const RETX_RTO: u32 = 1 << 16;
pub const RETX_FAST: u32 = 1 << 17;
pub const RETX_TLP: u32 = 1 << 18;
pub const RETX_SPURIOUS: u32 = 1 << 19;
pub const RETX_NETWORK_DUPLICATE: u32 = 1 << 20;
pub const RETX_UNKNOWN: u32 = 1 << 21;
/// The retransmission recovered the loss of the last segment(s) of a burst (Flach et al. 2013).
pub const TAIL_LOSS: u32 = 1 << 22;
/// Genuine reordering: a hole filled sooner than any retransmission could have filled it.
pub const REORDERED: u32 = 1 << 23;
/// A QUIC Initial re-sending its first flight (CRYPTO from offset 0): Initial loss.
pub const QUIC_INITIAL_RETRANSMISSION: u32 = 1 << 24;
/// A QUIC packet on a new path of a known connection (NAT rebinding or migration).
pub const QUIC_MIGRATION: u32 = 1 << 25;
/// With a key log: this packet (an ACK reaching its sender, or a send after the sender's loss
/// timer or probe timeout) made a QUIC sender declare earlier packets lost (RFC 9002).
pub const QUIC_LOSS_DETECTED: u32 = 1 << 26;
/// QUIC retransmission causes (with a key log; `retransmission` is set too): the re-sent STREAM
/// data's packet was lost by packet threshold, by time threshold, or the re-send is a PTO probe.
pub const RETX_PACKET_THRESHOLD: u32 = 1 << 27;
pub const RETX_TIME_THRESHOLD: u32 = 1 << 28;
pub const RETX_PTO: u32 = 1 << 29;
/// With a key log: this ACK acknowledges a QUIC packet its sender had declared lost.
pub const QUIC_SPURIOUS_ACK: u32 = 1 << 30;
/// A TCP sequence number tailscope does not trust (damaged): the segment starts far beyond the
/// window its receiver advertised, or is a copy of the sender's previous packet (same IPv4 ID)
/// ending elsewhere. It does not move the sequence mark our retransmission judgement uses.
pub const BAD_SEQ: u32 = 1 << 31;

pub const ALL: [(u32, &str); 32] = [
    (RETRANSMISSION, "retransmission"),
    (FAST_RETRANSMISSION, "fast_retransmission"),
    (SPURIOUS_RETRANSMISSION, "spurious_retransmission"),
    (OUT_OF_ORDER, "out_of_order"),
    (LOST_SEGMENT, "lost_segment"),
    (ACK_LOST_SEGMENT, "ack_lost_segment"),
    (DUPLICATE_ACK, "duplicate_ack"),
    (ZERO_WINDOW, "zero_window"),
    (ZERO_WINDOW_PROBE, "zero_window_probe"),
    (ZERO_WINDOW_PROBE_ACK, "zero_window_probe_ack"),
    (WINDOW_FULL, "window_full"),
    (WINDOW_UPDATE, "window_update"),
    (KEEP_ALIVE, "keep_alive"),
    (KEEP_ALIVE_ACK, "keep_alive_ack"),
    (SYN_RETRANSMISSION, "syn_retransmission"),
    (SYNACK_RETRANSMISSION, "synack_retransmission"),
    (RETX_RTO, "retx_rto"),
    (RETX_FAST, "retx_fast"),
    (RETX_TLP, "retx_tlp"),
    (RETX_SPURIOUS, "retx_spurious"),
    (RETX_NETWORK_DUPLICATE, "retx_network_duplicate"),
    (RETX_UNKNOWN, "retx_unknown"),
    (TAIL_LOSS, "tail_loss"),
    (REORDERED, "reordered"),
    (QUIC_INITIAL_RETRANSMISSION, "quic_initial_retransmission"),
    (QUIC_MIGRATION, "quic_migration"),
    (QUIC_LOSS_DETECTED, "quic_loss_detected"),
    (RETX_PACKET_THRESHOLD, "retx_packet_threshold"),
    (RETX_TIME_THRESHOLD, "retx_time_threshold"),
    (RETX_PTO, "retx_pto"),
    (QUIC_SPURIOUS_ACK, "quic_spurious_ack"),
    (BAD_SEQ, "bad_seq"),
];

/// Bit i of a mask is `ALL[i]` (the packets view, sql/staging/010_packets.sql, names the bits by position).
const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        assert!(ALL[i].0 == 1 << i);
        i += 1;
    }
};

/// Tags that make an events row of their own name (besides the `retransmission` row every
/// packet with a cause gets): loss episodes, sequence anomalies, window and QUIC path events.
pub const EVENTS: u32 = SYN_RETRANSMISSION
    | SYNACK_RETRANSMISSION
    | TAIL_LOSS
    | OUT_OF_ORDER
    | LOST_SEGMENT
    | BAD_SEQ
    | ZERO_WINDOW
    | QUIC_INITIAL_RETRANSMISSION
    | QUIC_MIGRATION;
/// Of those, the loss episodes a retransmission reveals: their rows carry its cause and delay.
pub const LOSS_EPISODES: u32 = SYN_RETRANSMISSION | SYNACK_RETRANSMISSION | TAIL_LOSS;

pub fn names(mask: u32) -> impl Iterator<Item = &'static str> {
    ALL.iter().filter(move |(bit, _)| mask & bit != 0).map(|(_, n)| *n)
}

/// Retransmission causes and their names, in the order `cause_name` looks for them.
pub const CAUSES: [(u32, &str); 9] = [
    (RETX_RTO, "rto"),
    (RETX_FAST, "fast_retransmit"),
    (RETX_TLP, "tlp"),
    (RETX_SPURIOUS, "spurious"),
    (RETX_NETWORK_DUPLICATE, "network_duplicate"),
    (RETX_PACKET_THRESHOLD, "packet_threshold"),
    (RETX_TIME_THRESHOLD, "time_threshold"),
    (RETX_PTO, "pto"),
    (RETX_UNKNOWN, "unknown"),
];

/// Every cause bit: the bits of `CAUSES`, so the list stays the one place they are named.
const CAUSE_BITS: u32 = {
    let mut bits = 0;
    let mut i = 0;
    while i < CAUSES.len() {
        bits |= CAUSES[i].0;
        i += 1;
    }
    bits
};

/// The index in `CAUSES` of a tag mask's retransmission cause.
pub fn cause_index(mask: u32) -> Option<usize> {
    if mask & CAUSE_BITS == 0 {
        return None;
    }
    CAUSES.iter().position(|(bit, _)| mask & bit != 0)
}

/// The retransmission cause of a tag mask, by name.
pub fn cause_name(mask: u32) -> Option<&'static str> {
    cause_index(mask).map(|i| CAUSES[i].1)
}

//! Wireshark's sequence analysis (`tcp_analyze_sequence_number` in packet-tcp.c), in its order,
//! so that our peer-compatible tags (`tcp.analysis.*`) mean what Wireshark's mean. Our own
//! judgement of the same segment follows in `retransmission`.

use tailscope_parsers::decode::{TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

use super::direction::sender_and_peer;
use super::{Segment, TcpState};
use crate::seq_number::SeqNumber;
use crate::tags::*;

/// Out-of-order threshold when no handshake RTT is known (Wireshark's 3 ms).
pub(super) const OOO_DEFAULT_NS: i64 = 3_000_000;
/// Wireshark calls a retransmission "fast" within 20 ms of the dup ACK that triggered it.
pub(super) const FAST_RETX_WINDOW_NS: i64 = 20_000_000;

impl TcpState {
    /// The Wireshark tags of one segment, updating the duplicate-ACK state as Wireshark does.
    pub(super) fn wireshark_tags(&mut self, s: &Segment<'_>) -> u32 {
        let (seq, ack, flags, window, seglen, now) = (s.seq, s.ack, s.flags, s.window, s.seglen, s.now);
        let sfr = TCP_SYN | TCP_FIN | TCP_RST;
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        let mut ta = 0u32;
        if seglen == 1 && seq == fwd.nextseq && rev.window == 0 {
            ta |= ZERO_WINDOW_PROBE;
        } else {
            if window == 0 && flags & sfr == 0 {
                ta |= ZERO_WINDOW;
            }
            if fwd.nextseq != 0 && SeqNumber(seq).after(fwd.nextseq) && flags & TCP_RST == 0 {
                ta |= LOST_SEGMENT;
            }
            if seglen <= 1 && seq == fwd.nextseq.wrapping_sub(1) && flags & sfr == 0 {
                ta |= KEEP_ALIVE;
            }
            let same_seq_ack = seq == fwd.nextseq && ack == fwd.lastack && flags & sfr == 0;
            if seglen == 0 && window != 0 && window != fwd.window && same_seq_ack {
                ta |= WINDOW_UPDATE;
            }
            if seglen > 0 && flags & sfr == 0 {
                if let Some(shift) = s.peer_window_shift {
                    let edge = rev.lastack.wrapping_add(rev.window.wrapping_shl(u32::from(shift)));
                    if seq.wrapping_add(seglen) == edge {
                        ta |= WINDOW_FULL;
                    }
                }
            }
            // Keep-alive ACK and zero-window-probe ACK end the forward checks (Wireshark's
            // `goto finished_fwd`), so they are never also duplicate ACKs.
            if seglen == 0
                && window != 0
                && window == fwd.window
                && same_seq_ack
                && rev.lastsegmentflags & KEEP_ALIVE != 0
            {
                ta |= KEEP_ALIVE_ACK;
            } else if seglen == 0
                && window == 0
                && window == fwd.window
                && same_seq_ack
                && rev.lastsegmentflags & ZERO_WINDOW_PROBE != 0
            {
                ta |= ZERO_WINDOW_PROBE_ACK;
            } else if seglen == 0 && window != 0 && window == fwd.window && same_seq_ack {
                fwd.dupacknum = if fwd.dupacknum == -1 { 1 } else { fwd.dupacknum + 1 };
                fwd.last_dupack_ts = Some(now);
                ta |= DUPLICATE_ACK;
            }
        }
        // finished_fwd:
        if ack != fwd.lastack {
            fwd.dupacknum = 0;
        }
        if rev.maxseqtobeacked != 0 && SeqNumber(ack).after(rev.maxseqtobeacked) && flags & TCP_ACK != 0 {
            if SeqNumber(rev.maxseqtobeacked).before(rev.nextseq) {
                rev.maxseqtobeacked = rev.nextseq;
                ta |= ACK_LOST_SEGMENT;
            } else {
                if rev.dupacknum == 0 {
                    ta |= ACK_LOST_SEGMENT;
                }
                rev.dupacknum = -1;
            }
        }
        if (seglen > 0 || s.syn_fin) && ta & KEEP_ALIVE == 0 {
            let mut not_advanced = fwd.nextseq != 0 && SeqNumber(seq).before(fwd.nextseq);
            if seglen > 1 && fwd.nextseq.wrapping_sub(1) == seq {
                not_advanced = false;
            }
            if seglen > 0 && rev.lastack != 0 && SeqNumber(seq.wrapping_add(seglen)).at_or_before(rev.lastack) {
                ta |= SPURIOUS_RETRANSMISSION | RETRANSMISSION;
            } else {
                let ooo_thres = if self.first_rtt_ns > 0 { self.first_rtt_ns } else { OOO_DEFAULT_NS };
                let next_of_this = seq.wrapping_add(seglen).wrapping_add(u32::from(s.syn_fin));
                // tshark 4.0 lets a fast retransmission take precedence over out-of-order.
                if not_advanced
                    && rev.dupacknum >= 2
                    && rev.lastack == seq
                    && now - rev.lastack_ts < FAST_RETX_WINDOW_NS
                {
                    ta |= FAST_RETRANSMISSION | RETRANSMISSION;
                } else if not_advanced && now - fwd.nextseq_ts < ooo_thres && fwd.nextseq != next_of_this {
                    ta |= OUT_OF_ORDER;
                } else if not_advanced {
                    ta |= RETRANSMISSION;
                }
            }
        }
        ta
    }
}

//! The handshake: SYN and SYN-ACK repeats (SYN loss, SYN-ACK loss and what each cost), the
//! server's initial sequence numbers (a server answering repeated SYNs with new ISNs), the
//! handshake RTT, Wireshark's initial RTT, and where the capture sits (the vantage).

use tailscope_parsers::decode::{TCP_ACK, TCP_SYN};

use super::{Segment, TcpState};
use crate::seq_number::SeqNumber;
use crate::tags::*;

/// Where the capture sits, from the handshake: next to the server, the SYN-ACK follows the SYN
/// at once and the client's ACK a round trip later; next to the client, the other way round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Vantage {
    #[default]
    Unknown,
    Server,
    Client,
}

impl Vantage {
    pub fn name(self) -> &'static str {
        match self {
            Vantage::Unknown => "unknown",
            Vantage::Server => "server",
            Vantage::Client => "client",
        }
    }
    /// Direction index (0 = c2s, 1 = s2c) of the segments sent by the host next to the capture.
    pub(super) fn local_dir(self) -> Option<usize> {
        match self {
            Vantage::Server => Some(1),
            Vantage::Client => Some(0),
            Vantage::Unknown => None,
        }
    }
}

impl TcpState {
    pub(super) fn note_syn(&mut self, dir: usize, flags: u16, seq: u32, now: i64, ta: &mut u32) {
        let is_synack = flags & TCP_ACK != 0;
        if !is_synack && dir == 0 {
            if self.first_syn_ts.is_some() && self.syn_seq == Some(seq) {
                *ta |= SYN_RETRANSMISSION;
                self.stats.syn_retx += 1;
                // No SYN-ACK sent yet: the server never answered the earlier SYN, so it (or its
                // answer) was lost after the vantage point. Once a SYN-ACK went out, a repeated
                // SYN means the client did not get it: that is SYN-ACK loss, counted there.
                if self.first_synack_ts.is_none() {
                    self.stats.syn_loss_delay_ns = now - self.first_syn_ts.unwrap_or(now);
                }
            } else if self.first_syn_ts.is_none() {
                self.first_syn_ts = Some(now);
                self.syn_seq = Some(seq);
            }
            self.last_syn_ts = Some(now);
        } else if is_synack && dir == 1 {
            if self.server_isn.is_none() {
                self.server_isn = Some(seq);
            }
            if !self.synack_isns.contains(&Some(seq)) {
                self.synack_isns.rotate_right(1);
                self.synack_isns[0] = Some(seq);
            }
            if let Some(first) = self.first_synack_ts {
                *ta |= SYNACK_RETRANSMISSION;
                self.stats.synack_retx += 1;
                self.stats.synack_loss_delay_ns = now - first;
            } else {
                self.first_synack_ts = Some(now);
                if let Some(s) = self.last_syn_ts {
                    self.stats.syn_synack_ns = Some(now - s);
                }
            }
            self.last_synack_ts = Some(now);
        }
    }

    /// The client acknowledges the ISN + 1 of a server SYN-ACK other than the one the server
    /// direction's sequence state counts from (and no byte of that state's sequence space): the
    /// client took that SYN-ACK, so the server's data starts there. Restart our judgement's
    /// sequence state for the server's direction (Wireshark's, for the tags, goes on).
    pub(super) fn restart_on_new_isn(&mut self, ack: u32, now: i64) {
        let isn = ack.wrapping_sub(1);
        let Some(current) = self.server_isn else { return };
        if isn == current || !self.synack_isns.contains(&Some(isn)) {
            return;
        }
        let d = &mut self.dir[1];
        if SeqNumber(ack).after(current) && SeqNumber(ack).at_or_before(d.high) {
            return; // it acknowledges bytes of the current sequence space
        }
        self.server_isn = Some(isn);
        d.high = ack;
        d.acked_ahead_ts = None;
        d.segments.retain_seq(isn); // the SYN-ACK it answers
        d.holes.clear();
        d.sack_holes.clear();
        d.peer_ack_high = None;
        d.recent_retx.clear();
        d.recovery = None;
        d.tail_episode = false;
        // The handshake's recovery (SYN-ACKs repeated) ends here, as the ACK of a repeated
        // SYN-ACK with the same ISN would end it.
        if let Some(since) = d.recovery_since.take() {
            self.stats.recovery_ns += now - since;
        }
    }

    /// Wireshark's initial RTT (its out-of-order threshold): the most recent SYN (without ACK) to
    /// the first segment that carries an ACK and no SYN: the whole handshake. Then our handshake
    /// RTT (SYN-ACK to the client's ACK) and, from both halves, the vantage.
    pub(super) fn note_handshake_progress(&mut self, s: &Segment<'_>) {
        let (flags, now) = (s.flags, s.now);
        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
            self.mru_syn_ts = Some(now);
        } else if s.is_plain_ack() && self.first_rtt_ns == 0 {
            if let Some(syn) = self.mru_syn_ts {
                self.first_rtt_ns = (now - syn).max(1);
            }
        }
        if !self.handshake_done && s.is_plain_ack() && s.dir == 0 {
            if let Some(sa) = self.last_synack_ts {
                self.handshake_done = true;
                let synack_ack = now - sa;
                self.stats.handshake_rtt_ns = Some(synack_ack);
                if let Some(syn_synack) = self.stats.syn_synack_ns {
                    self.vantage = if syn_synack.saturating_mul(4) < synack_ack {
                        Vantage::Server
                    } else if synack_ack.saturating_mul(4) < syn_synack {
                        Vantage::Client
                    } else {
                        Vantage::Unknown
                    };
                }
            }
        }
    }
}

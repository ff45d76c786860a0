//! What a segment leaves on its sender's side once judged (Wireshark's
//! `finished_checking_retransmission_type`): the in-flight list the ACK path settles, Wireshark's
//! next-expected mark and ours, the holes it skips, and the server's sends fed to the flow-level
//! detectors.

use tailscope_parsers::decode::TCP_RST;

use super::direction::{sender_and_peer, Unacked, MAX_HOLES, MAX_UNACKED};
use super::retransmission::Judged;
use super::{Segment, TcpState};
use crate::seq_number::SeqNumber;
use crate::tags::*;

impl TcpState {
    pub(super) fn record_send(&mut self, s: &Segment<'_>, ta: u32, judged: &Judged, retx_delay_ns: Option<i64>) {
        let (seq, seglen, flags, now) = (s.seq, s.seglen, s.flags, s.now);
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        let nextseq = seq.wrapping_add(seglen).wrapping_add(u32::from(s.syn_fin));
        let bare_rst = s.is_bare_rst();
        let beyond_high = !judged.bad_seq && judged.beyond_mark && !bare_rst;
        let advances = beyond_high && ta & ZERO_WINDOW_PROBE == 0;
        let highest = if beyond_high { judged.end } else { fwd.high };
        let bif = if rev.lastack != 0 { highest.wrapping_sub(rev.lastack) } else { 0 };
        let bif = if bif > 1 << 30 { 0 } else { bif };
        let mut tx_idx = None;
        if s.dir == 1 && seglen > 0 {
            // The server's sending direction feeds the flow-level detectors.
            if retx_delay_ns.is_none() {
                let min_rtt = fwd.rtt.min.unwrap_or(self.first_rtt_ns);
                self.path.resumed(now, min_rtt);
            }
            // Every transmission, retransmissions included, spends a policer's tokens.
            // a super-segment leaves as wire segments of the client's MSS less this segment's
            // options (`Pathology::sent`)
            let options = u32::from(s.tcp.header_len).saturating_sub(20);
            let wire_payload = self.client_syn_mss.map_or(u32::MAX, |m| m.saturating_sub(options).max(1));
            tx_idx = self.path.sent(now, seglen, wire_payload);
            self.server_mss = self.server_mss.max(seglen).min(self.client_syn_mss.unwrap_or(u32::MAX));
            self.client_window_shift = s.peer_window_shift.or(self.client_window_shift);
            let rwnd = s.peer_window_shift.map(|shift| u64::from(rev.window) << shift);
            self.path.window_state(now, bif, rwnd, self.server_mss);
        } else if s.dir == 0 && seglen > 0 {
            self.path.request();
        }
        // Nothing to wait for from a segment with a damaged sequence number, or from a late-recorded
        // original (already acknowledged: an ACK now would be no RTT sample of it).
        if (seglen > 0 || s.syn_fin) && !judged.bad_seq && !judged.late_original && fwd.segments.len() < MAX_UNACKED {
            let first_ts = now - retx_delay_ns.unwrap_or(0);
            fwd.segments.push(Unacked {
                bif,
                sacked: false,
                ack: s.ack,
                win: s.window,
                tsval: s.tcp.ts.map(|x| x.0),
                tx_idx,
                seq,
                nextseq,
                ts_ns: now,
                first_ts_ns: first_ts,
                retransmitted: retx_delay_ns.is_some(),
                ip_id: s.ip_id,
                len: seglen,
                idx: 0,
            });
        }
        if seglen > 0 || s.syn_fin {
            fwd.last_send_ts = Some(now);
            let idle = fwd.high == 0 || rev.lastack == 0 || !SeqNumber(rev.lastack).before(fwd.high);
            // With SACK, Linux's RACK re-arms the timer on its own schedule (its reordering
            // timer, tcp_rack_reo_timeout): timing it from every send kept the randomized lab
            // pool's timer class exact (arming it only as above gave 2 rto for 22 right in a
            // pool of seeds 1-40), so the rule above is for receivers without SACK.
            if idle || seq == rev.lastack || fwd.rto_armed_ts.is_none() || rev.sacks {
                fwd.rto_armed_ts = Some(now);
            }
        }
        if (fwd.nextseq == 0 || SeqNumber(nextseq).after(fwd.nextseq)) && ta & ZERO_WINDOW_PROBE == 0 && !bare_rst {
            fwd.nextseq = nextseq;
            fwd.nextseq_ts = now;
        }
        if advances {
            // Bytes skipped on our mark: lost before the capture (or not captured).
            if fwd.high != 0 && SeqNumber(seq).after(fwd.high) && flags & TCP_RST == 0 {
                if fwd.holes.len() >= MAX_HOLES {
                    fwd.holes.pop_front();
                }
                fwd.holes.push_back((fwd.high, seq, now));
            }
            fwd.high = judged.end;
            if fwd.acked_ahead_ts.is_some() && !SeqNumber(fwd.high).before(rev.lastack) {
                fwd.acked_ahead_ts = None;
            }
        }
        if (fwd.maxseqtobeacked == 0 || seq == fwd.maxseqtobeacked) && ta & ZERO_WINDOW_PROBE == 0 {
            fwd.maxseqtobeacked = fwd.nextseq;
        }
    }
}

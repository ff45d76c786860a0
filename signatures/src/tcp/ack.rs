//! The ACK path: what a segment's acknowledgment fields settle in the other direction's state —
//! D-SACK proofs of spurious resends (RFC 2883), SACKed segments and the holes the receiver
//! reports, RACK's delivered send time (RFC 8985), the RTT samples (Karn's rule, and the
//! timestamp echo as pping takes it), and the end of a recovery episode.

use tailscope_parsers::decode::{TCP_ACK, TCP_SYN};

use super::direction::{sender_and_peer, CoveredResends, DataResend, DirSeq, Unacked, MAX_HOLES, MAX_TSVALS};
use super::retransmission::unspurious_stats;
use super::{Analysis, Segment, TcpState};
use crate::seq_number::SeqNumber;
use crate::tags::*;

/// An ACK covering a fast retransmit sooner than this share of the path's minimum RTT after the
/// resend answered the original (`TcpState::answered_original`). The minimum RTT is the floor of
/// any round trip on the path; half of it leaves room for a minimum that every sample
/// overstated (delayed ACKs on each, up to 40 ms on Linux) and for jitter, while a held
/// original's ACK comes within the hold, typically a small part of the RTT (30 ms on 200 ms).
const ANSWER_RTT_SHARE: f64 = 0.5;

impl TcpState {
    /// Remember this packet's ACK fields in its direction's state (Wireshark's per-direction
    /// `lastack`, window and flags, and what our judgement needs of them).
    pub(super) fn remember_ack_fields(&mut self, s: &Segment<'_>, ta: u32) {
        let (ack, flags, now) = (s.ack, s.flags, s.now);
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        if flags & TCP_ACK != 0 && (fwd.lastack == 0 || SeqNumber(ack).after(fwd.lastack)) {
            fwd.last_advance_ts = Some(now);
        }
        if flags & TCP_ACK != 0 {
            fwd.adv = Some((ack, s.tcp.window, flags & TCP_SYN != 0));
            if rev.acked_ahead_ts.is_none() && (rev.high == 0 || SeqNumber(ack).after(rev.high)) {
                rev.acked_ahead_ts = Some(now);
            }
        }
        fwd.window = s.window;
        fwd.lastack = ack;
        fwd.lastack_ts = now;
        fwd.lastsegmentflags = ta;
        // A D-SACK below the cumulative ACK reports a duplicate, nothing received above a hole
        // (pool draw0182: the client's FIN resent after the server's FIN-ACK was lost, the
        // server's D-SACK of it made the next resend a fast retransmit, and its D-SACK then
        // counted reordering).
        let blocks = s.tcp.sack_blocks();
        fwd.sack_high = blocks.iter().map(|b| b.1).filter(|&r| SeqNumber(r).after(ack)).reduce(|a, b| {
            if SeqNumber(b).after(a) {
                b
            } else {
                a
            }
        });
        fwd.sacks |= !blocks.is_empty();
    }

    /// Drop what this ACK acknowledges from the other side's in-flight list; an exact match that
    /// was never retransmitted is an RTT sample (Karn).
    pub(super) fn process_ack(&mut self, s: &Segment<'_>, out: &mut Analysis) {
        let (ack, now) = (s.ack, s.now);
        let blocks = s.tcp.sack_blocks();
        self.dsack(s, blocks, out);
        self.eifel_fin(s, out);
        self.eifel_data(s, out);
        self.answered_original(s, out);
        let reader_held = s.dir == 0 && self.reader_held(s);
        let rev = &mut self.dir[1 - s.dir];
        let mut rack = Rack { delivered: rev.delivered_sent_ts, min_rtt: rev.rtt.min.unwrap_or(0), now };
        // A hole an overtaken ACK reports was closed by the ACK that passed it, and no resend or
        // late original will close it again (lab policing_x6: a client ACK overtaken within
        // its burst reported a hole its predecessor had closed, counted as reordering).
        let overtaken = rev.peer_ack_high.is_some_and(|h| SeqNumber(ack).before(h));
        if !overtaken {
            rev.peer_ack_high = Some(ack);
        }
        // A segment is best timed when it is first SACKed: its cumulative ACK may wait for a
        // hole to be repaired, and would measure the repair, not the path.
        let mut sample = sack_marks(rev, blocks, ack, !overtaken, &mut rack);
        // Counted for the data's direction; no packet of ours shows it (the reordered
        // segment passed the capture in order), only the receiver's ACKs do.
        self.stats.reordered[1 - s.dir] += holes_closed_unrepaired(rev, ack);
        let (timed, retired_retx) = settle_cumulative(rev, ack, &mut rack);
        rev.delivered_sent_ts = rack.delivered;
        if sample.is_none() && !retired_retx {
            sample = timed;
        }
        // An ACK riding on new data was held back for that data (a request after think
        // time): it times the client's application, not the path.
        if s.seglen > 0 {
            sample = None;
        }
        if let Some((r, bif)) = sample.filter(|s| s.0 >= 0) {
            rev.est.add(r);
            rev.rtt.add(r);
            out.rtt_ns = Some(r);
            if s.dir == 0 && !reader_held {
                self.path.rtt(now - r, r, bif);
            }
        }
        if s.dir == 0 && ack == rev.high && rev.high != 0 {
            self.path.drained(now);
        }
        if let Some((_, point)) = rev.recovery {
            if !SeqNumber(ack).before(point) {
                rev.recovery = None;
                rev.tail_episode = false;
                // Recovery lasts from the episode's first resend to the ACK that ends it.
                if let Some(since) = rev.recovery_since.take() {
                    self.stats.recovery_ns += now - since;
                }
            }
        }
    }

    /// RFC 2883: a first SACK block below the cumulative ACK, or inside the second block,
    /// reports data received twice: if we saw that data retransmitted, the resend was spurious
    /// (the original had arrived).
    fn dsack(&mut self, s: &Segment<'_>, blocks: &[(u32, u32)], out: &mut Analysis) {
        let Some(&(l, r)) = blocks.first() else { return };
        let dsack = SeqNumber(r).at_or_before(s.ack)
            || blocks.get(1).is_some_and(|&(l2, r2)| SeqNumber(l2).at_or_before(l) && SeqNumber(r).at_or_before(r2));
        if !dsack {
            return;
        }
        let rev = &mut self.dir[1 - s.dir];
        // a resend whose bytes hold the reported block
        let holds =
            |&(a, b, ..): &(u32, u32, u32, i64, i64)| SeqNumber(a).at_or_before(l) && SeqNumber(r).at_or_before(b);
        let Some(i) = rev.recent_retx.iter().rposition(holds) else {
            return;
        };
        let resent_before = rev.recent_retx.iter().take(i).any(holds);
        let (rseq, rend, rtags, delay, _) = rev.recent_retx.remove(i).expect("index from rposition");
        // A resent bare FIN proved here is not proved again by the echo check (`eifel_fin`).
        if rend == rseq.wrapping_add(1) {
            if let Some(j) = rev.fin_resends.iter().rposition(|r| r.0 == rseq) {
                rev.fin_resends.remove(j);
            }
        }
        if rtags & RETX_SPURIOUS == 0 {
            unspurious_stats(&mut self.stats, rtags, delay, 1 - s.dir, rend.wrapping_sub(rseq));
            out.proved_spurious[1 - s.dir] = Some((rseq, rtags, 1));
            // Fast retransmit answers later data arriving first; the original arrived after
            // all: the data was reordered past the capture. Unless an earlier resend of these
            // bytes is the copy that arrived: a second resend after a lost original proves
            // nothing of the order (pool draw0001_loss, BBR, 6 % loss both ways: a fast
            // retransmit's bytes resent again 41 ms later, D-SACKed, read as reordering).
            if rtags & RETX_FAST != 0 && !resent_before {
                self.stats.reordered[1 - s.dir] += 1;
            }
        }
    }

    /// A fast retransmit from the host next to the capture whose bytes the receiver acknowledges
    /// sooner than `ANSWER_RTT_SHARE` of the path's minimum RTT after the resend left: no ACK
    /// of the resend can come back that fast (it has a whole round trip to make), so the ACK
    /// answered the original, which was held on the way, not lost; the resend was spurious. This
    /// is the proof when no D-SACK comes (the resend itself lost, or a receiver without SACK)
    /// and no timestamp echo tells which copy arrived (a client without TCP timestamps: issue
    /// 29 item 6, 30 ms after the resend on a 200 ms path). Only fast retransmits: the dupACKs
    /// that caused them are what a held original makes; a timer's resend after a silence says
    /// nothing of the kind. Nor an original that would have had to be held longer than the
    /// smoothed RTT beyond the path's minimum: a sender takes reordering that long for loss
    /// (RFC 8985 bounds its reordering window by SRTT), and a minimum taken while a standing
    /// queue filled the path makes a fresh resend's ACK look quick (pool draw0102, SACK and
    /// timestamps off behind a 144 ms queue: NewReno's resends after partial ACKs, originals
    /// 355 ms old, ACKed 40-45 ms later against a minimum near 100 ms so far: 25 called spurious).
    fn answered_original(&mut self, s: &Segment<'_>, out: &mut Analysis) {
        if self.vantage.local_dir() != Some(1 - s.dir)
            || s.flags & TCP_ACK == 0
            || out.proved_spurious[1 - s.dir].is_some()
        {
            return;
        }
        let rev = &mut self.dir[1 - s.dir];
        let Some(min_rtt) = rev.rtt.min.filter(|&r| r > 0) else { return };
        let margin = (ANSWER_RTT_SHARE * min_rtt as f64) as i64;
        let srtt = rev.est.srtt().unwrap_or(min_rtt);
        // `age`: the resend's time since the original left, as it was sent
        let Some(i) = rev.recent_retx.iter().position(|&(_, end, tags, age, sent)| {
            let held = s.now - sent + age - min_rtt;
            tags & RETX_FAST != 0
                && tags & RETX_SPURIOUS == 0
                && SeqNumber(end).at_or_before(s.ack)
                && s.now - sent < margin
                && held <= srtt
        }) else {
            return;
        };
        let (rseq, rend, rtags, delay, _) = rev.recent_retx.remove(i).expect("index from position");
        unspurious_stats(&mut self.stats, rtags, delay, 1 - s.dir, rend.wrapping_sub(rseq));
        out.proved_spurious[1 - s.dir] = Some((rseq, rtags, 1));
        // as for a D-SACK of a fast retransmit: the original was reordered past later data
        self.stats.reordered[1 - s.dir] += 1;
    }

    /// RFC 3522 (Eifel detection, as Linux's `tcp_packet_delayed` undo): the first ACK covering a
    /// resent FIN echoes the TSval of the FIN that made the receiver advance (RFC 7323 §4.3: a
    /// duplicate does not move TS.Recent). An echo older than the resend's stamp is the first
    /// FIN's: it had arrived, and only its ACK was lost, so the resend was spurious (randomized lab
    /// pool 1-96: draw0041_loss and draw0049_loss, the client's ACK of the server's FIN dropped,
    /// the FIN resent by the RTO was called `rto`). Data resends have the D-SACK for that proof.
    /// Every resend stamped after the echo was spurious (a FIN resent twice before the ACK got
    /// through: pool seeds 1-40, draw0033).
    fn eifel_fin(&mut self, s: &Segment<'_>, out: &mut Analysis) {
        let rev = &mut self.dir[1 - s.dir];
        let Some(&(seq, ..)) = rev.fin_resends.first() else { return };
        if !SeqNumber(s.ack).after(seq) {
            return;
        }
        let resends = std::mem::take(&mut rev.fin_resends);
        let Some((_, ecr)) = s.tcp.ts.filter(|t| t.1 != 0) else { return };
        // One relabelling per direction and packet (a D-SACK in this ACK went first).
        if out.proved_spurious[1 - s.dir].is_some() {
            return;
        }
        let mut proved = None;
        for &(_, _, tags, delay) in resends.iter().filter(|r| SeqNumber(ecr).before(r.1)) {
            unspurious_stats(&mut self.stats, tags, delay, 1 - s.dir, 1);
            proved = Some((seq, tags, proved.map_or(1, |p: (u32, u32, u8)| p.2 + 1)));
            // Nor by a D-SACK of the same resend that may follow (the receiver's FIN echoed the
            // first FIN's stamp, then its ACK of the duplicate carried a D-SACK: pool seeds 1-16
            // at the client, draw0003_short_loss_client, the resend counted spurious twice).
            if let Some(j) = rev.recent_retx.iter().rposition(|r| r.0 == seq && r.1 == seq.wrapping_add(1)) {
                rev.recent_retx.remove(j);
            }
        }
        out.proved_spurious[1 - s.dir] = proved;
    }

    /// RFC 3522 (Eifel detection) for data on a flow without SACK, where no D-SACK reports a
    /// duplicate: the first ACK covering a resend echoes the TSval of the segment that moved the
    /// receiver's TS.Recent. A duplicate does not move it (Linux answers a segment wholly below
    /// its window with a duplicate ACK and discards it), the copy that fills the receiver's next
    /// byte does. So an echo older than the resend's own stamp is an earlier copy's: the bytes
    /// had arrived, the resend was spurious (lab pool, SACK off, seed 1: after an RTO the
    /// go-back-N resent 119 segments the client held already, each called `rto`). Every resend
    /// the ACK covers is judged by it, and leaves the list. On a flow with SACK the D-SACK is
    /// the proof, and the echo only proves a resend no D-SACK has (the receiver's ACK carrying
    /// it lost: CI pool draw0033_loss, loss both ways, a response's tail resent by the timer
    /// after its ACK was lost, the client's next request echoing the first copy's stamp; called
    /// `rto` and `tail_loss`).
    fn eifel_data(&mut self, s: &Segment<'_>, out: &mut Analysis) {
        if s.flags & TCP_ACK == 0 {
            return;
        }
        self.duplicates_answered(s);
        let no_sack = self.no_sack;
        let rev = &mut self.dir[1 - s.dir];
        if rev.data_resends.is_empty() {
            return;
        }
        let ack = s.ack;
        let ecr = s.tcp.ts.map(|t| t.1).filter(|&e| e != 0);
        // One pass (a go-back-N can leave a window of them waiting).
        let mut answered = Vec::new();
        rev.data_resends.retain(|r| {
            let keep = !SeqNumber(r.end).at_or_before(ack);
            if !keep {
                answered.push(*r);
            }
            keep
        });
        // Every resend this ACK covers is answered again by the receiver as a duplicate if its
        // bytes had arrived (`duplicates_answered`), proved by the echo or not.
        let mut covered = Vec::with_capacity(answered.len());
        for mut r in answered {
            let DataResend { seq, end, proves_below, tags, delay, lost_tx, sent, .. } = r;
            let proved = proves_below.is_some_and(|t| ecr.is_some_and(|e| SeqNumber(e).before(t)));
            if proved {
                r.lost_tx = None;
            }
            covered.push(r);
            if !proved {
                continue;
            }
            // Whether the copy the echo proved can only be the original: no earlier resend of these
            // bytes is on record (as `dsack` asks of a D-SACK).
            let mut original_arrived = !no_sack;
            if no_sack {
                if let Some(j) = rev.recent_retx.iter().rposition(|r| r.0 == seq && r.1 == end) {
                    original_arrived = !rev
                        .recent_retx
                        .iter()
                        .take(j)
                        .any(|r| SeqNumber(r.0).before(end) && SeqNumber(seq).before(r.1));
                    rev.recent_retx.remove(j);
                }
            } else {
                // With SACK, this very copy, and kept, marked proved: the D-SACK of the duplicate
                // the echo proved may still come, and must not prove another copy of the same
                // bytes (unseen pool seed 201, draw0201_loss port 49306: a fast retransmit, then
                // two timer resends; the first D-SACK proved the last, the echo the middle one,
                // and the second D-SACK - the middle one's - the fast retransmit that had filled
                // the hole). `dsack` takes a marked copy without counting it again.
                match rev.recent_retx.iter_mut().rfind(|r| r.0 == seq && r.4 == sent && r.2 & RETX_SPURIOUS == 0) {
                    Some(r) => r.2 |= RETX_SPURIOUS,
                    // a D-SACK proved it already (or it is too old to be judged)
                    None => continue,
                }
            }
            unspurious_stats(&mut self.stats, tags, delay, 1 - s.dir, end.wrapping_sub(seq));
            // as a D-SACK of it would have counted (`dsack`): a fast retransmit's original
            // arrived after the later data that drew it. Without SACK too, when no earlier resend
            // could be the copy that arrived (unseen axis seed 3020, SACK off: server segments
            // held 71 ms after the capture drew fast retransmits the echo proved spurious on
            // three flows, and none of them counted reordering).
            if original_arrived && tags & RETX_FAST != 0 {
                self.stats.reordered[1 - s.dir] += 1;
            }
            // the original arrived: not a drop for the policing fit (a NewReno go-back-N after a
            // timeout resends what the policer had passed; lab pool seed 117, SACK off behind a
            // policer: 528 resends for 275 drops, no fit)
            if let Some(l) = lost_tx {
                self.path.not_lost(l.tx, l.offset, l.len);
            }
            if out.proved_spurious[1 - s.dir].is_none() {
                out.proved_spurious[1 - s.dir] = Some((seq, tags, 1));
            } else {
                out.also_proved_spurious.push(((1 - s.dir) as u8, seq));
            }
        }
        if covered.len() > 1 && no_sack {
            covered.sort_unstable_by_key(|r| (r.sent, r.seq));
            covered.remove(0);
            rev.covered_resends = CoveredResends { pool: covered, ack, at: s.now };
        }
    }

    /// Without SACK no D-SACK tells a duplicate, and an echo tells only of resends stamped after
    /// the segment that filled the hole: a receiver answers every segment below its window at
    /// once with a duplicate ACK (RFC 5681 §4.2), so duplicate ACKs of an ACK that covered
    /// several resends, sooner than a round trip after it (nothing sent since can have caused
    /// them), are those resends arriving a second time. The latest sent of them were duplicates,
    /// one per duplicate ACK (never the first, which filled the hole); with timestamps the one
    /// whose stamp the duplicate ACK echoes (RFC 7323 §4.3: a segment below the window moves
    /// TS.Recent). Their originals had passed, no drop for the policing fit (lab pool seed 37,
    /// reno behind a policer: a timeout's go-back-N resends the bytes the policer had passed,
    /// and the fit read the flows at 54-56 % of what they carried; seeds 117, 173 and 213 with
    /// timestamps: a go-back-N resends several segments within the millisecond of the hole's
    /// filler, their stamps equal to its echo). The cause of the resend stays the one that sent
    /// it (the relay log's truth scores an unreported duplicate by its trigger). Its prototype
    /// on the lab's captures: 1,779 resends called duplicates, none wrong by the relay's log
    /// (docs/accuracy.md).
    fn duplicates_answered(&mut self, s: &Segment<'_>) {
        let rev = &mut self.dir[1 - s.dir];
        let CoveredResends { pool, ack, at } = &mut rev.covered_resends;
        if pool.is_empty() || s.seglen != 0 || s.ack != *ack {
            return;
        }
        let Some(min_rtt) = rev.rtt.min.filter(|&r| r > 0) else { return };
        if s.now - *at >= min_rtt {
            pool.clear();
            return;
        }
        let echoed = s.tcp.ts.map(|t| t.1);
        let at = match echoed {
            Some(e) if pool.iter().any(|r| r.tsval.is_some()) => pool.iter().rposition(|r| r.tsval == Some(e)),
            _ => pool.len().checked_sub(1),
        };
        if let Some(l) = at.and_then(|i| pool.remove(i).lost_tx) {
            self.path.not_lost(l.tx, l.offset, l.len);
        }
    }

    /// Timestamp echo (pping): the first packet echoing a TSval the other side sent.
    pub(super) fn timestamp_echo(&mut self, s: &Segment<'_>, out: &mut Analysis) {
        let (flags, seglen, now, t) = (s.flags, s.seglen, s.now, s.tcp);
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        if let Some((tsval, tsecr)) = t.ts {
            if fwd.last_tsval != Some(tsval) {
                fwd.last_tsval = Some(tsval);
                if fwd.tsvals.len() >= MAX_TSVALS {
                    fwd.tsvals.pop_front();
                }
                fwd.tsvals.push_back((tsval, now));
            }
            // Only the first echo of a TSval times it: later ones repeat it because the
            // receiver echoes the segment that last advanced its window (RFC 7323 §4.3), so a
            // duplicate ACK after a loss would otherwise time the whole recovery. The first echo
            // is consumed even when the sequence numbers already gave this ACK its sample.
            if flags & TCP_ACK != 0 {
                if let Some(pos) = rev.tsvals.iter().position(|(v, _)| *v == tsecr) {
                    let (_, sent) = rev.tsvals[pos];
                    rev.tsvals.drain(..=pos);
                    let r = now - sent;
                    if r >= 0 && out.rtt_ns.is_none() && seglen == 0 {
                        rev.rtt.add(r);
                        out.rtt_ns = Some(r);
                    }
                }
            }
        }
    }
}

/// RACK's delivered send time (RFC 8985) as this ACK moves it.
struct Rack {
    delivered: i64,
    min_rtt: i64,
    now: i64,
}

impl Rack {
    /// A retransmission delivered sooner than the path's minimum RTT after it left is no
    /// evidence: the ACK may be for an earlier copy.
    fn deliver(&mut self, u: &Unacked) {
        if !u.retransmitted || self.now - u.ts_ns >= self.min_rtt {
            self.delivered = self.delivered.max(u.ts_ns);
        }
    }
}

/// Mark the segments the SACK blocks cover, and remember the hole the receiver reports
/// (cumulative ACK below a SACK block) when `report_hole`. Returns the RTT sample of the newest
/// segment SACKed for the first time that was never retransmitted: (RTT, bytes in flight when it
/// was sent).
fn sack_marks(
    rev: &mut DirSeq,
    blocks: &[(u32, u32)],
    ack: u32,
    report_hole: bool,
    rack: &mut Rack,
) -> Option<(i64, u32)> {
    if blocks.is_empty() {
        return None;
    }
    let sample = rev.segments.sack(blocks, rack.now, |u| rack.deliver(u));
    let first_block = blocks.iter().filter(|b| SeqNumber(b.0).after(ack)).min_by_key(|b| b.0.wrapping_sub(ack));
    if let Some(&(l, _)) = first_block.filter(|_| report_hole) {
        if !rev.sack_holes.iter().any(|h| h.0 == ack) {
            if rev.sack_holes.len() >= MAX_HOLES {
                rev.sack_holes.pop_front();
            }
            // The resend may already be on its way while older ACKs report the hole.
            let resent = rev.segments.any_resent_in(ack, l);
            rev.sack_holes.push_back((ack, l, resent));
        }
    }
    sample
}

/// Forget the holes the cumulative ACK closed; returns how many closed without any resend:
/// those were reordered downstream of the capture.
fn holes_closed_unrepaired(rev: &mut DirSeq, ack: u32) -> u64 {
    let mut reordered_downstream = 0;
    rev.sack_holes.retain(|&(start, end, resent)| {
        if SeqNumber(end).at_or_before(ack) {
            if !resent && SeqNumber(end).after(start) {
                reordered_downstream += 1;
            }
            false
        } else {
            true
        }
    });
    reordered_downstream
}

/// Retire what the cumulative ACK acknowledges. Returns the exact match's RTT sample (a
/// segment never retransmitted nor SACKed) and whether retransmitted data was retired: Karn's
/// rule for the whole ACK (as Linux's FLAG_RETRANS_DATA_ACKED), for an ACK that retires
/// retransmitted data may have waited for that repair, and its exact match would time the
/// recovery, not the path.
fn settle_cumulative(rev: &mut DirSeq, ack: u32, rack: &mut Rack) -> (Option<(i64, u32)>, bool) {
    let now = rack.now;
    rev.segments.settle(ack, now, |u| rack.deliver(u))
}

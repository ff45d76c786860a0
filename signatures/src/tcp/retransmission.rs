//! Our judgement of a segment, after Wireshark's tags: whether its sequence number can be
//! trusted, whether it is a retransmission or reordering (by the vantage and the age of the hole
//! it fills), and for a retransmission the recovery episode it belongs to, the tail loss it may
//! reveal, and its counters. Its cause is named in `cause`.

use tailscope_parsers::decode::{TCP_FIN, TCP_RST, TCP_SYN};

use super::cause::{classify, network_copy, timer_fired};
use super::direction::{sender_and_peer, DataResend, DirSeq, LostBytes, RecoveryKind, MAX_DATA_RESENDS, MAX_HOLES};
use super::handshake::Vantage;
use super::wireshark::OOO_DEFAULT_NS;
use super::{Segment, TcpFlowStats, TcpState};
use crate::seq_number::SeqNumber;
use crate::tags::*;

/// FIN resends remembered for the Eifel check (each backed-off RTO adds one).
const MAX_FIN_RESENDS: usize = 8;
/// Window scale assumed for a peer whose handshake was not seen (RFC 7323's largest).
const MAX_WSCALE: u8 = 14;
/// How far past the peer's advertised window a segment may start before it is out of window,
/// beyond one more window (ACKs the capture missed, a window that grew): see `beyond_window`.
const WINDOW_SLACK: u64 = 65_535;
/// A hole filled within this share of the path's minimum RTT cannot have been filled by a
/// retransmission (that needs at least a round trip to the sender): it is reordering.
const REORDER_RTT_SHARE: f64 = 0.5;
/// How long after the first packet stamped with a TSval another stamped alike may arrive and
/// still be its sibling from the same tick: the tick itself (at most 2 ms, `TsClock`) and the
/// path's jitter.
const SAME_TICK_HELD_NS: i64 = 10_000_000;

/// What our judgement concluded about one segment, for the phases after it.
pub(super) struct Judged {
    /// Where the segment's sequence range ends on our mark.
    pub(super) end: u32,
    /// Its sequence number is not trusted (`BAD_SEQ`): it moves no mark.
    pub(super) bad_seq: bool,
    /// It ends beyond the sender's highest sequence so far (or none is known).
    pub(super) beyond_mark: bool,
    /// An original recorded after the ACK that covered it: nothing to wait for.
    pub(super) late_original: bool,
    pub(super) is_retx: bool,
    /// Age of the hole this segment filled, if it filled one.
    pub(super) hole_age: Option<i64>,
    /// For reordering: how long its hole stayed open.
    pub(super) reorder_ns: Option<i64>,
    /// How many of its bytes filled that hole (never seen before).
    pub(super) hole_bytes: u32,
    /// A reordered segment whose bytes a resend (this one: seq, tags) had already delivered:
    /// that resend was spurious.
    pub(super) proved_spurious: Option<(u32, u32)>,
    /// Packets the far host sent just before this one that never reached the capture, by its
    /// IPv4 IDs (`IdStep::skipped`; 0 for the host beside the capture, or when IDs tell nothing).
    pub(super) unseen_before: u16,
}

impl TcpState {
    /// Our judgement of one segment: damaged sequence number, retransmission or reordering.
    pub(super) fn judge(&mut self, s: &Segment<'_>, ta: &mut u32) -> Judged {
        let (seq, flags, seglen, now) = (s.seq, s.flags, s.seglen, s.now);
        // The peer's window scale; the largest possible when the handshake was not seen (both
        // SYNs seen without scaling on both: none).
        let handshake_seen = self.first_syn_ts.is_some() && self.first_synack_ts.is_some();
        let peer_shift = s.peer_window_shift.unwrap_or(if handshake_seen { 0 } else { MAX_WSCALE });
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        // Where this segment's sequence range ends on our mark: a FIN (or SYN) on a RST takes no
        // sequence number (the receiver acts on the RST, RFC 9293 §3.10.7.4).
        let end = seq.wrapping_add(seglen).wrapping_add(u32::from(s.syn_fin && flags & TCP_RST == 0));
        // Sequence numbers we do not trust, which must not move our mark (`bad_seq`): a segment
        // starting far beyond the window the peer advertised, which the receiver would drop
        // (RFC 9293 §3.10.7.4); and a copy of the sender's previous packet (the same IPv4 ID: one
        // datagram seen twice) whose range ends elsewhere, beyond our mark: one of the two copies
        // was damaged, and this one claims bytes nothing else shows were sent. A sender whose
        // next segment carries the same ID (new data right after the previous packet's range)
        // reuses IDs, which then tell nothing.
        let oow = flags & TCP_SYN == 0 && beyond_window(rev, seq, peer_shift);
        let beyond_mark = fwd.high == 0 || SeqNumber(end).after(fwd.high);
        let same_id_as = fwd.prev.filter(|&(id, _)| id != 0 && s.ip_id == Some(id)).map(|(_, e)| e);
        if same_id_as == Some(seq) && end != seq {
            fwd.ip_id_reused = true;
        }
        let bad_copy = !fwd.ip_id_reused && same_id_as.is_some_and(|e| e != end) && beyond_mark;
        fwd.prev = s.ip_id.map(|id| (id, end));
        let bad_seq = oow || bad_copy;
        if bad_seq {
            *ta |= BAD_SEQ;
        }
        // Wireshark's flags say whether a segment is below its mark. Bytes at or above ours were
        // never sent before (Wireshark's mark may have been lifted by a damaged segment, or count
        // in an abandoned ISN's sequence space): a first transmission.
        let fresh = fwd.high == 0 || !SeqNumber(seq).before(fwd.high);
        let spurious = *ta & SPURIOUS_RETRANSMISSION != 0;
        // Below the peer's ACK, never seen, and stamped before any ACK that covered it: the
        // original, written to the file after that ACK (timestamps out of order), not a resend.
        let late_original = spurious && fresh && fwd.acked_ahead_ts.is_some_and(|t| now < t);
        // Wireshark calls any hole-filler seen soon after the highest segment "out of order".
        // A segment from the host next to the capture cannot be reordered before it, so it is a
        // retransmission; one from the far side is reordering only if its hole was younger than
        // a retransmission could be (half the path's minimum RTT), else it was lost upstream.
        let not_advanced = *ta & (OUT_OF_ORDER | RETRANSMISSION) != 0 && !spurious && !fresh;
        let mut is_retx = if spurious { !late_original } else { *ta & RETRANSMISSION != 0 && !fresh };
        let mut reorder_ns = None;
        let mut hole_age = None;
        // A resend carries the sender's clock when it left (RFC 7323 §3), never older than any
        // segment sent before it; an older stamp than data already seen is an original that
        // something held on the way.
        // The TSval ticks in milliseconds, so a segment held from within its own burst shows the
        // same stamp as those that passed it; a sender counting IPv4 IDs per connection (Linux)
        // numbers every packet, so its ID tells the order exactly.
        // Every packet of the sender counts (a pure ACK sent after the held segment too); a SYN's
        // ID may come from another counter.
        if let Some((v, _)) = s.tcp.ts {
            fwd.ts_clock.first(v, now); // the SYN's stamp too: every segment's comes from one clock
        }
        let tsval = s.tcp.ts.map(|t| t.0).filter(|_| flags & TCP_SYN == 0);
        let id_step = id_order(fwd, s.ip_id.filter(|_| flags & TCP_SYN == 0));
        let numbered = id_step.order;
        // Stamped alike with the newest, but arriving long after the first packet that carried
        // that stamp: both left within one tick of the sender's clock, so this one was held on
        // the way; a resend leaves after its hole showed, a tick or more later (randomized lab,
        // IPv6 with timestamps: client segments held 64-71 ms from within their burst, no
        // later stamp and no IPv4 ID to tell, were called fast retransmits, seed 12).
        let same_tick_held = tsval.zip(fwd.newest_tsval).is_some_and(|(v, newest)| {
            v == newest && fwd.ts_clock.newest_age(newest, now).is_some_and(|age| age >= SAME_TICK_HELD_NS)
        });
        let held_looking = tsval.zip(fwd.newest_tsval).is_some_and(|(v, newest)| SeqNumber(v).before(newest))
            || same_tick_held
            || numbered == Some(std::cmp::Ordering::Less);
        // A network copy of a segment already seen (its ID, sequence and length) carries that
        // segment's ID and stamp, behind what the sender sent since: no held original, but a
        // retransmission that `classify` names network_duplicate (a capture with TTL-127/128
        // copies: 43 copies were called reordered before this test came first).
        let copy_fields = (s.ack, s.window, s.tcp.ts.map(|x| x.0));
        let is_copy =
            !fresh && network_copy(fwd.segments.latest_exact(seq, seglen), seq, seglen, now, s.ip_id, copy_fields);
        let stamped_before = held_looking && !is_copy;
        // And the converse: stamped or numbered after everything seen from the sender, it left
        // after the segment that showed its hole, so it is no original held from before that
        // segment. The ID tells when the stamp cannot: a fast retransmit sent within the
        // millisecond of the segment before it carries the same TSval (client-side capture,
        // randomized lab pool at the client, draw0014_bottleneck_client: a resend of a segment
        // the relay's queue dropped, filling its hole 11.8 ms after it showed on a 28 ms path,
        // ID one after the newest, was called reordered).
        let stamped_after = tsval.zip(fwd.newest_tsval).is_some_and(|(v, newest)| SeqNumber(v).after(newest))
            || numbered == Some(std::cmp::Ordering::Greater);
        if let Some(v) = tsval {
            if fwd.newest_tsval.is_none_or(|n| SeqNumber(v).after(n)) {
                fwd.newest_tsval = Some(v);
                fwd.ts_clock.newest(now);
            }
        }
        let local = self.vantage.local_dir() == Some(s.dir);
        let far = !local && self.vantage != Vantage::Unknown;
        let unseen_before = if far { id_step.skipped } else { 0 };
        let mut proved_spurious = None;
        let mut held_original = false;
        // An original held on the way longer than a round trip arrives after its own resend,
        // which the capture took for the first copy: bytes a resend already brought, stamped
        // (TSval) or numbered (IPv4 ID) before data already seen from the sender, are that held
        // original (a later resend would carry a later stamp), and the resend they followed was
        // spurious (randomized lab pool 1-96: client segments held 74-76 ms on RTTs of 41-71
        // ms, draw0028_reordering and draw0092_reordering, 3 reordering flows missed).
        if far && stamped_before && (not_advanced || (spurious && !late_original)) {
            if let Some(i) = fwd.recent_retx.iter().rposition(|&(a, b, _, _, _)| {
                SeqNumber(a).at_or_before(seq) && SeqNumber(seq.wrapping_add(seglen.max(1))).at_or_before(b)
            }) {
                let (rseq, rend, rtags, delay, _) = fwd.recent_retx.remove(i).expect("index from rposition");
                if rtags & RETX_SPURIOUS == 0 {
                    unspurious_stats(&mut self.stats, rtags, delay, s.dir, rend.wrapping_sub(rseq));
                    proved_spurious = Some((rseq, rtags));
                }
                is_retx = false;
                *ta |= REORDERED;
                held_original = true;
            }
        }
        let mut hole_bytes = 0;
        // (A held original fills no hole: the resend it followed already did.)
        if not_advanced && !held_original {
            let filled = take_hole(fwd, seq, seglen, now);
            hole_age = filled.map(|f| f.0);
            hole_bytes = filled.map_or(0, |f| f.1);
            let min_rtt = if self.first_rtt_ns > 0 { self.first_rtt_ns } else { OOO_DEFAULT_NS * 2 };
            // Unless the sender was already repairing other holes (a resend filled one within
            // the last round trip): its RACK learns of a loss from the delivery of any segment
            // sent after it, its own resends included, and may resend before the receiver has
            // seen the hole at all (a client-side capture, randomized lab pool
            // draw0013_policing_client: a hole seen 13.8 ms before its resend on a 42 ms path).
            // A later stamp says so outright (draw0003_short_loss_client: the server's FIN
            // resent 1.7 ms after a pure ACK showed it lost).
            // A round trip with the path's variation: NewReno resends the next hole on the
            // partial ACK that a resend's fill drew, so that resend arrives a round trip after
            // the fill, a jitter's worth late or early (client-side capture, pool
            // draw0001_loss_client, SACK off, IPv6: 32.2 ms after the fill on a 31.2 ms
            // handshake RTT, 3.6 ms after its own hole showed, was called reordered).
            let repairing = fwd.resend_fill_ts.is_some_and(|t| now - t < min_rtt + min_rtt / 2);
            let young = !repairing
                && !stamped_after
                && hole_age.is_some_and(|age| (age as f64) < REORDER_RTT_SHARE * min_rtt as f64);
            let reordered = if local {
                false
            } else if self.vantage == Vantage::Unknown {
                *ta & OUT_OF_ORDER != 0 // no vantage: keep Wireshark's timing heuristic
            } else {
                // Even when Wireshark calls it a (fast) retransmission, a hole filled this soon
                // cannot have been a resend: the dupACKs had no time to reach the sender. Nor
                // can one stamped before data the capture already saw, however late it came.
                young || stamped_before
            };
            if reordered {
                is_retx = false;
                *ta |= REORDERED;
                reorder_ns = hole_age;
                if let Some(age) = hole_age {
                    self.stats.reorder_extent_max_ns = self.stats.reorder_extent_max_ns.max(age);
                }
            } else {
                is_retx = true;
                if hole_age.is_some() {
                    fwd.resend_fill_ts = Some(now);
                }
            }
        }
        Judged {
            end,
            bad_seq,
            beyond_mark,
            late_original,
            is_retx,
            hole_age,
            reorder_ns,
            hole_bytes,
            proved_spurious,
            unseen_before,
        }
    }

    /// A retransmission: its cause, the tail loss it may reveal, the recovery episode it opens or
    /// continues, and its counters. Returns the time since its bytes were first sent.
    pub(super) fn retransmission(&mut self, s: &Segment<'_>, ta: &mut u32, hole_age: Option<i64>) -> i64 {
        let (seq, seglen, flags, now) = (s.seq, s.seglen, s.flags, s.now);
        let (fwd, rev) = sender_and_peer(&mut self.dir, s.dir);
        let original = fwd.segments.first_covering(seq);
        // Bytes the capture never saw (lost before it) were first sent before the segment
        // that showed their hole: the hole's age is what the loss cost at least.
        let unseen_since = hole_age.map(|age| now - age).or(fwd.last_send_ts).unwrap_or(now);
        let first_ts = original.map_or(unseen_since, |u| u.first_ts_ns);
        let copy_fields = (s.ack, s.window, s.tcp.ts.map(|x| x.0));
        let original = fwd.segments.latest_exact(seq, seglen).or(original);
        let cause = classify(fwd, rev, *ta, seq, seglen, flags, now, s.ip_id, original, copy_fields, self.no_sack);
        *ta |= cause;
        // Tail loss: a timer-driven recovery (RTO or TLP) with nothing above the hole acked
        // or SACKed, so the last segment(s) of the burst were what was lost. Data only: a lost
        // bare FIN (or SYN) delays no response. Once per episode.
        if cause & (RETX_RTO | RETX_TLP) != 0 && seglen > 0 && flags & TCP_SYN == 0 && !fwd.tail_episode {
            // Without SACK, duplicate ACKs are the receiver's word that later data arrived: of
            // this hole, or (any hole) a round trip after the data just above it was first sent.
            let dupacked = (rev.lastack == seq && rev.dupacknum > 0)
                || (self.no_sack && dupacked_after_later_data(fwd, rev, seq.wrapping_add(seglen)));
            let nothing_above = match fwd.recovery {
                // Everything beyond the cumulative ACK is outstanding and un-SACKed: the burst
                // lost its end (one segment or several), and a timer had to notice. Unless
                // duplicate ACKs said later data arrived: a mid-burst loss (a stack without SACK:
                // 15 of 21 tail losses wrong; pool draw0102, SACK off: the ACK that ended a
                // NewReno recovery moved up to a hole whose later data the recovery's duplicate
                // ACKs, 850 ms after it left, had shown delivered).
                None => {
                    SeqNumber(rev.lastack).at_or_before(seq)
                        && rev.sack_high.is_none_or(|h| SeqNumber(h).at_or_before(rev.lastack))
                        && !dupacked
                }
                // An episode for an earlier hole is open: its ACKs and SACKs covered only what
                // was sent before this segment, which the timer now resends for the first time,
                // with nothing at or above it acknowledged or SACKed: the burst's end was lost
                // too, and no later segment could reveal it (randomized lab pool,
                // draw0059_short_loss: fast recovery for one hole stalls, then the RTO resends
                // the response's last segment). Not a loss-state resend promptly after an ACK
                // (go-back-N): an earlier hole's repair sent after this segment was delivered,
                // which reveals its loss as RACK does, no timer needed (pool 1-96: 3 such
                // resends in draw0014_bottleneck and draw0090_bursty_loss). Without SACK,
                // duplicate ACKs of this segment say, as above, that later data arrived (NewReno
                // recovery stalled at a partial ACK; pool seed 117, SACK off behind a policer:
                // 23 timer resends after 2-4 duplicate ACKs tagged tail loss).
                Some(_) => {
                    timer_fired(fwd, rev, now).0
                        && original.is_some_and(|u| !u.retransmitted)
                        && SeqNumber(rev.lastack).at_or_before(seq)
                        && rev.sack_high.is_none_or(|h| SeqNumber(h).at_or_before(seq))
                        && !dupacked
                }
            };
            if nothing_above {
                *ta |= TAIL_LOSS;
                fwd.tail_episode = true;
                self.stats.tail_losses += 1;
                self.stats.tail_loss_delay_ns += now - first_ts;
            }
        }
        enter_recovery(fwd, rev, cause, now);
        record_retx(&mut self.stats, &mut self.retx_run, s.dir, seq, seglen, *ta, now - first_ts);
        // A receiver still open D-SACKs a repeated FIN's one sequence number as it does data
        // (pool 1-24 at the client, draw0003_short_loss_client: the client's FIN resent after
        // the server's ACK of it was lost).
        let span = seglen + u32::from(flags & (TCP_FIN | TCP_RST) == TCP_FIN);
        if span > 0 {
            if fwd.recent_retx.len() >= MAX_HOLES {
                fwd.recent_retx.pop_front();
            }
            fwd.recent_retx.push_back((seq, seq.wrapping_add(span), *ta, now - first_ts, now));
        }
        // The latest transmission of these bytes: the one that was lost, and the copy this one
        // repeats.
        let previous = fwd.segments.latest_covering(seq).copied();
        let lost_tx = if s.dir == 1 && cause & (RETX_SPURIOUS | RETX_NETWORK_DUPLICATE) == 0 {
            previous.and_then(|u| {
                let offset = seq.wrapping_sub(u.seq);
                let len = seglen.min(u.len.saturating_sub(offset)).max(1);
                u.tx_idx.map(|idx| LostBytes { tx: idx, offset, len })
            })
        } else {
            None
        };
        // Without SACK no D-SACK will come for data either: the echo in the ACK that first covers
        // the resend tells, or without timestamps the duplicate ACKs that follow it
        // (`ack::eifel_data`, `ack::duplicates_answered`). With SACK the echo tells when the
        // D-SACK does not come (the ACK carrying it lost on the way back).
        let echo_tells = self.no_sack || s.tcp.ts.is_some();
        if echo_tells && seglen > 0 && cause & (RETX_SPURIOUS | RETX_NETWORK_DUPLICATE) == 0 {
            if fwd.data_resends.len() >= MAX_DATA_RESENDS {
                fwd.data_resends.pop_front();
            }
            let (end, tsval) = (seq.wrapping_add(seglen), s.tcp.ts.map(|t| t.0));
            let proves_below =
                if self.no_sack { tsval } else { previous.and_then(|u| u.tsval).map(|t| t.wrapping_add(1)) };
            fwd.data_resends.push_back(DataResend {
                seq,
                end,
                tsval,
                proves_below,
                tags: *ta,
                delay: now - first_ts,
                sent: now,
                // what a D-SACK proves is not taken back from the policing fit either
                lost_tx: lost_tx.filter(|_| self.no_sack),
            });
        }
        // One that has closed sends none; the echo in the ACK that covers the FIN then tells
        // whether the first FIN had arrived (`ack::eifel_fin`).
        if seglen == 0 && flags & TCP_FIN != 0 && cause & (RETX_SPURIOUS | RETX_NETWORK_DUPLICATE) == 0 {
            if let Some((tsval, _)) = s.tcp.ts {
                fwd.fin_resends.retain(|r| r.0 == seq);
                if fwd.fin_resends.len() >= MAX_FIN_RESENDS {
                    fwd.fin_resends.remove(0);
                }
                fwd.fin_resends.push((seq, tsval, *ta, now - first_ts));
            }
        }
        // A resend into a hole, wherever it starts: a super-segment (a capture above TSO/GSO)
        // may start below a hole the receiver reported and fill it (`Scoreboard::any_resent_in`).
        let resend_end = seq.wrapping_add(span.max(1));
        for h in fwd.sack_holes.iter_mut() {
            if SeqNumber(seq).before(h.1) && SeqNumber(h.0).before(resend_end) {
                h.2 = true;
            }
        }
        if let Some(l) = lost_tx {
            self.path.lost(l.tx, l.offset, l.len);
        }
        fwd.segments.mark_retransmitted(seq, seglen);
        now - first_ts
    }
}

/// Without SACK: a duplicate ACK came at least a round trip after the first send of the data
/// just above `end`, so that data (or later) arrived - the hole below it is no burst's end. The
/// duplicate ACKs of a NewReno recovery sit at the ACK of an earlier hole, below this one, and a
/// partial ACK then moves the ACK up to it with none of its own (lab pool seed 173, SACK off
/// behind a policer: duplicate ACKs at 125977-128873 from data sent above 130321, a partial ACK to
/// 130321, the timer's resend of 130321).
fn dupacked_after_later_data(fwd: &DirSeq, rev: &DirSeq, end: u32) -> bool {
    let (Some(dupack), Some(rtt)) = (rev.last_dupack_ts, fwd.rtt.min) else {
        return false;
    };
    fwd.segments.first_covering(end).is_some_and(|u| dupack >= u.first_ts_ns + rtt)
}

/// The recovery episode a retransmission of this cause opens, continues or turns into.
fn enter_recovery(fwd: &mut DirSeq, rev: &DirSeq, cause: u32, now: i64) {
    let kind = if cause & RETX_RTO != 0 {
        Some(RecoveryKind::Rto)
    } else if cause & RETX_FAST != 0 {
        Some(RecoveryKind::Fast)
    } else if cause & RETX_TLP != 0 {
        Some(RecoveryKind::Tlp)
    } else {
        None
    };
    match (kind, fwd.recovery) {
        // A timeout inside an episode (fast recovery, after a probe, or again in an RTO
        // episode) makes it an RTO one recovering up to everything sent so far: Linux's
        // tcp_enter_loss sets high_seq = snd_nxt, and retransmits in loss state until
        // that is acknowledged, however far fast recovery had got. Resends that only
        // inherit an RTO episode's cause keep its point.
        (Some(RecoveryKind::Rto), Some((prev, _))) if prev != RecoveryKind::Rto || timer_fired(fwd, rev, now).0 => {
            fwd.recovery = Some((RecoveryKind::Rto, fwd.high));
        }
        (Some(k), None) => {
            fwd.recovery = Some((k, fwd.high));
            fwd.recovery_since = Some(now);
        }
        // After a probe, the fast recovery that follows takes the episode over.
        (Some(RecoveryKind::Fast), Some((RecoveryKind::Tlp, point))) => {
            fwd.recovery = Some((RecoveryKind::Fast, point))
        }
        _ => {}
    }
}

/// IPv4 IDs counted per connection: a good share of the sender's data segments stepped the ID
/// forward by at most `ID_STEP_MAX` (random IDs almost never do).
const ID_STEP_MAX: u16 = 64;
const ID_MIN_STEPS: u32 = 3;
/// A sender numbering every packet of the connection one after the other (Linux's per-socket
/// counter): nine in ten of its steps exactly one, judged on this many at least; or, before
/// that many, every step so far exactly one from a sender stamping TCP timestamps. A host-wide
/// counter (Windows, which sends no timestamps by default) steps by one too while the
/// connection is the host's only traffic, but not once anything else sends; random IDs
/// (macOS, iOS) step by 2-9 once in 8,000 packets. The numbers a step skips are then the
/// sender's packets lost before the capture (`IdStep::skipped`): a first request's, lost
/// right after the handshake, included.
const ID_COUNTING_MIN_STEPS: u32 = 8;
/// The most packets a step may skip and still be read as losses: a longer run of the sender's
/// packets lost back to back would be a blackout the connection rarely survives.
const ID_SKIP_MAX: u16 = 8;

/// What a packet's IPv4 ID says against the newest one already seen from its sender.
pub(super) struct IdStep {
    /// Numbered before (`Less`) or after (`Greater`) that one, by a sender counting per
    /// connection; None when the ID tells nothing (no ID, a sender not counting, a step too
    /// large).
    pub(super) order: Option<std::cmp::Ordering>,
    /// Numbers skipped since that one by a sender numbering every packet one after the other:
    /// that many of its packets sent between the two never reached the capture.
    pub(super) skipped: u16,
}

/// This packet's `IdStep`. Records the ID either way.
fn id_order(fwd: &mut DirSeq, ip_id: Option<u32>) -> IdStep {
    let none = IdStep { order: None, skipped: 0 };
    let Some(id) = ip_id.and_then(|v| u16::try_from(v).ok()) else { return none };
    let Some(newest) = fwd.newest_ip_id else {
        fwd.newest_ip_id = Some(id);
        return none;
    };
    let ahead = id.wrapping_sub(newest);
    let (steps, seen, ones) = fwd.ip_id_steps;
    let one_by_one = if seen >= ID_COUNTING_MIN_STEPS {
        u64::from(ones) * 10 >= u64::from(seen) * 9
    } else {
        ones == seen && fwd.newest_tsval.is_some()
    };
    let (steps, seen, ones) =
        (steps + u32::from((1..=ID_STEP_MAX).contains(&ahead)), seen + 1, ones + u32::from(ahead == 1));
    fwd.ip_id_steps = (steps, seen, ones);
    // Pure ACKs between requests take IDs too, so not every step is small; random IDs almost
    // never make one (64 in 65,536).
    let counted = steps >= ID_MIN_STEPS && u64::from(steps) * 4 >= u64::from(seen);
    let behind = newest.wrapping_sub(id);
    if (1..0x8000).contains(&ahead) {
        fwd.newest_ip_id = Some(id);
    }
    let skipped = if one_by_one && (2..=ID_SKIP_MAX + 1).contains(&ahead) { ahead - 1 } else { 0 };
    let order = if !counted {
        None
    } else if (1..=ID_STEP_MAX).contains(&behind) {
        Some(std::cmp::Ordering::Less)
    } else if (1..=ID_STEP_MAX).contains(&ahead) {
        Some(std::cmp::Ordering::Greater)
    } else {
        None
    };
    IdStep { order, skipped }
}

/// Does a segment starting at `seq` lie beyond any window the peer (`rev`) advertised? The
/// receiver accepts only segments starting below its ACK + window (RFC 9293 §3.10.7.4). Our view
/// of that edge is the peer's latest ACK + window (`shift` applied, except on a SYN-ACK); it lags
/// when the capture missed ACKs or the window grew, so one more window and `WINDOW_SLACK` are
/// allowed. Unknowable without an ACK from the peer (as for Wireshark and tcptrace, the segment
/// then counts), or when the allowance reaches half the sequence space.
fn beyond_window(rev: &DirSeq, seq: u32, shift: u8) -> bool {
    let Some((ack, win, syn)) = rev.adv else { return false };
    let wnd = u64::from(win) << if syn { 0 } else { shift.min(MAX_WSCALE) };
    let allowance = 2 * wnd + WINDOW_SLACK;
    allowance < 1 << 31 && SeqNumber(seq).after(ack.wrapping_add(allowance as u32))
}

/// Remove the part of a recorded hole that `[seq, seq+len)` fills; the hole's age and how many
/// bytes of it the segment filled, if it filled one.
fn take_hole(d: &mut DirSeq, seq: u32, len: u32, now: i64) -> Option<(i64, u32)> {
    let end = seq.wrapping_add(len.max(1));
    let i = d.holes.iter().position(|&(a, b, _)| SeqNumber(a).at_or_before(seq) && SeqNumber(seq).before(b))?;
    let (a, b, t) = d.holes[i];
    d.holes.remove(i);
    if SeqNumber(a).before(seq) {
        d.holes.insert(i, (a, seq, t));
    }
    if SeqNumber(end).before(b) {
        d.holes.push_back((end, b, t));
    }
    let filled = if SeqNumber(end).before(b) { end } else { b }.wrapping_sub(seq);
    Some((now - t, filled.min(len)))
}

/// Move a retransmission proved spurious from its cause's counters to `retx_spurious` (and out
/// of the tail losses if it was counted as one). `dir` sent it; `span` is its sequence space
/// (payload, plus one for a FIN).
pub(super) fn unspurious_stats(s: &mut TcpFlowStats, tags: u32, delay: i64, dir: usize, span: u32) {
    // a bare FIN spans one number and is no data packet (a one-byte segment is taken for one)
    if tags & RETX_NETWORK_DUPLICATE != 0 && span > 1 {
        s.network_duplicates[dir] = s.network_duplicates[dir].saturating_sub(1);
    }
    let counter = if tags & RETX_RTO != 0 {
        &mut s.retx_rto
    } else if tags & RETX_FAST != 0 {
        &mut s.retx_fast
    } else if tags & RETX_TLP != 0 {
        &mut s.retx_tlp
    } else if tags & RETX_NETWORK_DUPLICATE != 0 {
        &mut s.retx_network_duplicate
    } else {
        &mut s.retx_unknown
    };
    *counter = counter.saturating_sub(1);
    s.retx_spurious += 1;
    if tags & TAIL_LOSS != 0 {
        s.tail_losses = s.tail_losses.saturating_sub(1);
        s.tail_loss_delay_ns -= delay;
    }
}

fn record_retx(
    s: &mut TcpFlowStats,
    retx_run: &mut Option<(u32, u32)>,
    dir: usize,
    seq: u32,
    seglen: u32,
    ta: u32,
    delay: i64,
) {
    if seglen > 0 {
        s.retx_packets[dir] += 1;
        s.retx_bytes[dir] += u64::from(seglen);
        if ta & RETX_NETWORK_DUPLICATE != 0 {
            s.network_duplicates[dir] += 1;
        }
    }
    if ta & RETX_RTO != 0 {
        s.retx_rto += 1;
    } else if ta & RETX_FAST != 0 {
        s.retx_fast += 1;
    } else if ta & RETX_TLP != 0 {
        s.retx_tlp += 1;
    } else if ta & RETX_SPURIOUS != 0 {
        s.retx_spurious += 1;
    } else if ta & RETX_NETWORK_DUPLICATE != 0 {
        s.retx_network_duplicate += 1;
    } else {
        s.retx_unknown += 1;
    }
    s.retx_delays_ns.add(delay);
    let run = match *retx_run {
        Some((start, n)) if start == seq => n + 1,
        _ => 1,
    };
    *retx_run = Some((seq, run));
    s.max_retx_per_segment = s.max_retx_per_segment.max(run);
}

//! Per-packet TCP analysis: Wireshark's sequence analysis (so our tags mean what
//! `tcp.analysis.*` means), then our own classification of each retransmission's cause, RTT
//! samples, and the loss episodes (SYN, SYN-ACK, tail) the flow and events tables report.
//! Definitions, thresholds and sources: docs/signatures.md.

use std::collections::VecDeque;

use tailscope_parsers::decode::{TcpInfo, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

use crate::pathology::{Pathology, Verdicts};
use crate::queries::{QueryTracker, Seen};
use crate::rtt::{Estimator, Samples};
use crate::tags::*;

/// Unacknowledged segments remembered per direction (Wireshark keeps at most 10,000).
const MAX_UNACKED: usize = 10_000;
/// Out-of-order threshold when no handshake RTT is known (Wireshark's 3 ms).
const OOO_DEFAULT_NS: i64 = 3_000_000;
/// Wireshark calls a retransmission "fast" within 20 ms of the dup ACK that triggered it.
const FAST_RETX_WINDOW_NS: i64 = 20_000_000;
/// A retransmission after at least this share of the RTO estimate is timer-driven.
const RTO_SHARE: f64 = 0.75;
/// A tail loss probe fires no earlier than about this many smoothed RTTs after the last send.
const TLP_MIN_SRTTS: f64 = 1.0;
/// Timestamp values remembered per direction for echo-based RTT samples.
const MAX_TSVALS: usize = 64;
/// Holes remembered per direction.
const MAX_HOLES: usize = 64;
/// Window scale assumed for a peer whose handshake was not seen (RFC 7323's largest).
const MAX_WSCALE: u8 = 14;
/// How far past the peer's advertised window a segment may start before it is out of window,
/// beyond one more window (ACKs the capture missed, a window that grew): see `beyond_window`.
const WINDOW_SLACK: u64 = 65_535;
/// SYN-ACK initial sequence numbers remembered per flow (a server answering repeated SYNs with
/// new ISNs, e.g. SYN cookies).
const MAX_SYNACK_ISNS: usize = 4;
/// A hole filled within this share of the path's minimum RTT cannot have been filled by a
/// retransmission (that needs at least a round trip to the sender): it is reordering.
const REORDER_RTT_SHARE: f64 = 0.5;

/// The sending direction's state and its peer's, both mutable.
fn sender_and_peer(dirs: &mut [DirSeq; 2], dir: usize) -> (&mut DirSeq, &mut DirSeq) {
    let (a, b) = dirs.split_at_mut(1);
    if dir == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    }
}

fn gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
fn le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

#[derive(Debug, Clone, Copy)]
struct Unacked {
    seq: u32,
    nextseq: u32,
    ts_ns: i64,
    /// When the bytes at `seq` were first sent (a retransmission keeps the original's time).
    first_ts_ns: i64,
    retransmitted: bool,
    ip_id: Option<u32>,
    len: u32,
    /// Bytes in flight just after this segment was sent.
    bif: u32,
    sacked: bool,
    ack: u32,
    win: u32,
    tsval: Option<u32>,
    /// Its index in the pathology detectors' transmission log (server data only).
    tx_idx: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryKind {
    Rto,
    Fast,
    Tlp,
}

/// One direction's sequence state (Wireshark's `tcp_analyze_seq_info`, 0 meaning unset, plus
/// what the cause classification needs).
#[derive(Debug, Clone)]
pub struct DirSeq {
    /// Wireshark's "next expected" (highest sequence seen + 1): drives the peer-compatible tags.
    nextseq: u32,
    nextseq_ts: i64,
    maxseqtobeacked: u32,
    lastack: u32,
    lastack_ts: i64,
    window: u32,
    dupacknum: i32,
    lastsegmentflags: u32,
    segments: VecDeque<Unacked>,
    /// Highest right edge of the SACK blocks in this direction's latest ACK.
    sack_high: Option<u32>,
    last_send_ts: Option<i64>,
    /// Data this direction sends, acked by the other: its RTO estimate and samples.
    pub est: Estimator,
    pub rtt: Samples,
    recovery: Option<(RecoveryKind, u32)>,
    /// The current recovery episode began with a tail loss.
    tail_episode: bool,
    recovery_since: Option<i64>,
    tsvals: VecDeque<(u32, i64)>,
    last_tsval: Option<u32>,
    /// Sequence ranges skipped by this direction (seen as `lost_segment`), with when the hole
    /// appeared: a later segment filling one is reordering or a retransmission, by its age.
    holes: VecDeque<(u32, u32, i64)>,
    /// Holes the receiver reported in SACKs for this direction's data: (start, end, resent).
    sack_holes: VecDeque<(u32, u32, bool)>,
    /// When this direction's ACK last advanced: Linux re-arms the sender's RTO there.
    last_advance_ts: Option<i64>,
    /// Recent retransmissions of this direction: (seq, end, tags, delay), for D-SACK checks.
    recent_retx: VecDeque<(u32, u32, u32, i64)>,
    /// RACK (RFC 8985 §6.1): the latest send time of this direction's segments the receiver is
    /// known to have got (SACKed or acknowledged); 0 before any.
    delivered_sent_ts: i64,
    /// tailscope's highest sequence sent + 1 (0 unset), which our judgement uses: it moves as
    /// `nextseq` does, except that a segment with a damaged sequence number (`BAD_SEQ`) does not
    /// move it, a FIN on a RST takes no sequence number, and it restarts when the client
    /// acknowledges a SYN-ACK with a new ISN (docs/signatures.md).
    high: u32,
    /// When the peer first acknowledged bytes of this direction beyond `high` (bytes the capture
    /// had not seen); cleared when `high` reaches the peer's ACK.
    acked_ahead_ts: Option<i64>,
    /// The ACK number and raw window of this direction's latest packet with the ACK flag, and
    /// whether it was a SYN (whose window is never scaled).
    adv: Option<(u32, u16, bool)>,
    /// This direction's previous packet: its IPv4 ID and where its sequence range ends (for
    /// telling a damaged copy of it).
    prev: Option<(u32, u32)>,
    /// This sender gave two different segments the same IPv4 ID (a constant ID): its IDs do not
    /// tell copies.
    ip_id_reused: bool,
}

impl Default for DirSeq {
    fn default() -> Self {
        DirSeq {
            nextseq: 0,
            nextseq_ts: 0,
            maxseqtobeacked: 0,
            lastack: 0,
            lastack_ts: 0,
            window: u32::MAX,
            dupacknum: 0,
            lastsegmentflags: 0,
            segments: VecDeque::new(),
            sack_high: None,
            last_send_ts: None,
            est: Estimator::default(),
            rtt: Samples::default(),
            recovery: None,
            tail_episode: false,
            recovery_since: None,
            tsvals: VecDeque::new(),
            last_tsval: None,
            holes: VecDeque::new(),
            sack_holes: VecDeque::new(),
            recent_retx: VecDeque::new(),
            last_advance_ts: None,
            delivered_sent_ts: 0,
            high: 0,
            acked_ahead_ts: None,
            adv: None,
            prev: None,
            ip_id_reused: false,
        }
    }
}

/// Per-flow counters the flows table reports.
#[derive(Debug, Clone, Default)]
pub struct TcpFlowStats {
    pub retx_packets: [u64; 2],
    pub retx_bytes: [u64; 2],
    pub retx_rto: u64,
    pub retx_fast: u64,
    pub retx_tlp: u64,
    pub retx_spurious: u64,
    pub retx_network_duplicate: u64,
    pub retx_unknown: u64,
    pub out_of_order: [u64; 2],
    pub reordered: [u64; 2],
    /// Longest time a hole stayed open before reordering filled it.
    pub reorder_extent_max_ns: i64,
    pub lost_segments: [u64; 2],
    pub dup_acks: [u64; 2],
    pub zero_windows: [u64; 2],
    pub tail_losses: u64,
    pub tail_loss_delay_ns: i64,
    /// Most transmissions of one segment beyond the first (tcptrace's "max # retrans").
    pub max_retx_per_segment: u32,
    pub retx_delays_ns: Samples,
    /// Time spent in loss recovery (RTO, fast or TLP episodes), both directions.
    pub recovery_ns: i64,
    pub syn_retx: u32,
    pub synack_retx: u32,
    pub syn_loss_delay_ns: i64,
    pub synack_loss_delay_ns: i64,
    /// SYN-ACK → the client's handshake ACK, seen at the server (the handshake RTT).
    pub handshake_rtt_ns: Option<i64>,
    /// SYN → SYN-ACK (meaningful when the capture is at or near the client).
    pub syn_synack_ns: Option<i64>,
}

/// What one packet's analysis produced.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub tags: u32,
    pub rtt_ns: Option<i64>,
    /// For a retransmission: time since the bytes were first sent.
    pub retx_delay_ns: Option<i64>,
    /// A D-SACK in this packet proved an earlier retransmission (the other direction's, at this
    /// sequence number, with these tags) spurious: (seq, tags it was given).
    pub proved_spurious: Option<(u32, u32)>,
}

#[derive(Debug, Clone, Default)]
pub struct TcpState {
    pub dir: [DirSeq; 2],
    pub stats: TcpFlowStats,
    first_rtt_ns: i64,
    mru_syn_ts: Option<i64>,
    first_syn_ts: Option<i64>,
    last_syn_ts: Option<i64>,
    first_synack_ts: Option<i64>,
    last_synack_ts: Option<i64>,
    syn_seq: Option<u32>,
    /// Distinct ISNs of the server's SYN-ACKs, and the one the server direction's `high` counts
    /// from (the first SYN-ACK's, until the client acknowledges another).
    synack_isns: [Option<u32>; MAX_SYNACK_ISNS],
    server_isn: Option<u32>,
    handshake_done: bool,
    /// Transmissions of the segment currently being retransmitted (by its start sequence).
    retx_run: Option<(u32, u32)>,
    pub vantage: Vantage,
    pub path: Pathology,
    pub verdicts: Verdicts,
    pub queries: QueryTracker,
    server_mss: u32,
}

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
    fn local_dir(self) -> Option<usize> {
        match self {
            Vantage::Server => Some(1),
            Vantage::Client => Some(0),
            Vantage::Unknown => None,
        }
    }
}

/// `window_shift` is the flow's window scale for the packet's direction, when known.
pub struct PacketIn<'a> {
    pub dir: usize,
    pub ts_ns: i64,
    pub tcp: &'a TcpInfo,
    pub seglen: u32,
    pub ip_id: Option<u32>,
    pub peer_window_shift: Option<u8>,
}

impl TcpState {
    pub fn analyze(&mut self, pk: &PacketIn<'_>) -> Analysis {
        let t = pk.tcp;
        let (seq, ack, flags, window, seglen, now) = (t.seq, t.ack, t.flags, u32::from(t.window), pk.seglen, pk.ts_ns);
        let syn_fin = flags & (TCP_SYN | TCP_FIN) != 0;
        let sfr = TCP_SYN | TCP_FIN | TCP_RST;
        if pk.dir == 0 && flags & (TCP_SYN | TCP_ACK) == TCP_ACK {
            self.restart_on_new_isn(ack, now);
        }
        // The peer's window scale; the largest possible when the handshake was not seen (both
        // SYNs seen without scaling on both: none).
        let handshake_seen = self.first_syn_ts.is_some() && self.first_synack_ts.is_some();
        let peer_shift = pk.peer_window_shift.unwrap_or(if handshake_seen { 0 } else { MAX_WSCALE });
        let (fwd, rev) = sender_and_peer(&mut self.dir, pk.dir);
        let mut ta = 0u32;

        // --- Wireshark's tcp_analyze_sequence_number, in its order -----------------------
        if seglen == 1 && seq == fwd.nextseq && rev.window == 0 {
            ta |= ZERO_WINDOW_PROBE;
        } else {
            if window == 0 && flags & sfr == 0 {
                ta |= ZERO_WINDOW;
            }
            if fwd.nextseq != 0 && gt(seq, fwd.nextseq) && flags & TCP_RST == 0 {
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
                if let Some(shift) = pk.peer_window_shift {
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
                ta |= DUPLICATE_ACK;
            }
        }
        // finished_fwd:
        if ack != fwd.lastack {
            fwd.dupacknum = 0;
        }
        if rev.maxseqtobeacked != 0 && gt(ack, rev.maxseqtobeacked) && flags & TCP_ACK != 0 {
            if lt(rev.maxseqtobeacked, rev.nextseq) {
                rev.maxseqtobeacked = rev.nextseq;
                ta |= ACK_LOST_SEGMENT;
            } else {
                if rev.dupacknum == 0 {
                    ta |= ACK_LOST_SEGMENT;
                }
                rev.dupacknum = -1;
            }
        }
        if (seglen > 0 || syn_fin) && ta & KEEP_ALIVE == 0 {
            let mut not_advanced = fwd.nextseq != 0 && lt(seq, fwd.nextseq);
            if seglen > 1 && fwd.nextseq.wrapping_sub(1) == seq {
                not_advanced = false;
            }
            if seglen > 0 && rev.lastack != 0 && le(seq.wrapping_add(seglen), rev.lastack) {
                ta |= SPURIOUS_RETRANSMISSION | RETRANSMISSION;
            } else {
                let ooo_thres = if self.first_rtt_ns > 0 { self.first_rtt_ns } else { OOO_DEFAULT_NS };
                let next_of_this = seq.wrapping_add(seglen).wrapping_add(u32::from(syn_fin));
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

        // --- our judgement: retransmission or reordering, then the cause -------------------
        // Where this segment's sequence range ends on our mark: a FIN (or SYN) on a RST takes no
        // sequence number (the receiver acts on the RST, RFC 9293 §3.10.7.4).
        let end = seq.wrapping_add(seglen).wrapping_add(u32::from(syn_fin && flags & TCP_RST == 0));
        // Sequence numbers we do not trust, which must not move our mark (`bad_seq`): a segment
        // starting far beyond the window the peer advertised, which the receiver would drop
        // (RFC 9293 §3.10.7.4); and a copy of the sender's previous packet (the same IPv4 ID: one
        // datagram seen twice) whose range ends elsewhere, beyond our mark: one of the two copies
        // was damaged, and this one claims bytes nothing else shows were sent. A sender whose
        // next segment carries the same ID (new data right after the previous packet's range)
        // reuses IDs, which then tell nothing.
        let oow = flags & TCP_SYN == 0 && beyond_window(rev, seq, peer_shift);
        let beyond_mark = fwd.high == 0 || gt(end, fwd.high);
        let same_id_as = fwd.prev.filter(|&(id, _)| id != 0 && pk.ip_id == Some(id)).map(|(_, e)| e);
        if same_id_as == Some(seq) && end != seq {
            fwd.ip_id_reused = true;
        }
        let bad_copy = !fwd.ip_id_reused && same_id_as.is_some_and(|e| e != end) && beyond_mark;
        fwd.prev = pk.ip_id.map(|id| (id, end));
        let bad_seq = oow || bad_copy;
        if bad_seq {
            ta |= BAD_SEQ;
        }
        // Wireshark's flags say whether a segment is below its mark. Bytes at or above ours were
        // never sent before (Wireshark's mark may have been lifted by a damaged segment, or count
        // in an abandoned ISN's sequence space): a first transmission.
        let fresh = fwd.high == 0 || !lt(seq, fwd.high);
        let spurious = ta & SPURIOUS_RETRANSMISSION != 0;
        // Below the peer's ACK, never seen, and stamped before any ACK that covered it: the
        // original, written to the file after that ACK (timestamps out of order), not a resend.
        let late_original = spurious && fresh && fwd.acked_ahead_ts.is_some_and(|t| now < t);
        // Wireshark calls any hole-filler seen soon after the highest segment "out of order".
        // A segment from the host next to the capture cannot be reordered before it, so it is a
        // retransmission; one from the far side is reordering only if its hole was younger than
        // a retransmission could be (half the path's minimum RTT), else it was lost upstream.
        let not_advanced = ta & (OUT_OF_ORDER | RETRANSMISSION) != 0 && !spurious && !fresh;
        let mut is_retx = if spurious { !late_original } else { ta & RETRANSMISSION != 0 && !fresh };
        let mut reorder_ns = None;
        let mut hole_age = None;
        if not_advanced {
            let local = self.vantage.local_dir() == Some(pk.dir);
            hole_age = take_hole(fwd, seq, seglen, now);
            let min_rtt = if self.first_rtt_ns > 0 { self.first_rtt_ns } else { OOO_DEFAULT_NS * 2 };
            let young = hole_age.is_some_and(|age| (age as f64) < REORDER_RTT_SHARE * min_rtt as f64);
            let reordered = if local {
                false
            } else if self.vantage == Vantage::Unknown {
                ta & OUT_OF_ORDER != 0 // no vantage: keep Wireshark's timing heuristic
            } else {
                // Even when Wireshark calls it a (fast) retransmission, a hole filled this soon
                // cannot have been a resend: the dupACKs had no time to reach the sender.
                young
            };
            if reordered {
                is_retx = false;
                ta |= REORDERED;
                reorder_ns = hole_age;
                if let Some(age) = hole_age {
                    self.stats.reorder_extent_max_ns = self.stats.reorder_extent_max_ns.max(age);
                }
            } else {
                is_retx = true;
            }
        }
        let mut out = Analysis::default();
        if is_retx {
            let original =
                fwd.segments.iter().find(|u| u.seq == seq || (le(u.seq, seq) && lt(seq, u.nextseq))).copied();
            // Bytes the capture never saw (lost before it) were first sent before the segment
            // that showed their hole: the hole's age is what the loss cost at least.
            let unseen_since = hole_age.map(|age| now - age).or(fwd.last_send_ts).unwrap_or(now);
            let first_ts = original.map_or(unseen_since, |u| u.first_ts_ns);
            out.retx_delay_ns = Some(now - first_ts);
            let copy_fields = (ack, window, t.ts.map(|x| x.0));
            let original = fwd.segments.iter().rev().find(|u| u.seq == seq && u.len == seglen).copied().or(original);
            let cause = classify(fwd, rev, ta, seq, seglen, flags, now, pk.ip_id, original, copy_fields);
            ta |= cause;
            // Tail loss: a timer-driven recovery (RTO or TLP) with nothing above the hole acked
            // or SACKed, so the last segment(s) of the burst were what was lost. Data only: a lost
            // bare FIN (or SYN) delays no response.
            if cause & (RETX_RTO | RETX_TLP) != 0 && seglen > 0 && flags & TCP_SYN == 0 && fwd.recovery.is_none() {
                // Everything beyond the cumulative ACK is outstanding and un-SACKed: the burst
                // lost its end (one segment or several), and a timer had to notice.
                let nothing_above = le(rev.lastack, seq) && rev.sack_high.is_none_or(|h| le(h, rev.lastack));
                if nothing_above {
                    ta |= TAIL_LOSS;
                    fwd.tail_episode = true;
                    self.stats.tail_losses += 1;
                    self.stats.tail_loss_delay_ns += now - first_ts;
                }
            }
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
                (Some(RecoveryKind::Rto), Some((prev, _)))
                    if prev != RecoveryKind::Rto || timer_fired(fwd, rev, now).0 =>
                {
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
            record_retx(&mut self.stats, &mut self.retx_run, pk.dir, seq, seglen, ta, now - first_ts);
            if seglen > 0 {
                if fwd.recent_retx.len() >= MAX_HOLES {
                    fwd.recent_retx.pop_front();
                }
                fwd.recent_retx.push_back((seq, seq.wrapping_add(seglen), ta, now - first_ts));
            }
            for h in fwd.sack_holes.iter_mut() {
                if le(h.0, seq) && lt(seq, h.1) {
                    h.2 = true;
                }
            }
            if pk.dir == 1 && cause & (RETX_SPURIOUS | RETX_NETWORK_DUPLICATE) == 0 {
                // The latest transmission of these bytes is the one that was lost.
                let latest = fwd.segments.iter().rev().find(|u| le(u.seq, seq) && lt(seq, u.nextseq));
                if let Some(idx) = latest.and_then(|u| u.tx_idx) {
                    self.path.lost(idx);
                }
            }
            for u in fwd.segments.iter_mut() {
                if lt(seq, u.nextseq) && lt(u.seq, seq.wrapping_add(seglen.max(1))) {
                    u.retransmitted = true;
                }
            }
        }
        if flags & TCP_SYN != 0 {
            self.note_syn(pk.dir, flags, seq, now, &mut ta);
        }

        // --- finished_checking_retransmission_type: state updates ------------------------
        let (fwd, rev) = sender_and_peer(&mut self.dir, pk.dir);
        let nextseq = seq.wrapping_add(seglen).wrapping_add(u32::from(syn_fin));
        let beyond_high = !bad_seq && beyond_mark;
        let advances = beyond_high && ta & ZERO_WINDOW_PROBE == 0;
        let highest = if beyond_high { end } else { fwd.high };
        let bif = if rev.lastack != 0 { highest.wrapping_sub(rev.lastack) } else { 0 };
        let bif = if bif > 1 << 30 { 0 } else { bif };
        let mut tx_idx = None;
        if pk.dir == 1 && seglen > 0 {
            // The server's sending direction feeds the flow-level detectors.
            if out.retx_delay_ns.is_none() {
                let min_rtt = fwd.rtt.min.unwrap_or(self.first_rtt_ns);
                self.path.resumed(now, min_rtt);
            }
            // Every transmission, retransmissions included, spends a policer's tokens.
            tx_idx = self.path.sent(now, seglen);
            self.server_mss = self.server_mss.max(seglen);
            let rwnd = pk.peer_window_shift.map(|s| u64::from(rev.window) << s);
            self.path.window_state(now, bif, rwnd, self.server_mss);
        } else if pk.dir == 0 && seglen > 0 {
            self.path.request();
        }
        // Nothing to wait for from a segment with a damaged sequence number, or from a late-recorded
        // original (already acknowledged: an ACK now would be no RTT sample of it).
        if (seglen > 0 || syn_fin) && !bad_seq && !late_original && fwd.segments.len() < MAX_UNACKED {
            let first_ts = now - out.retx_delay_ns.unwrap_or(0);
            fwd.segments.push_back(Unacked {
                bif,
                sacked: false,
                ack,
                win: window,
                tsval: t.ts.map(|x| x.0),
                tx_idx,
                seq,
                nextseq,
                ts_ns: now,
                first_ts_ns: first_ts,
                retransmitted: out.retx_delay_ns.is_some(),
                ip_id: pk.ip_id,
                len: seglen,
            });
        }
        if seglen > 0 || syn_fin {
            fwd.last_send_ts = Some(now);
        }
        if (fwd.nextseq == 0 || gt(nextseq, fwd.nextseq)) && ta & ZERO_WINDOW_PROBE == 0 {
            fwd.nextseq = nextseq;
            fwd.nextseq_ts = now;
        }
        if advances {
            // Bytes skipped on our mark: lost before the capture (or not captured).
            if fwd.high != 0 && gt(seq, fwd.high) && flags & TCP_RST == 0 {
                if fwd.holes.len() >= MAX_HOLES {
                    fwd.holes.pop_front();
                }
                fwd.holes.push_back((fwd.high, seq, now));
            }
            fwd.high = end;
            if fwd.acked_ahead_ts.is_some() && !lt(fwd.high, rev.lastack) {
                fwd.acked_ahead_ts = None;
            }
        }
        if (fwd.maxseqtobeacked == 0 || seq == fwd.maxseqtobeacked) && ta & ZERO_WINDOW_PROBE == 0 {
            fwd.maxseqtobeacked = fwd.nextseq;
        }
        if flags & TCP_ACK != 0 && (fwd.lastack == 0 || gt(ack, fwd.lastack)) {
            fwd.last_advance_ts = Some(now);
        }
        if flags & TCP_ACK != 0 {
            fwd.adv = Some((ack, t.window, flags & TCP_SYN != 0));
            if rev.acked_ahead_ts.is_none() && (rev.high == 0 || gt(ack, rev.high)) {
                rev.acked_ahead_ts = Some(now);
            }
        }
        fwd.window = window;
        fwd.lastack = ack;
        fwd.lastack_ts = now;
        fwd.lastsegmentflags = ta;
        fwd.sack_high = t.sack_blocks().iter().map(|b| b.1).reduce(|a, b| if gt(b, a) { b } else { a });

        // ACK processing: drop what this acks from the other side's list; an exact match that
        // was never retransmitted is an RTT sample (Karn).
        if flags & TCP_ACK != 0 {
            let mut sample = None;
            // A segment is best timed when it is first SACKed: its cumulative ACK may wait for a
            // hole to be repaired, and would measure the repair, not the path.
            let blocks = t.sack_blocks();
            // RFC 2883: a first SACK block below the cumulative ACK, or inside the second block,
            // reports data received twice: if we saw that data retransmitted, the resend was
            // spurious (the original had arrived).
            if let Some(&(l, r)) = blocks.first() {
                let dsack = le(r, ack) || blocks.get(1).is_some_and(|&(l2, r2)| le(l2, l) && le(r, r2));
                if dsack {
                    if let Some(i) = rev.recent_retx.iter().rposition(|&(a, b, _, _)| le(a, l) && le(r, b)) {
                        let (rseq, _, rtags, delay) = rev.recent_retx.remove(i).expect("index from rposition");
                        if rtags & RETX_SPURIOUS == 0 {
                            unspurious_stats(&mut self.stats, rtags, delay);
                            out.proved_spurious = Some((rseq, rtags));
                        }
                    }
                }
            }
            // RACK's delivered send time. A retransmission delivered sooner than the path's
            // minimum RTT after it left is no evidence: the ACK may be for an earlier copy.
            let min_rtt = rev.rtt.min.unwrap_or(0);
            let mut delivered = rev.delivered_sent_ts;
            let mut deliver = |u: &Unacked| {
                if !u.retransmitted || now - u.ts_ns >= min_rtt {
                    delivered = delivered.max(u.ts_ns);
                }
            };
            if !blocks.is_empty() {
                let mut newest: Option<&Unacked> = None;
                for u in rev.segments.iter_mut() {
                    if !u.sacked && blocks.iter().any(|&(l, r)| le(l, u.seq) && le(u.nextseq, r)) {
                        deliver(u);
                        u.sacked = true;
                        if !u.retransmitted && newest.is_none_or(|n| u.ts_ns > n.ts_ns) {
                            sample = Some((now - u.ts_ns, u.bif));
                            newest = Some(u);
                        }
                    }
                }
                // A hole the receiver reports (cumulative ACK below a SACK block).
                if let Some(&(l, _)) = blocks.iter().filter(|b| gt(b.0, ack)).min_by_key(|b| b.0.wrapping_sub(ack)) {
                    if !rev.sack_holes.iter().any(|h| h.0 == ack) {
                        if rev.sack_holes.len() >= MAX_HOLES {
                            rev.sack_holes.pop_front();
                        }
                        // The resend may already be on its way while older ACKs report the hole.
                        let resent = rev.segments.iter().any(|u| u.retransmitted && le(ack, u.seq) && lt(u.seq, l));
                        rev.sack_holes.push_back((ack, l, resent));
                    }
                }
            }
            // Holes the cumulative ACK closed without any resend were reordered downstream.
            let mut reordered_downstream = 0;
            rev.sack_holes.retain(|&(start, end, resent)| {
                if le(end, ack) {
                    if !resent && gt(end, start) {
                        reordered_downstream += 1;
                    }
                    false
                } else {
                    true
                }
            });
            // Counted for the data's direction; no packet of ours shows it (the reordered
            // segment passed the capture in order), only the receiver's ACKs do.
            self.stats.reordered[1 - pk.dir] += reordered_downstream;
            // Karn's rule for the whole ACK (as Linux's FLAG_RETRANS_DATA_ACKED): an ACK that
            // retires retransmitted data may have waited for that repair, so its exact match
            // would time the recovery, not the path.
            let mut timed = None;
            let mut retired_retx = false;
            let mut settle = |u: &mut Unacked| {
                if gt(ack, u.seq) {
                    deliver(u);
                }
                if ack == u.nextseq {
                    retired_retx |= u.retransmitted;
                    if !u.retransmitted && !u.sacked && timed.is_none() {
                        timed = Some((now - u.ts_ns, u.bif));
                    }
                    false
                } else if gt(ack, u.seq) && le(ack, u.nextseq) {
                    u.seq = ack;
                    true
                } else {
                    let keep = !le(u.nextseq, ack);
                    retired_retx |= !keep && u.retransmitted;
                    keep
                }
            };
            // A cumulative ACK mostly retires segments at the front. Popping those first leaves
            // `retain_mut` nothing to remove, so it only scans instead of shifting every
            // segment behind them. `settle` on a segment it kept changes nothing, so the front
            // one may see it twice.
            while rev.segments.front_mut().is_some_and(|u| !settle(u)) {
                rev.segments.pop_front();
            }
            rev.segments.retain_mut(settle);
            rev.delivered_sent_ts = delivered;
            if sample.is_none() && !retired_retx {
                sample = timed;
            }
            // An ACK riding on new data was held back for that data (a request after think
            // time): it times the client's application, not the path.
            if seglen > 0 {
                sample = None;
            }
            if let Some((r, bif)) = sample.filter(|s| s.0 >= 0) {
                rev.est.add(r);
                rev.rtt.add(r);
                out.rtt_ns = Some(r);
                if pk.dir == 0 {
                    self.path.rtt(r, bif);
                }
            }
            if pk.dir == 0 && ack == rev.high && rev.high != 0 {
                self.path.drained(now);
            }
            if let Some((_, point)) = rev.recovery {
                if !lt(ack, point) {
                    rev.recovery = None;
                    rev.tail_episode = false;
                    // Recovery lasts from the episode's first resend to the ACK that ends it.
                    if let Some(since) = rev.recovery_since.take() {
                        self.stats.recovery_ns += now - since;
                    }
                }
            }
        }
        // Timestamp echo (pping): the first packet echoing a TSval the other side sent.
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

        // Wireshark's initial RTT (its out-of-order threshold): the most recent SYN (without
        // ACK) to the first segment that carries an ACK and no SYN: the whole handshake.
        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN {
            self.mru_syn_ts = Some(now);
        } else if flags & (TCP_SYN | TCP_ACK) == TCP_ACK && self.first_rtt_ns == 0 {
            if let Some(s) = self.mru_syn_ts {
                self.first_rtt_ns = (now - s).max(1);
            }
        }
        if !self.handshake_done && flags & (TCP_SYN | TCP_ACK) == TCP_ACK && pk.dir == 0 {
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
        self.count(pk.dir, ta);
        if flags & (TCP_SYN | TCP_ACK) == TCP_SYN && pk.dir == 0 {
            self.queries.syn(now);
        }
        let new_data = if out.retx_delay_ns.is_none() && ta & (KEEP_ALIVE | ZERO_WINDOW_PROBE | BAD_SEQ) == 0 {
            seglen
        } else {
            0
        };
        self.queries.observe(&Seen {
            c2s: pk.dir == 0,
            ts_ns: now,
            new_data,
            ack: (flags & TCP_ACK != 0).then_some(ack),
            server_next_seq: self.dir[1].high,
            tags: ta,
            retx_delay_ns: out.retx_delay_ns,
            synack: pk.dir == 1 && flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK,
            rtt_ns: if pk.dir == 0 { out.rtt_ns } else { None },
            rtt_min_ns: self.dir[1].rtt.min,
            tail_episode: out.retx_delay_ns.is_some() && ta & TAIL_LOSS == 0 && self.dir[pk.dir].tail_episode,
            reorder_ns,
        });
        out.tags = ta;
        out
    }

    fn note_syn(&mut self, dir: usize, flags: u16, seq: u32, now: i64, ta: &mut u32) {
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
    fn restart_on_new_isn(&mut self, ack: u32, now: i64) {
        let isn = ack.wrapping_sub(1);
        let Some(current) = self.server_isn else { return };
        if isn == current || !self.synack_isns.contains(&Some(isn)) {
            return;
        }
        let d = &mut self.dir[1];
        if gt(ack, current) && le(ack, d.high) {
            return; // it acknowledges bytes of the current sequence space
        }
        self.server_isn = Some(isn);
        d.high = ack;
        d.acked_ahead_ts = None;
        d.segments.retain(|u| u.seq == isn); // the SYN-ACK it answers
        d.holes.clear();
        d.sack_holes.clear();
        d.recent_retx.clear();
        d.recovery = None;
        d.tail_episode = false;
        // The handshake's recovery (SYN-ACKs repeated) ends here, as the ACK of a repeated
        // SYN-ACK with the same ISN would end it.
        if let Some(since) = d.recovery_since.take() {
            self.stats.recovery_ns += now - since;
        }
    }

    /// Run the flow-level detectors; called once when the flow ends.
    pub fn finish(&mut self, end_ns: i64) {
        let to_client = &self.dir[1].rtt;
        let min_rtt = to_client.min.or((self.first_rtt_ns > 0).then_some(self.first_rtt_ns));
        let p = |q: f64| to_client.percentile(q);
        self.verdicts = self.path.finish(end_ns, min_rtt, &p);
        self.queries.close();
        let v = &self.verdicts;
        self.queries.flow_verdicts(v.policed, v.bufferbloat, min_rtt, self.stats.handshake_rtt_ns);
        self.release();
    }

    /// Drop the per-segment state an ended flow no longer needs: ended flows wait in memory
    /// until a batch of them is written, and must not keep what only live analysis uses.
    fn release(&mut self) {
        for d in self.dir.iter_mut() {
            d.segments = VecDeque::new();
            d.holes = VecDeque::new();
            d.sack_holes = VecDeque::new();
            d.tsvals = VecDeque::new();
        }
        self.path.release();
    }

    /// Give back the spare capacity of a closed flow's buffers. A closed TCP flow lingers (two
    /// minutes by default) so late retransmissions still join it; at ten thousand packets a
    /// second that is thousands of flows, each holding the capacity its busiest moment grew
    /// (a bulk flow's in-flight queue alone can be tens of KiB). Nothing is dropped, so a late
    /// packet is analysed exactly as before. Cheap when already compact: called after every
    /// packet of a closed flow.
    pub fn compact(&mut self) {
        for d in self.dir.iter_mut() {
            d.segments.shrink_to_fit();
            d.holes.shrink_to_fit();
            d.sack_holes.shrink_to_fit();
            d.tsvals.shrink_to_fit();
            d.recent_retx.shrink_to_fit();
            d.rtt.shrink_to_fit();
        }
        self.stats.retx_delays_ns.shrink_to_fit();
        self.path.shrink_to_fit();
        self.queries.shrink_to_fit();
    }

    fn count(&mut self, dir: usize, ta: u32) {
        let s = &mut self.stats;
        if ta & OUT_OF_ORDER != 0 {
            s.out_of_order[dir] += 1;
        }
        if ta & REORDERED != 0 {
            s.reordered[dir] += 1;
        }
        if ta & LOST_SEGMENT != 0 {
            s.lost_segments[dir] += 1;
        }
        if ta & DUPLICATE_ACK != 0 {
            s.dup_acks[dir] += 1;
        }
        if ta & ZERO_WINDOW != 0 {
            s.zero_windows[dir] += 1;
        }
    }
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
    allowance < 1 << 31 && gt(seq, ack.wrapping_add(allowance as u32))
}

/// Whether the sender's retransmission timer has run out by `now` (and how long it has run): it
/// restarts at every send and at every ACK that advances.
fn timer_fired(fwd: &DirSeq, rev: &DirSeq, now: i64) -> (bool, i64) {
    let timer_start = match (fwd.last_send_ts, rev.last_advance_ts) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let gap = timer_start.map_or(i64::MAX, |t| now - t);
    (gap as f64 >= RTO_SHARE * fwd.est.rto() as f64, gap)
}

/// Remove the part of a recorded hole that `[seq, seq+len)` fills; the hole's age if it had one.
fn take_hole(d: &mut DirSeq, seq: u32, len: u32, now: i64) -> Option<i64> {
    let end = seq.wrapping_add(len.max(1));
    let i = d.holes.iter().position(|&(a, b, _)| le(a, seq) && lt(seq, b))?;
    let (a, b, t) = d.holes[i];
    d.holes.remove(i);
    if lt(a, seq) {
        d.holes.insert(i, (a, seq, t));
    }
    if lt(end, b) {
        d.holes.push_back((end, b, t));
    }
    Some(now - t)
}

/// Move a retransmission proved spurious from its cause's counters to `retx_spurious` (and out
/// of the tail losses if it was counted as one).
fn unspurious_stats(s: &mut TcpFlowStats, tags: u32, delay: i64) {
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

/// The cause of one retransmission (exactly one RETX_* bit).
#[allow(clippy::too_many_arguments)]
fn classify(
    fwd: &DirSeq,
    rev: &DirSeq,
    ta: u32,
    seq: u32,
    seglen: u32,
    flags: u16,
    now: i64,
    ip_id: Option<u32>,
    original: Option<Unacked>,
    (ack, win, tsval): (u32, u32, Option<u32>),
) -> u32 {
    if ta & SPURIOUS_RETRANSMISSION != 0 {
        return RETX_SPURIOUS;
    }
    // The network (or the capture), not the sender, repeated the packet: the same IP ID as the
    // original, or an exact copy — a sender's own resend changes the ACK, window or timestamp
    // value, or at least comes later than a millisecond.
    if let Some(o) = original.filter(|o| o.seq == seq && o.len == seglen) {
        let same_id = ip_id.is_some_and(|id| id != 0 && o.ip_id == Some(id));
        let same_fields = o.ack == ack && o.win == win && o.tsval == tsval;
        if same_id || (same_fields && (tsval.is_some() || now - o.ts_ns < 1_000_000)) {
            return RETX_NETWORK_DUPLICATE;
        }
    }
    if flags & TCP_SYN != 0 {
        return RETX_RTO; // handshake segments are only ever resent by their timer
    }
    let (timer_fired, gap) = timer_fired(fwd, rev, now);
    let probed = matches!(fwd.recovery, Some((RecoveryKind::Tlp, _)));
    match fwd.recovery {
        // A recovery that stalled until the timer fired is an RTO from here on.
        Some((RecoveryKind::Fast, _)) if timer_fired => return RETX_RTO,
        // Later retransmissions of an RTO or fast-recovery episode belong to what started it, up
        // to its recovery point; data first sent after that point was set is judged on its own.
        Some((RecoveryKind::Rto, point)) if lt(seq, point) => return RETX_RTO,
        Some((RecoveryKind::Fast, point)) if lt(seq, point) => return RETX_FAST,
        // A loss probe is one packet: what follows it is judged on its own.
        _ => {}
    }
    if ta & FAST_RETRANSMISSION != 0 {
        return RETX_FAST;
    }
    let dupacks = rev.dupacknum.max(0);
    let sacked_above = rev.sack_high.is_some_and(|h| gt(h, seq));
    let at_hole = rev.lastack == seq;
    let srtt = fwd.est.srtt().unwrap_or(0);
    // An ACK-driven resend follows the ACK that revealed the loss promptly (RACK waits at most
    // a fraction of an RTT); one long after it was the timer, whatever the ACK had shown. From
    // the capture, the ACK must first reach the sender and the resend come back: the half of the
    // round trip on the sender's side, which the peer's samples measure (the peer's data passes
    // the capture, the sender's ACK of it comes back). For a sender next to the capture that is
    // nothing; for one on the far side it is most of the RTT.
    let sender_side = rev.est.srtt().unwrap_or(0);
    let prompt = rev.lastack_ts > 0 && now - rev.lastack_ts <= (srtt + sender_side).max(FAST_RETX_WINDOW_NS);
    // RACK: a segment sent after this one's latest transmission reached the receiver, so this
    // one is lost (RFC 8985 §6.2), although no SACK above it is in the latest ACK and it is not
    // at the hole (losses found this way once the ACKs that showed them have passed).
    // RACK retransmits on the ACK that delivered the later segment, or when its reordering
    // window (a quarter of the RTT) runs out: a resend later than that was its timer's.
    let rack_prompt = rev.lastack_ts > 0 && now - rev.lastack_ts <= sender_side + (srtt / 4).max(FAST_RETX_WINDOW_NS);
    let rack_lost = rack_prompt && original.is_some_and(|o| fwd.delivered_sent_ts > o.ts_ns);
    if prompt && (sacked_above || (at_hole && dupacks >= 2) || rack_lost) {
        return RETX_FAST; // dupACK or SACK driven (RFC 5681, RFC 6675, RFC 8985 RACK)
    }
    if timer_fired {
        return RETX_RTO;
    }
    if probed {
        return RETX_RTO; // a probe fires once per episode; the next timer is the RTO
    }
    let highest = seq.wrapping_add(seglen) == fwd.high;
    if highest && dupacks == 0 && !sacked_above && gap as f64 >= TLP_MIN_SRTTS * srtt as f64 {
        return RETX_TLP;
    }
    if prompt && (sacked_above || (at_hole && dupacks >= 1)) {
        return RETX_FAST;
    }
    RETX_UNKNOWN
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;
    const A: u16 = TCP_ACK;
    const PA: u16 = TCP_ACK | 0x008;

    /// One packet through the analysis: (direction 0 = c2s, time in ms, seq, ack, flags, payload
    /// length, raw window, IPv4 ID).
    #[allow(clippy::too_many_arguments)]
    fn feed(
        st: &mut TcpState,
        dir: usize,
        ms: i64,
        seq: u32,
        ack: u32,
        flags: u16,
        len: u32,
        window: u16,
        ip_id: Option<u32>,
    ) -> Analysis {
        let tcp = TcpInfo { seq, ack, flags, window, header_len: 20, ..TcpInfo::default() };
        st.analyze(&PacketIn { dir, ts_ns: ms * MS, tcp: &tcp, seglen: len, ip_id, peer_window_shift: None })
    }

    /// A handshake at 0-40 ms (client ISN `c`, server ISN `s`) and a 100-byte request at 41 ms.
    fn handshake_and_request(c: u32, s: u32) -> TcpState {
        let mut st = TcpState::default();
        feed(&mut st, 0, 0, c, 0, TCP_SYN, 0, 65535, None);
        feed(&mut st, 1, 0, s, c + 1, TCP_SYN | A, 0, 65535, None);
        feed(&mut st, 0, 40, c + 1, s + 1, A, 0, 65535, None);
        feed(&mut st, 0, 41, c + 1, s + 1, PA, 100, 65535, None);
        st
    }

    fn cause(a: &Analysis) -> Option<&'static str> {
        cause_name(a.tags)
    }

    /// RACK (RFC 8985 §6.2): a segment sent before one the receiver got is lost; its prompt resend
    /// is a fast retransmit although the latest ACK neither SACKs above it nor repeats (the SACK
    /// block that showed the later segment can have dropped off the receiver's list).
    #[test]
    fn a_prompt_resend_on_rack_evidence_is_a_fast_retransmit() {
        let (c, s) = (1_000u32, 5_000u32);
        let mut st = handshake_and_request(c, s);
        for i in 0..3u32 {
            feed(&mut st, 1, 50 + i64::from(i), s + 1 + 1000 * i, c + 101, PA, 1000, 65535, None);
        }
        feed(&mut st, 0, 90, c + 101, s + 1001, A, 0, 65535, None); // segment 0 acked, no SACK
        let mut rack = st.clone();
        rack.dir[1].delivered_sent_ts = 52 * MS; // segment 2 was SACKed by an earlier ACK
        let resend = |st: &mut TcpState| cause(&feed(st, 1, 91, s + 1001, c + 101, PA, 1000, 65535, None));
        assert_eq!(resend(&mut rack), Some("fast_retransmit"));
        assert_eq!(resend(&mut st), Some("unknown"), "no evidence without RACK");
    }

    /// tls_multiple_synack_different_seq.pcapng: the server answers with SYN-ACKs of different
    /// ISNs and the client acknowledges a later one. Its data is a first transmission, although
    /// Wireshark's mark (from the first ISN) still flags it; a real resend is still one.
    #[test]
    fn acked_new_isn_restarts_the_server_sequence() {
        let (c, s1) = (3_420_771_759u32, 238_755_595u32);
        let s2 = 2_829_651_200u32; // 2.6e9 above s1: behind it in sequence arithmetic
        let mut st = TcpState::default();
        feed(&mut st, 0, 0, c - 1, 0, TCP_SYN, 0, 65535, None);
        feed(&mut st, 1, 1, s1, c, TCP_SYN | A, 0, 65535, None);
        let again = feed(&mut st, 1, 3_000, s1, c, TCP_SYN | A, 0, 65535, None);
        assert_ne!(again.tags & SYNACK_RETRANSMISSION, 0, "same ISN: a SYN-ACK retransmission");
        let new_isn = feed(&mut st, 1, 9_000, s2, c, TCP_SYN | A, 0, 65535, None);
        assert_ne!(new_isn.tags & SYNACK_RETRANSMISSION, 0, "still a repeated answer to the handshake");
        feed(&mut st, 0, 9_300, c, s2 + 1, PA, 517, 8192, None);
        for (i, len) in [96u32, 1360, 1360].iter().enumerate() {
            let off: u32 = [96u32, 1360, 1360][..i].iter().sum();
            let a = feed(&mut st, 1, 9_500, s2 + 1 + off, c + 517, PA, *len, 119, None);
            assert_ne!(a.tags & RETRANSMISSION, 0, "Wireshark's flag stays (tshark agrees)");
            assert_eq!((cause(&a), a.retx_delay_ns), (None, None), "segment {i} is a first transmission");
        }
        assert_eq!(st.stats.retx_packets, [0, 0]);
        assert_eq!(st.dir[1].high, s2 + 1 + 96 + 2720);
        // The client never acks the last segment: its resend 2 s later is a retransmission.
        let resend = feed(&mut st, 1, 11_500, s2 + 1 + 1456, c + 517, PA, 1360, 119, None);
        assert_eq!(cause(&resend), Some("rto"));
        assert_eq!(st.stats.retx_packets, [0, 1]);
    }

    /// reasm_crash_anon.pcapng frames 6-9: a pure ACK whose sequence number is damaged to 402 MB
    /// ahead, a copy of it (same IPv4 ID) damaged differently, then the client's next request.
    #[test]
    fn damaged_sequence_numbers_do_not_move_the_mark() {
        let (c, s) = (1_006_330_879u32, 3_717_323_610u32);
        let mut st = TcpState::default(); // mid-stream: no handshake, window scale unknown
        feed(&mut st, 0, 0, c, s, PA, 13, 8507, Some(0x18d));
        feed(&mut st, 1, 1, s, c + 13, PA, 54, 453, Some(0xa51e));
        // Without an ACK from the peer nothing is out of window (as for Wireshark and tcptrace):
        let mut fresh = TcpState::default();
        let far = feed(&mut fresh, 0, 0, c + 0x1800_0000, s, A, 0, 8507, Some(1));
        assert_eq!(far.tags & BAD_SEQ, 0);
        // 402 MB beyond the server's ACK, far past 2 x (453 << 14) + 64 KiB: damaged.
        let bad = feed(&mut st, 0, 2, c + 13 + 0x1800_0000, s + 54, A, 12, 8507, Some(0x18f));
        assert_ne!(bad.tags & BAD_SEQ, 0);
        assert_ne!(bad.tags & LOST_SEGMENT, 0, "Wireshark's tag stays");
        // Its copy, 32 bytes ahead: in the window, but the copies disagree and this one jumps.
        let copy = feed(&mut st, 0, 3, c + 13 + 32, s + 54, A, 0, 8507, Some(0x18f));
        assert_ne!(copy.tags & BAD_SEQ, 0);
        assert_eq!(st.dir[0].high, c + 13);
        let next = feed(&mut st, 0, 30_000, c + 13, s + 54, PA, 13, 8507, Some(0x190));
        assert_ne!(next.tags & RETRANSMISSION, 0, "Wireshark's mark is 402 MB ahead");
        assert_eq!((cause(&next), next.tags & TAIL_LOSS), (None, 0));
        // An identical copy (capture duplicate) is no damage, and still a network duplicate.
        let dup = feed(&mut st, 0, 30_000, c + 13, s + 54, PA, 13, 8507, Some(0x190));
        assert_eq!((dup.tags & BAD_SEQ, cause(&dup)), (0, Some("network_duplicate")));
        assert_eq!(st.stats.retx_packets, [1, 0]);
    }

    /// A sender with a constant (non-zero) IPv4 ID: its segments are not copies of each other,
    /// even when one jumps past a hole.
    #[test]
    fn constant_ip_id_is_no_copy() {
        let (c, s) = (1_000u32, 9_000u32);
        let mut st = TcpState::default();
        feed(&mut st, 1, 0, s, c, A, 0, 453, None);
        for (i, at) in [0u32, 1000, 3000].iter().enumerate() {
            let a = feed(&mut st, 0, 1 + i as i64, c + at, s, PA, 1000, 8507, Some(7));
            assert_eq!(a.tags & BAD_SEQ, 0);
        }
        assert_eq!(st.dir[0].high, c + 4000);
        let fill = feed(&mut st, 0, 500, c + 2000, s, PA, 1000, 8507, Some(7));
        assert!(cause(&fill).is_some(), "the hole's bytes were sent before (lost upstream)");
    }

    /// reasm_crash_anon.pcapng frames 34-35: a FIN on a RST (damaged flags) takes no sequence
    /// number on our mark, so the next request at the same sequence number is new data.
    #[test]
    fn fin_on_a_rst_takes_no_sequence_number() {
        let (c, s) = (1_000u32, 9_000u32);
        let mut st = TcpState::default();
        feed(&mut st, 0, 0, c, s, PA, 13, 8507, None);
        feed(&mut st, 1, 1, s, c + 13, PA, 54, 453, None);
        let rst_fin = feed(&mut st, 0, 2, c + 13, s + 54, TCP_RST | TCP_FIN | A, 0, 59, None);
        assert_eq!(st.dir[0].high, c + 13);
        assert_eq!(cause(&rst_fin), None);
        let next = feed(&mut st, 0, 30_000, c + 13, s + 54, PA, 13, 8507, None);
        assert_eq!(cause(&next), None);
        assert_eq!(st.dir[0].nextseq, c + 26);
        // A plain FIN does take one.
        feed(&mut st, 0, 30_001, c + 26, s + 54, TCP_FIN | A, 0, 8507, None);
        assert_eq!(st.dir[0].high, c + 27);
    }

    /// ipv6-http-atomic-frag.pcap frames 5-8: the client's request is written to the file after
    /// the server's ACK of it, stamped 27 us before that ACK. It is the original, not a spurious
    /// retransmission; the same bytes sent again after the ACK are one.
    #[test]
    fn late_recorded_original_is_no_retransmission() {
        let (c, s) = (3_810_442_574u32, 3_185_309_716u32);
        let mut st = TcpState::default();
        let at = |st: &mut TcpState, dir: usize, t_us: i64, seq: u32, ack: u32, flags: u16, len: u32| {
            let tcp = TcpInfo { seq, ack, flags, window: 8192, header_len: 20, ..TcpInfo::default() };
            st.analyze(&PacketIn {
                dir,
                ts_ns: t_us * 1_000,
                tcp: &tcp,
                seglen: len,
                ip_id: None,
                peer_window_shift: None,
            })
        };
        at(&mut st, 0, 0, c, 0, TCP_SYN, 0);
        at(&mut st, 1, 12, s, c + 1, TCP_SYN | A, 0);
        at(&mut st, 0, 13_000, c + 1, s + 1, A, 0);
        at(&mut st, 1, 41_740, s + 1, c + 16, A, 0); // acks 15 bytes not seen yet
        let late = at(&mut st, 0, 41_713, c + 1, s + 1, PA, 15);
        assert_ne!(late.tags & SPURIOUS_RETRANSMISSION, 0, "Wireshark's flags stay (tshark agrees)");
        assert_eq!((cause(&late), late.retx_delay_ns), (None, None));
        assert_eq!(st.stats.retx_packets, [0, 0]);
        let again = at(&mut st, 0, 50_000, c + 1, s + 1, PA, 15);
        assert_eq!(cause(&again), Some("spurious"));
        // In time order, bytes never seen but already acknowledged stay spurious (Wireshark).
        let mut st = TcpState::default();
        at(&mut st, 0, 0, c, 0, TCP_SYN, 0);
        at(&mut st, 1, 12, s, c + 1, TCP_SYN | A, 0);
        at(&mut st, 1, 41_740, s + 1, c + 16, A, 0);
        let after = at(&mut st, 0, 41_800, c + 1, s + 1, PA, 15);
        assert_eq!(cause(&after), Some("spurious"));
    }

    /// A closed flow lingering for late packets gives back its buffers' spare capacity, and a
    /// late packet is analysed exactly as without the compaction.
    #[test]
    fn compacting_a_closed_flow_keeps_its_analysis() {
        let (c, s) = (1_000u32, 5_000u32);
        let mut st = handshake_and_request(c, s);
        for i in 0..200u32 {
            feed(&mut st, 1, 50, s + 1 + 1000 * i, c + 101, PA, 1000, 65535, None);
        }
        let end = s + 1 + 200_000;
        feed(&mut st, 0, 90, c + 101, end, A, 0, 65535, None);
        feed(&mut st, 1, 91, end, c + 101, TCP_FIN | A, 0, 65535, None);
        feed(&mut st, 0, 131, c + 101, end + 1, TCP_FIN | A, 0, 65535, None);
        feed(&mut st, 1, 132, end + 1, c + 102, A, 0, 65535, None);
        assert!(st.dir[1].segments.capacity() >= 200, "the in-flight queue grew");
        let mut compact = st.clone();
        compact.compact();
        assert_eq!(compact.dir[1].segments.capacity(), 0);
        assert!(compact.path.tx.capacity() == compact.path.tx.len());
        // A late resend of the server's FIN a second later, then the flow ends.
        let late = |st: &mut TcpState| {
            let a = feed(st, 1, 1_132, end, c + 102, TCP_FIN | A, 0, 65535, None);
            st.finish(2_000 * MS);
            format!("{a:?} {:?} {:?}", st.stats, st.verdicts)
        };
        assert_eq!(late(&mut compact), late(&mut st));
    }
}

//! One direction's sequence state: Wireshark's `tcp_analyze_seq_info` plus what our judgement of
//! retransmissions, the ACK path and the RTT samples need. Every phase of the analysis reads and
//! updates it.

use std::collections::VecDeque;

use super::scoreboard::Scoreboard;
use crate::rtt::{Estimator, Samples};
use crate::spare::ShrinkSpare;

/// Unacknowledged segments remembered per direction (Wireshark keeps at most 10,000).
pub(super) const MAX_UNACKED: usize = 10_000;
/// Timestamp values remembered per direction for echo-based RTT samples.
pub(super) const MAX_TSVALS: usize = 64;
/// Holes remembered per direction.
pub(super) const MAX_HOLES: usize = 64;
/// Data resends awaiting their covering ACK on a flow without SACK, per direction: a timeout's
/// go-back-N resends a whole window before the first of them is answered, so the bound is the
/// window's, as for unacknowledged segments (lab axis pool, seed 1 with SACK off under BBR: 78
/// resends in one round trip; at 64 the first 14 left before their ACK, 14 spurious missed).
pub(super) const MAX_DATA_RESENDS: usize = MAX_UNACKED;
/// SYN-ACK initial sequence numbers remembered per flow (a server answering repeated SYNs with
/// new ISNs, e.g. SYN cookies).
pub(super) const MAX_SYNACK_ISNS: usize = 4;

/// A segment sent and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unacked {
    pub(super) seq: u32,
    pub(super) nextseq: u32,
    pub(super) ts_ns: i64,
    /// When the bytes at `seq` were first sent (a retransmission keeps the original's time).
    pub(super) first_ts_ns: i64,
    pub(super) retransmitted: bool,
    pub(super) ip_id: Option<u32>,
    pub(super) len: u32,
    /// Bytes in flight just after this segment was sent.
    pub(super) bif: u32,
    pub(super) sacked: bool,
    pub(super) ack: u32,
    pub(super) win: u32,
    pub(super) tsval: Option<u32>,
    /// Its index in the pathology detectors' transmission log (server data only).
    pub(super) tx_idx: Option<u32>,
    /// Its sending number in its direction (set by `Scoreboard::push`): which of several
    /// matching segments was sent first or last.
    pub(super) idx: u64,
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
    pub(super) nextseq: u32,
    pub(super) nextseq_ts: i64,
    pub(super) maxseqtobeacked: u32,
    pub(super) lastack: u32,
    pub(super) lastack_ts: i64,
    pub(super) window: u32,
    pub(super) dupacknum: i32,
    /// When this direction last sent a duplicate ACK (Wireshark's definition).
    pub(super) last_dupack_ts: Option<i64>,
    pub(super) lastsegmentflags: u32,
    /// Segments sent and not yet acknowledged, in sequence order.
    pub(super) segments: Scoreboard,
    /// Highest right edge of the SACK blocks in this direction's latest ACK.
    pub(super) sack_high: Option<u32>,
    pub(super) last_send_ts: Option<i64>,
    /// When the sender's retransmission timer was last (re)armed by a send: a send with nothing
    /// outstanding, or a resend of the oldest outstanding byte. Linux does not re-arm it for new
    /// data sent while older data is outstanding (tcp_event_new_data_sent re-arms only when
    /// nothing was in flight; tcp_xmit_retransmit_queue when it resends the head); ACKs that
    /// advance re-arm it too (`last_advance_ts` of the peer).
    pub(super) rto_armed_ts: Option<i64>,
    /// This direction's ACKs have carried SACK blocks.
    pub(super) sacks: bool,
    /// Data this direction sends, acked by the other: its RTO estimate and samples.
    pub est: Estimator,
    pub rtt: Samples,
    pub(super) recovery: Option<(RecoveryKind, u32)>,
    /// The current recovery episode holds a tail loss: its later resends repair the tail.
    pub(super) tail_episode: bool,
    pub(super) recovery_since: Option<i64>,
    pub(super) tsvals: VecDeque<(u32, i64)>,
    pub(super) last_tsval: Option<u32>,
    /// The newest TCP timestamp (TSval) this sender's packets carried: a hole-filler stamped
    /// before it was sent before packets the capture already saw.
    pub(super) newest_tsval: Option<u32>,
    /// When the capture first saw `newest_tsval`, and the first TSval it saw from this sender
    /// with its time: how fast the sender's timestamp clock ticks (`TsClock`).
    pub(super) ts_clock: TsClock,
    /// The same for the IPv4 ID, with how many of the sender's packets stepped it forward
    /// by a little (a per-connection counter, as Linux keeps) out of how many were seen, and
    /// how many by exactly one.
    pub(super) newest_ip_id: Option<u16>,
    pub(super) ip_id_steps: (u32, u32, u32),
    /// Sequence ranges skipped by this direction (seen as `lost_segment`), with when the hole
    /// appeared: a later segment filling one is reordering or a retransmission, by its age.
    pub(super) holes: VecDeque<(u32, u32, i64)>,
    /// When a hole of this direction was last filled by a resend: the sender was repairing
    /// losses, and its RACK may resend the next one before the receiver sees that hole.
    pub(super) resend_fill_ts: Option<i64>,
    /// Holes the receiver reported in SACKs for this direction's data: (start, end, resent).
    pub(super) sack_holes: VecDeque<(u32, u32, bool)>,
    /// The highest cumulative ACK the peer sent for this direction's data. An ACK below it was
    /// overtaken on the way (ACKs reordered): the holes its SACK blocks show are closed already.
    pub(super) peer_ack_high: Option<u32>,
    /// When this direction's ACK last advanced: Linux re-arms the sender's RTO there.
    pub(super) last_advance_ts: Option<i64>,
    /// Recent retransmissions of this direction: (seq, end, tags, delay, when sent), for D-SACK
    /// checks and the ACK that answered a held original (`ack::answered_original`).
    pub(super) recent_retx: VecDeque<(u32, u32, u32, i64, i64)>,
    /// The resends of this direction's bare FIN, until an ACK covers it: (seq, TSval, tags,
    /// delay) each, for the Eifel check (RFC 3522) of that ACK's echo.
    pub(super) fin_resends: Vec<(u32, u32, u32, i64)>,
    /// This direction's data resends until an ACK covers them, for the Eifel check (RFC 3522) of
    /// that ACK's echo (`ack::eifel_data`): on a flow without SACK, and on one with SACK and
    /// timestamps (for a resend whose D-SACK never comes).
    pub(super) data_resends: VecDeque<DataResend>,
    /// The resends the latest ACK covered, all but the first of them (the one that filled the
    /// hole), for the duplicate ACKs that follow (`ack::duplicates_answered`).
    pub(super) covered_resends: CoveredResends,
    /// RACK (RFC 8985 §6.1): the latest send time of this direction's segments the receiver is
    /// known to have got (SACKed or acknowledged); 0 before any.
    pub(super) delivered_sent_ts: i64,
    /// tailscope's highest sequence sent + 1 (0 unset), which our judgement uses: it moves as
    /// `nextseq` does, except that a segment with a damaged sequence number (`BAD_SEQ`) does not
    /// move it, a FIN on a RST takes no sequence number, and it restarts when the client
    /// acknowledges a SYN-ACK with a new ISN (docs/signatures.md).
    pub(super) high: u32,
    /// When the peer first acknowledged bytes of this direction beyond `high` (bytes the capture
    /// had not seen); cleared when `high` reaches the peer's ACK.
    pub(super) acked_ahead_ts: Option<i64>,
    /// The ACK number and raw window of this direction's latest packet with the ACK flag, and
    /// whether it was a SYN (whose window is never scaled).
    pub(super) adv: Option<(u32, u16, bool)>,
    /// This direction's previous packet: its IPv4 ID and where its sequence range ends (for
    /// telling a damaged copy of it).
    pub(super) prev: Option<(u32, u32)>,
    /// This sender gave two different segments the same IPv4 ID (a constant ID): its IDs do not
    /// tell copies.
    pub(super) ip_id_reused: bool,
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
            last_dupack_ts: None,
            lastsegmentflags: 0,
            segments: Scoreboard::default(),
            sack_high: None,
            last_send_ts: None,
            rto_armed_ts: None,
            sacks: false,
            est: Estimator::default(),
            rtt: Samples::default(),
            recovery: None,
            tail_episode: false,
            recovery_since: None,
            tsvals: VecDeque::new(),
            last_tsval: None,
            newest_tsval: None,
            ts_clock: TsClock::default(),
            newest_ip_id: None,
            ip_id_steps: (0, 0, 0),
            holes: VecDeque::new(),
            resend_fill_ts: None,
            sack_holes: VecDeque::new(),
            peer_ack_high: None,
            recent_retx: VecDeque::new(),
            fin_resends: Vec::new(),
            data_resends: VecDeque::new(),
            covered_resends: CoveredResends::default(),
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

impl DirSeq {
    /// Drop what only live analysis uses (the flow has ended).
    pub(super) fn release(&mut self) {
        self.segments.release();
        self.holes = VecDeque::new();
        self.sack_holes = VecDeque::new();
        self.tsvals = VecDeque::new();
        self.fin_resends = Vec::new();
        self.data_resends = VecDeque::new();
        self.covered_resends.pool = Vec::new();
    }

    /// Give back spare capacity worth a reallocation (`ShrinkSpare`), keeping every entry.
    pub(super) fn shrink_to_fit(&mut self) {
        self.segments.shrink_to_fit();
        self.holes.shrink_spare();
        self.sack_holes.shrink_spare();
        self.tsvals.shrink_spare();
        self.recent_retx.shrink_spare();
        self.rtt.shrink_to_fit();
    }
}

/// The sending direction's state and its peer's, both mutable.
pub(super) fn sender_and_peer(dirs: &mut [DirSeq; 2], dir: usize) -> (&mut DirSeq, &mut DirSeq) {
    let (a, b) = dirs.split_at_mut(1);
    if dir == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    }
}

/// A data resend on a flow without SACK, waiting for the ACK that covers it (`ack::eifel_data`).
#[derive(Debug, Clone, Copy)]
pub(super) struct DataResend {
    pub seq: u32,
    pub end: u32,
    /// Its TSval; None on a flow without timestamps.
    pub tsval: Option<u32>,
    /// An echo before this stamp in the ACK that first covers the resend proves it spurious
    /// (`ack::eifel_data`): the resend's own stamp without SACK; with SACK, one past the stamp
    /// of the copy it repeats (a Linux receiver moves TS.Recent only for a segment at the point
    /// it last acknowledged, so one arriving right behind the segment that filled the hole
    /// leaves that segment's stamp in the echo: CI pool draw0037_policing, a fast retransmit
    /// 1 ms after the previous one, covered by an ACK echoing the previous one's stamp).
    pub proves_below: Option<u32>,
    pub tags: u32,
    pub delay: i64,
    pub sent: i64,
    /// What this resend marked lost in the policing log (`Pathology::lost`), to take back if
    /// the resend proves spurious.
    pub lost_tx: Option<LostBytes>,
}

/// Resends one ACK covered on a flow without SACK: each duplicate of that ACK sooner than a
/// round trip after it answers one of them (`ack::duplicates_answered`).
#[derive(Debug, Clone, Default)]
pub(super) struct CoveredResends {
    pub pool: Vec<DataResend>,
    /// The covering ACK's number and when it came.
    pub ack: u32,
    pub at: i64,
}

/// Bytes of one logged transmission (`Pathology::sent`'s index) a resend says were lost.
#[derive(Debug, Clone, Copy)]
pub(super) struct LostBytes {
    pub tx: u32,
    pub offset: u32,
    pub len: u32,
}

/// A sender's timestamp clock as the capture sees it: the first TSval and when it was seen, and
/// when the newest TSval was first seen.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct TsClock {
    first: Option<(u32, i64)>,
    newest_since: i64,
}

/// Fewest ticks between the first and the newest TSval before the clock's rate is trusted.
const TS_CLOCK_MIN_TICKS: u32 = 20;
/// The slowest clock whose ticks are fine enough to date a segment within its burst: 500 Hz
/// (Linux and the BSDs tick at 1 kHz; RFC 7323 allows 1 ms to 1 s).
const TS_CLOCK_MAX_TICK_NS: i64 = 2_000_000;

impl TsClock {
    /// Any TSval of the sender's, seen at `now`: the first one starts the clock.
    pub(super) fn first(&mut self, v: u32, now: i64) {
        self.first.get_or_insert((v, now));
    }

    /// A TSval newer than every earlier one, first seen at `now`.
    pub(super) fn newest(&mut self, now: i64) {
        self.newest_since = now;
    }

    /// How long ago the newest TSval was first seen, when the clock ticks at least every
    /// `TS_CLOCK_MAX_TICK_NS` (measured over `TS_CLOCK_MIN_TICKS` or more): segments stamped
    /// alike left within one tick of each other.
    pub(super) fn newest_age(&self, newest: u32, now: i64) -> Option<i64> {
        let (v0, t0) = self.first?;
        let ticks = newest.wrapping_sub(v0);
        let fine = ticks >= TS_CLOCK_MIN_TICKS && (self.newest_since - t0) <= TS_CLOCK_MAX_TICK_NS * i64::from(ticks);
        fine.then_some(now - self.newest_since)
    }
}

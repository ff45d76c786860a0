//! Per-packet TCP analysis: Wireshark's sequence analysis (so our tags mean what
//! `tcp.analysis.*` means), then our own classification of each retransmission's cause, RTT
//! samples, and the loss episodes (SYN, SYN-ACK, tail) the flow and events tables report.
//! Definitions, thresholds and sources: docs/signatures.md.
//!
//! One packet passes the phases of `TcpState::analyze` in order, each in its own file:
//! - `handshake`: SYN/SYN-ACK repeats, the server's ISN, the handshake RTT and the vantage;
//! - `wireshark`: Wireshark's `tcp_analyze_sequence_number`, which gives the peer-compatible tags;
//! - `retransmission`: our judgement of the segment (damaged sequence number, retransmission or
//!   reordering) and the recovery episode it belongs to; `cause` names why it was resent;
//! - `send`: what the segment leaves on the sender's side (in-flight list, marks, holes);
//! - `ack`: what its ACK settles on the other side (SACK, D-SACK, RACK, RTT samples, recovery end).
//!
//! `direction` holds one direction's sequence state, which all phases share, with its
//! `scoreboard` (the segments in flight, in sequence order: an ACK costs O(log n + what it
//! changes)); `summary` is what the flow's row reports when it ends (its figures and its
//! flow-level signatures).

mod ack;
mod cause;
mod direction;
mod handshake;
mod retransmission;
mod scoreboard;
mod send;
mod summary;
#[cfg(test)]
mod tests;
mod wireshark;

use tailscope_parsers::decode::{TcpInfo, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

use crate::pathology::{Pathology, Verdicts};
use crate::queries::{QueryTracker, Seen};
use crate::rtt::Samples;
use crate::tags::*;

use direction::MAX_SYNACK_ISNS;
pub use direction::{DirSeq, RecoveryKind};
pub use handshake::Vantage;
pub use summary::TcpSummary;

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
    /// Data packets judged network duplicates, per direction (counted in `retx_packets` too, as
    /// tcptrace counts them): what `retx_packets` holds that the sender never resent.
    pub network_duplicates: [u64; 2],
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
    /// Earlier retransmissions proved spurious by this packet, by the direction of their data
    /// (0 = client to server): (seq, tags the latest was given, how many: the latest rows of
    /// that sequence number with a cause). A D-SACK proves the other direction's; an original
    /// arriving after its own resend proves that resend's (same direction); the echo in an ACK
    /// of a resent FIN proves every resend stamped after it.
    pub proved_spurious: [Option<(u32, u32, u8)>; 2],
    /// More resends this packet proved spurious, of other sequence numbers (direction of their
    /// data, seq): the echo in one ACK can prove several data resends of a flow without SACK
    /// (`ack::eifel_data`). Empty (no allocation) otherwise.
    pub also_proved_spurious: Vec<(u8, u32)>,
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
    /// The server's segment size: its largest segment, but never above the MSS the client's SYN
    /// offered (a capture taken above TSO/GSO shows super-segments of up to 64 kB).
    server_mss: u32,
    client_syn_mss: Option<u32>,
    /// The client's window scale, as the server's sends apply it.
    client_window_shift: Option<u8>,
    /// The client's latest ACK and the right edge of the window it advertised (ACK + scaled
    /// window).
    client_window_edge: Option<(u32, u64)>,
    /// A SYN or SYN-ACK of the flow did not offer SACK: no D-SACK will tell a duplicate, and
    /// the timestamp echo is the proof of a spurious data resend (`ack::eifel_data`).
    no_sack: bool,
}

/// `window_shift` is the flow's window scale for the packet's direction, when known.
pub struct PacketIn<'a> {
    pub dir: usize,
    pub ts_ns: i64,
    pub tcp: &'a TcpInfo,
    pub seglen: u32,
    pub ip_id: Option<u32>,
    pub peer_window_shift: Option<u8>,
    /// The payload bytes the capture kept (TLS record headers for the queries).
    pub payload: &'a [u8],
}

/// One packet's fields as the phases read them.
struct Segment<'a> {
    dir: usize,
    now: i64,
    seq: u32,
    ack: u32,
    flags: u16,
    /// The raw (unscaled) window.
    window: u32,
    seglen: u32,
    /// A SYN or FIN, which takes one sequence number.
    syn_fin: bool,
    tcp: &'a TcpInfo,
    ip_id: Option<u32>,
    peer_window_shift: Option<u8>,
    payload: &'a [u8],
}

impl<'a> Segment<'a> {
    fn of(pk: &PacketIn<'a>) -> Self {
        let t = pk.tcp;
        Segment {
            dir: pk.dir,
            now: pk.ts_ns,
            seq: t.seq,
            ack: t.ack,
            flags: t.flags,
            window: u32::from(t.window),
            seglen: pk.seglen,
            syn_fin: t.flags & (TCP_SYN | TCP_FIN) != 0,
            tcp: t,
            ip_id: pk.ip_id,
            peer_window_shift: pk.peer_window_shift,
            payload: pk.payload,
        }
    }
    /// An ACK without SYN: a handshake's last step, or any later segment.
    fn is_plain_ack(&self) -> bool {
        self.flags & (TCP_SYN | TCP_ACK) == TCP_ACK
    }
    /// A RST without payload claims no bytes: its sequence number may be anything the peer's
    /// ACK said (RFC 9293 §3.10.7.1 answers an unacceptable ACK with <SEQ=SEG.ACK><CTL=RST>), so
    /// it moves no mark (repro `rst_moves_mark.pcap`: a stale ACK's number, then a new handshake).
    fn is_bare_rst(&self) -> bool {
        self.flags & TCP_RST != 0 && self.seglen == 0
    }
}

impl TcpState {
    /// One packet through the phases, in order; each phase sees the state the previous left.
    pub fn analyze(&mut self, pk: &PacketIn<'_>) -> Analysis {
        let s = Segment::of(pk);
        // The client took another SYN-ACK than the one the server's sequence state counts from.
        if s.dir == 0 && s.is_plain_ack() {
            self.restart_on_new_isn(s.ack, s.now);
        }
        // Wireshark's tags, then our judgement of the same segment and, for a retransmission,
        // its cause and episode.
        let mut ta = self.wireshark_tags(&s);
        let judged = self.judge(&s, &mut ta);
        let mut out = Analysis::default();
        out.proved_spurious[s.dir] = judged.proved_spurious.map(|(seq, tags)| (seq, tags, 1));
        if judged.is_retx {
            out.retx_delay_ns = Some(self.retransmission(&s, &mut ta, judged.hole_age));
        }
        if s.flags & TCP_SYN != 0 {
            self.note_syn(s.dir, s.flags, s.seq, s.now, &mut ta);
            self.no_sack |= !s.tcp.sack_permitted;
        }
        // The sender's side, then what the ACK settles on the other side.
        self.record_send(&s, ta, &judged, out.retx_delay_ns);
        self.remember_ack_fields(&s, ta);
        if s.flags & TCP_ACK != 0 {
            self.process_ack(&s, &mut out);
        }
        self.client_window(&s);
        self.timestamp_echo(&s, &mut out);
        self.note_handshake_progress(&s);
        // What the flow and query tables take from this packet.
        self.count(s.dir, ta);
        self.report_to_queries(&s, ta, &out, &judged);
        // A resend proved spurious here was charged to its exchange as what triggered it.
        for (dir, proved) in out.proved_spurious.iter().enumerate() {
            if let Some((seq, _, _)) = *proved {
                self.queries.prove_spurious(dir == 0, seq);
            }
        }
        for &(dir, seq) in &out.also_proved_spurious {
            self.queries.prove_spurious(dir == 0, seq);
        }
        out.tags = ta;
        out
    }

    /// What a client's ACK says of the server's window: room for a segment ends the hold.
    fn client_window(&mut self, s: &Segment<'_>) {
        if s.dir != 0 {
            return;
        }
        if s.flags & TCP_SYN != 0 {
            self.client_syn_mss = s.tcp.mss.map(u32::from).or(self.client_syn_mss);
            return;
        }
        if s.flags & TCP_ACK == 0 {
            return;
        }
        self.client_window_edge = self.window_edge(s).map(|edge| (s.ack, edge));
        let server = &self.dir[1];
        if let (Some(shift), true) = (self.client_window_shift, server.high != 0) {
            let bif = server.high.wrapping_sub(s.ack);
            if bif < 1 << 30 {
                self.path.window_opened(s.now, bif, u64::from(s.window) << shift, self.server_mss);
            }
        }
    }

    /// The right edge of the window a client ACK advertises, in bytes past the ACK's sequence
    /// space origin (unwrapped enough to compare two ACKs of one window).
    fn window_edge(&self, s: &Segment<'_>) -> Option<u64> {
        self.client_window_shift.map(|shift| u64::from(s.ack) + (u64::from(s.window) << shift))
    }

    /// A client ACK that acknowledges data but leaves its window's right edge where the previous
    /// ACK put it: the reader took nothing, and the receiver chose when to send it (Linux holds
    /// such an ACK for its delayed-ACK timer). Its RTT sample times the reader, not the path.
    /// (Unseen axis seed 107, a slow reader with an 8 kB buffer on a 42 ms path: two such ACKs
    /// in a row, 83 and 90 ms after their data, made the flow's RTT series a bufferbloat one.)
    /// (A duplicate ACK leaves the edge in place too; its SACK block may time a segment.)
    fn reader_held(&self, s: &Segment<'_>) -> bool {
        self.client_window_edge.is_some_and(|(ack, edge)| ack != s.ack && self.window_edge(s) == Some(edge))
    }

    fn report_to_queries(&mut self, s: &Segment<'_>, ta: u32, out: &Analysis, judged: &retransmission::Judged) {
        if s.flags & (TCP_SYN | TCP_ACK) == TCP_SYN && s.dir == 0 {
            self.queries.syn(s.now);
        }
        let new_data = if out.retx_delay_ns.is_none() && ta & (KEEP_ALIVE | ZERO_WINDOW_PROBE | BAD_SEQ) == 0 {
            s.seglen
        } else {
            0
        };
        let tls = if s.seglen > 0 && self.queries.reads_tls() {
            self.queries.records(s.dir == 0, s.seq, s.payload, s.seglen)
        } else {
            None
        };
        self.queries.observe(&Seen {
            c2s: s.dir == 0,
            ts_ns: s.now,
            seq: s.seq,
            seglen: s.seglen,
            syn: s.flags & TCP_SYN != 0,
            fin: s.flags & (TCP_FIN | TCP_RST) == TCP_FIN,
            bare_rst: s.is_bare_rst(),
            new_data,
            ack: (s.flags & TCP_ACK != 0).then_some(s.ack),
            server_next_seq: self.dir[1].high,
            tags: ta,
            retx_delay_ns: out.retx_delay_ns,
            synack: s.dir == 1 && s.flags & (TCP_SYN | TCP_ACK) == TCP_SYN | TCP_ACK,
            rtt_ns: if s.dir == 0 { out.rtt_ns } else { None },
            rtt_min_ns: self.dir[1].rtt.min,
            tail_episode: out.retx_delay_ns.is_some() && ta & TAIL_LOSS == 0 && self.dir[s.dir].tail_episode,
            reorder_ns: judged.reorder_ns,
            hole: judged
                .hole_age
                .filter(|_| out.retx_delay_ns.is_some() && judged.hole_bytes > 0)
                .map(|age| (s.now - age, judged.hole_bytes)),
            tls,
            rwnd_limited: self.path.rwnd_limited(),
            server_mss: self.server_mss,
            unseen_before: (s.dir == 0 && judged.unseen_before > 0).then(|| {
                // The client's round trip is both halves through the capture.
                let near = self.dir[0].est.srtt().unwrap_or(0);
                let rto = self.dir[1].est.rto().saturating_add(near);
                let srtt = self.dir[1].est.srtt().map_or(rto, |far| far.saturating_add(near));
                (judged.unseen_before, rto, srtt.saturating_mul(2))
            }),
        });
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
            d.release();
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
            d.shrink_to_fit();
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

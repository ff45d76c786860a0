//! One QUIC sender's loss recovery replayed from a capture (RFC 9002), for flows whose 1-RTT
//! packets a key log opens: what it sent (packet numbers, STREAM ranges), what its peer
//! acknowledged, which packets it must have declared lost and why, which STREAM data it re-sent
//! and for which loss, and which of those re-sends the peer's ACKs later proved unneeded.
//!
//! Rules (docs/signatures.md#quic-with-a-key-log): a packet is lost once a packet at least
//! kPacketThreshold (3) numbers above it is acknowledged (packet threshold), or once 9/8 of
//! max(smoothed, latest RTT) passed since it was sent and a later one was acknowledged (time
//! threshold, also when the loss timer fires without a new ACK); a probe timeout (PTO = smoothed
//! RTT + max(4·RTTVAR, 1 ms) + max_ack_delay, doubling per consecutive PTO) with no ACK progress
//! sends the oldest unacknowledged ack-eliciting packet's data again, which counts as lost by
//! PTO (RFC 9002 §6.2.4 lets a probe carry it; aioquic, quiche and msquic do so); an
//! ack-eliciting send after three quarters of that silence is taken as the probe (the sender's
//! RTT history differs from ours). Times are the sender's: the caller shifts the vantage
//! point's times for a sender on the far side.

use std::collections::{BTreeMap, HashMap};

use tailscope_parsers::quic::AckFrame;

/// RFC 9002 constants.
pub const PACKET_THRESHOLD: u64 = 3;
const GRANULARITY_NS: i64 = 1_000_000;
const INITIAL_RTT_NS: i64 = 333_000_000;
/// The transport parameters' defaults (RFC 9000 §18.2); the capture cannot read the peer's.
pub const MAX_ACK_DELAY_NS: i64 = 25_000_000;
pub const ACK_DELAY_EXPONENT: u32 = 3;
/// Packet numbers never seen at the vantage point that one jump may stand for (a larger jump
/// is a peer skipping numbers, not a loss before the capture).
const MAX_GAP: u64 = 256;
/// Unacknowledged packets kept; older ones are forgotten (bounded memory on endless flows).
const MAX_TRACKED: usize = 16_384;
/// STREAM segments kept per stream for attributing re-sends.
const MAX_SEGMENTS: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LossCause {
    PacketThreshold,
    TimeThreshold,
    Pto,
}

impl LossCause {
    pub fn name(self) -> &'static str {
        match self {
            LossCause::PacketThreshold => "packet_threshold",
            LossCause::TimeThreshold => "time_threshold",
            LossCause::Pto => "pto",
        }
    }
}

/// The RTT estimator of RFC 9002 §5.
#[derive(Debug, Clone, Default)]
pub struct Rtt {
    pub latest: i64,
    pub smoothed: Option<i64>,
    pub var: i64,
    pub min: Option<i64>,
}

impl Rtt {
    /// A sample (`ack_delay` already limited by the caller); returns it less the ACK delay
    /// where that does not take it below the minimum.
    pub fn update(&mut self, latest: i64, ack_delay: i64) -> i64 {
        self.latest = latest;
        let min = self.min.map_or(latest, |m| m.min(latest));
        self.min = Some(min);
        let adjusted = if latest - ack_delay >= min { latest - ack_delay } else { latest };
        match self.smoothed {
            None => {
                self.smoothed = Some(latest);
                self.var = latest / 2;
            }
            Some(s) => {
                self.var = (3 * self.var + (s - adjusted).abs()) / 4;
                self.smoothed = Some((7 * s + adjusted) / 8);
            }
        }
        adjusted
    }

    pub fn smoothed_or_initial(&self) -> i64 {
        self.smoothed.unwrap_or(INITIAL_RTT_NS)
    }

    fn loss_delay(&self) -> i64 {
        let base = match self.smoothed {
            Some(s) => s.max(self.latest),
            None => INITIAL_RTT_NS,
        };
        (base * 9 / 8).max(GRANULARITY_NS)
    }

    fn pto(&self) -> i64 {
        let var = if self.smoothed.is_some() { self.var } else { INITIAL_RTT_NS / 2 };
        self.smoothed_or_initial() + (4 * var).max(GRANULARITY_NS) + MAX_ACK_DELAY_NS
    }
}

#[derive(Debug, Clone)]
struct Sent {
    ts: i64,
    ack_eliciting: bool,
    /// Seen at the vantage point (else a number skipped in the sequence: lost before it).
    seen: bool,
    lost: Option<LossCause>,
    /// A later packet carried this one's STREAM data again.
    retransmitted_by: Option<u64>,
}

impl Sent {
    fn new(ts: i64, ack_eliciting: bool, seen: bool) -> Sent {
        Sent { ts, ack_eliciting, seen, lost: None, retransmitted_by: None }
    }
}

/// What one step of the replay found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The sender must have declared `pn` lost at `at_ns`.
    Lost { pn: u64, cause: LossCause, at_ns: i64, sent_ns: i64, seen: bool },
    /// This packet re-sends STREAM data first sent in `original` (None: in a packet the vantage
    /// point never saw), re-sent `delay_ns` after it, for `cause` (None: no loss explains it).
    Retransmission { original: Option<u64>, cause: Option<LossCause>, delay_ns: Option<i64> },
    /// `original`, declared lost, was acknowledged after all (`retx`: the packet that had
    /// re-sent its data, if one had yet).
    Spurious { original: u64, retx: Option<u64> },
    /// The packet number is below one already seen from this sender.
    OutOfOrder { largest: u64 },
    /// RTT sample from an ACK: its largest packet number's send to the ACK, less the ACK delay.
    RttSample(i64),
}

/// One direction's sender.
#[derive(Debug, Clone, Default)]
pub struct Sender {
    sent: BTreeMap<u64, Sent>,
    largest_sent: Option<u64>,
    pub largest_acked: Option<u64>,
    loss_time: Option<i64>,
    last_ack_eliciting_ns: Option<i64>,
    pto_count: u32,
    /// Per stream: start offset -> (end, packet number of its latest transmission).
    streams: HashMap<u64, BTreeMap<u64, (u64, u64)>>,
    /// Per stream: highest offset sent.
    stream_end: HashMap<u64, u64>,
}

impl Sender {
    /// A packet of this sender at `now` (the sender's time).
    pub fn on_sent(&mut self, now: i64, pn: u64, ack_eliciting: bool, streams: &[(u64, u64, u64)]) -> Vec<Finding> {
        let mut out = Vec::new();
        let behind = self.largest_sent.is_some_and(|l| pn < l);
        if let Some(l) = self.largest_sent.filter(|_| behind) {
            out.push(Finding::OutOfOrder { largest: l });
        }
        if let Some(l) = self.largest_sent.filter(|&l| pn > l + 1 && pn - l - 1 <= MAX_GAP) {
            for missing in l + 1..pn {
                self.sent.insert(missing, Sent::new(now, true, false));
            }
        }
        self.largest_sent = Some(self.largest_sent.map_or(pn, |l| l.max(pn)));
        match self.sent.get_mut(&pn) {
            // A number we took for lost before the vantage point: reordered, it was sent earlier.
            Some(s) if !s.seen => {
                s.seen = true;
                s.ack_eliciting = ack_eliciting;
            }
            Some(_) => return out, // a capture duplicate
            None => {
                if self.largest_acked.is_none_or(|a| pn > a) || behind {
                    self.sent.insert(pn, Sent::new(now, ack_eliciting, true));
                }
            }
        }
        if ack_eliciting {
            self.last_ack_eliciting_ns = Some(now);
        }
        let mut retx: Option<Finding> = None;
        for &(id, off, len) in streams {
            if len == 0 {
                continue;
            }
            let end = off + len;
            let original = self.streams.get(&id).and_then(|segs| {
                segs.range(..end)
                    .rev()
                    .filter(|(s, (e, _))| **s < end && *e > off)
                    .map(|(_, (_, p))| *p)
                    .filter(|&p| p != pn)
                    .max()
            });
            let high = self.stream_end.get(&id).copied().unwrap_or(0);
            let hole_fill = original.is_none() && off < high && !behind;
            if original.is_some() || hole_fill {
                let f = self.retransmission_of(original, pn, now);
                if retx.is_none() || matches!(retx, Some(Finding::Retransmission { cause: None, .. })) {
                    retx = Some(f);
                }
            }
            let segs = self.streams.entry(id).or_default();
            if segs.len() >= MAX_SEGMENTS {
                segs.pop_first();
            }
            segs.insert(off, (end, pn));
            let e = self.stream_end.entry(id).or_default();
            *e = (*e).max(end);
        }
        out.extend(retx);
        self.bound();
        out
    }

    /// Whether these STREAM ranges, about to be sent, re-send bytes already sent (a probe carries
    /// old data or none; new data after a silence is the application's, not a probe).
    pub fn would_resend(&self, streams: &[(u64, u64, u64)]) -> bool {
        streams.iter().any(|&(id, off, len)| {
            let end = off + len;
            len > 0 && off < self.stream_end.get(&id).copied().unwrap_or(0).min(end)
        })
    }

    fn retransmission_of(&mut self, original: Option<u64>, pn: u64, now: i64) -> Finding {
        let orig = match original {
            Some(o) => self.sent.get_mut(&o).map(|s| (o, s)),
            // Data first sent in a packet the vantage point never saw: the latest such
            // packet declared lost whose data is not re-sent yet.
            None => self
                .sent
                .iter_mut()
                .rev()
                .find(|(_, s)| !s.seen && s.lost.is_some() && s.retransmitted_by.is_none())
                .map(|(p, s)| (*p, s)),
        };
        match orig {
            Some((o, s)) => {
                s.retransmitted_by.get_or_insert(pn);
                Finding::Retransmission { original: Some(o), cause: s.lost, delay_ns: Some(now - s.ts) }
            }
            None => Finding::Retransmission { original, cause: None, delay_ns: None },
        }
    }

    /// An ACK frame from the peer, processed at `now` (the sender's time). `rtt` is updated
    /// only when `sample` (the vantage point sees this sender's sends at their true times).
    pub fn on_ack(&mut self, now: i64, ack: &AckFrame, rtt: &mut Rtt, sample: bool) -> Vec<Finding> {
        let mut out = Vec::new();
        let mut newly: Vec<u64> = Vec::new();
        for &(lo, hi) in &ack.ranges {
            newly.extend(self.sent.range(lo..=hi).map(|(p, _)| *p));
        }
        if newly.is_empty() {
            return out;
        }
        let largest_new = newly.iter().copied().max();
        for p in newly {
            let s = self.sent.remove(&p).expect("listed from the map");
            if s.lost.is_some() {
                out.push(Finding::Spurious { original: p, retx: s.retransmitted_by });
            }
            if Some(p) == largest_new && p == ack.largest && s.ack_eliciting && s.seen && s.lost.is_none() && sample {
                let latest = now - s.ts;
                let delay = ((ack.delay << ACK_DELAY_EXPONENT) as i64 * 1000).min(MAX_ACK_DELAY_NS);
                out.push(Finding::RttSample(rtt.update(latest, delay)));
            }
        }
        self.largest_acked = Some(self.largest_acked.map_or(ack.largest, |a| a.max(ack.largest)));
        self.pto_count = 0;
        out.extend(self.detect_loss(now, rtt, None));
        out
    }

    fn detect_loss(&mut self, now: i64, rtt: &Rtt, forced: Option<LossCause>) -> Vec<Finding> {
        let mut out = Vec::new();
        let Some(largest) = self.largest_acked else { return out };
        let delay = rtt.loss_delay();
        self.loss_time = None;
        for (&pn, s) in self.sent.range_mut(..largest) {
            if s.lost.is_some() {
                continue;
            }
            let cause = if largest - pn >= PACKET_THRESHOLD {
                Some(LossCause::PacketThreshold)
            } else if s.ts <= now - delay {
                Some(forced.unwrap_or(LossCause::TimeThreshold))
            } else {
                let t = s.ts + delay;
                self.loss_time = Some(self.loss_time.map_or(t, |l| l.min(t)));
                None
            };
            if let Some(cause) = cause {
                s.lost = Some(cause);
                out.push(Finding::Lost { pn, cause, at_ns: now, sent_ns: s.ts, seen: s.seen });
            }
        }
        out
    }

    /// Timers that expired by `now`: the loss timer (time threshold) and the probe timeout.
    /// `probing`: the sender is sending, at `now`, an ack-eliciting packet with no new STREAM
    /// data ([`Sender::would_resend`], or a PING). After a silence of three quarters of our PTO
    /// estimate with packets outstanding, that packet is taken as the probe itself: the sender's
    /// own estimate differs from ours by its RTT history (samples the capture cannot see,
    /// rounding).
    pub fn poll(&mut self, now: i64, rtt: &Rtt, probing: bool) -> Vec<Finding> {
        let mut out = Vec::new();
        for _ in 0..8 {
            if let Some(t) = self.loss_time.filter(|&t| t <= now) {
                out.extend(self.detect_loss(t, rtt, Some(LossCause::TimeThreshold)));
                continue;
            }
            let Some(last) = self.last_ack_eliciting_ns else { break };
            let timeout = rtt.pto() << self.pto_count.min(16);
            let slack = if probing { timeout / 4 } else { 0 };
            let deadline = (last + timeout).min(now.max(last + timeout - slack));
            if last + timeout - slack > now {
                break;
            }
            let oldest = self.sent.iter_mut().find(|(_, s)| s.seen && s.ack_eliciting && s.lost.is_none());
            let Some((&pn, s)) = oldest else { break };
            s.lost = Some(LossCause::Pto);
            out.push(Finding::Lost { pn, cause: LossCause::Pto, at_ns: deadline, sent_ns: s.ts, seen: true });
            self.pto_count += 1;
            // The probe goes out at the deadline and re-arms the timer.
            self.last_ack_eliciting_ns = Some(deadline);
        }
        out
    }

    fn bound(&mut self) {
        while self.sent.len() > MAX_TRACKED {
            self.sent.pop_first();
        }
        if self.streams.len() > MAX_SEGMENTS {
            // Streams long finished: keep the newest (highest ids).
            let mut ids: Vec<u64> = self.streams.keys().copied().collect();
            ids.sort_unstable();
            for id in &ids[..ids.len() - MAX_SEGMENTS / 2] {
                self.streams.remove(id);
                self.stream_end.remove(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    fn ack(ranges: &[(u64, u64)]) -> AckFrame {
        AckFrame { largest: ranges[0].1, delay: 0, ranges: ranges.to_vec(), ecn: None }
    }

    fn lost(f: &[Finding]) -> Vec<(u64, LossCause)> {
        f.iter()
            .filter_map(|x| match x {
                Finding::Lost { pn, cause, .. } => Some((*pn, *cause)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn packet_threshold_then_retransmission_with_its_cause() {
        let mut s = Sender::default();
        let mut rtt = Rtt::default();
        for pn in 0..6u64 {
            s.on_sent(pn as i64 * MS, pn, true, &[(0, pn * 1000, 1000)]);
        }
        // 1 is lost; 2..=5 acked 50 ms later.
        let f = s.on_ack(55 * MS, &ack(&[(2, 5), (0, 0)]), &mut rtt, true);
        assert_eq!(lost(&f), vec![(1, LossCause::PacketThreshold)]);
        assert!(f.contains(&Finding::RttSample(50 * MS)));
        let f = s.on_sent(56 * MS, 6, true, &[(0, 1000, 1000)]);
        assert_eq!(
            f,
            vec![Finding::Retransmission {
                original: Some(1),
                cause: Some(LossCause::PacketThreshold),
                delay_ns: Some(55 * MS)
            }]
        );
        // The original arrives after all: the re-send was spurious.
        let f = s.on_ack(60 * MS, &ack(&[(1, 1)]), &mut rtt, true);
        assert_eq!(f, vec![Finding::Spurious { original: 1, retx: Some(6) }]);
    }

    #[test]
    fn time_threshold_by_ack_and_by_timer() {
        let mut s = Sender::default();
        let mut rtt = Rtt::default();
        s.on_sent(0, 0, true, &[]);
        s.on_sent(MS, 1, true, &[]);
        s.on_sent(2 * MS, 2, true, &[]);
        // 2 acked at 42 ms: RTT 40 ms, loss delay 45 ms; 0 and 1 are within it.
        let f = s.on_ack(42 * MS, &ack(&[(2, 2)]), &mut rtt, true);
        assert!(lost(&f).is_empty());
        assert!(s.poll(44 * MS, &rtt, false).is_empty());
        let f = s.poll(47 * MS, &rtt, false);
        assert_eq!(lost(&f), vec![(0, LossCause::TimeThreshold), (1, LossCause::TimeThreshold)]);
    }

    #[test]
    fn pto_without_ack_progress_and_out_of_order() {
        let mut s = Sender::default();
        let mut rtt = Rtt::default();
        s.on_sent(0, 0, true, &[(0, 0, 100)]);
        s.on_ack(40 * MS, &ack(&[(0, 0)]), &mut rtt, true);
        s.on_sent(50 * MS, 1, true, &[(0, 100, 100)]);
        // PTO = 40 + 4*20 + 25 = 145 ms after 50 ms.
        assert!(s.poll(190 * MS, &rtt, false).is_empty());
        let f = s.poll(200 * MS, &rtt, false);
        assert_eq!(lost(&f), vec![(1, LossCause::Pto)]);
        let f = s.on_sent(201 * MS, 2, true, &[(0, 100, 100)]);
        assert!(matches!(f[0], Finding::Retransmission { original: Some(1), cause: Some(LossCause::Pto), .. }));
        assert_eq!(s.on_sent(202 * MS, 1, true, &[]), vec![Finding::OutOfOrder { largest: 2 }]);
    }

    #[test]
    fn a_send_after_most_of_a_pto_of_silence_is_the_probe() {
        let mut s = Sender::default();
        let mut rtt = Rtt::default();
        s.on_sent(0, 0, true, &[(0, 0, 100)]);
        s.on_ack(40 * MS, &ack(&[(0, 0)]), &mut rtt, true);
        s.on_sent(50 * MS, 1, true, &[(0, 100, 100)]);
        // Our PTO ends at 195 ms; the sender's own estimate ended a little sooner.
        assert!(s.would_resend(&[(0, 150, 100)]) && !s.would_resend(&[(0, 200, 100), (4, 0, 10)]));
        assert!(s.poll(150 * MS, &rtt, true).is_empty(), "less than 3/4 of a PTO: new data");
        let f = s.poll(170 * MS, &rtt, false);
        assert!(f.is_empty(), "a timer is only taken as expired at its deadline");
        let f = s.poll(170 * MS, &rtt, true);
        assert_eq!(
            f,
            vec![Finding::Lost { pn: 1, cause: LossCause::Pto, at_ns: 170 * MS, sent_ns: 50 * MS, seen: true }]
        );
    }

    #[test]
    fn numbers_never_seen_are_lost_before_the_vantage_point() {
        let mut s = Sender::default();
        let mut rtt = Rtt { latest: 40 * MS, smoothed: Some(40 * MS), var: 10 * MS, min: Some(40 * MS) };
        s.on_sent(0, 0, true, &[(0, 0, 100)]);
        s.on_sent(MS, 4, true, &[(0, 200, 100)]); // 1..=3 never seen
        let f = s.on_ack(50 * MS, &ack(&[(4, 4), (0, 0)]), &mut rtt, false);
        assert_eq!(
            lost(&f),
            vec![(1, LossCause::PacketThreshold), (2, LossCause::TimeThreshold), (3, LossCause::TimeThreshold)]
        );
        // The hole 100..200 filled by a new packet: a re-send of what 3 (the latest lost) carried.
        let f = s.on_sent(51 * MS, 5, true, &[(0, 100, 100)]);
        assert!(matches!(
            f[0],
            Finding::Retransmission { original: Some(3), cause: Some(LossCause::TimeThreshold), .. }
        ));
        // 2 arrives late: reordered before the vantage point, not a re-send.
        let f = s.on_sent(52 * MS, 2, false, &[]);
        assert_eq!(f, vec![Finding::OutOfOrder { largest: 5 }]);
    }
}

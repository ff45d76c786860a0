//! The sender's scoreboard: its segments sent and not yet acknowledged, kept in sequence order so
//! that an ACK costs O(log n + what it changes) instead of a walk over the whole window (issue 28:
//! on a bulk flow with thousands of segments in flight every ACK paid for all of them).
//!
//! - The cumulative ACK pops the acked prefix and stops at the first segment above it.
//! - A SACK block finds its first segment by binary search and visits only the segments starting
//!   inside it; the ranges earlier blocks already marked (`Sacked`) are jumped over.
//! - A resend's queries (the original it repeats, the latest copy of its bytes, marking every
//!   copy it overlaps) look only at segments that can overlap it: the longest segment held bounds
//!   how far below a sequence number one can start.
//!
//! Every answer is the one the former list in sending order gave: where that list's order
//! decided (the first or the latest match), each segment's sending number (`Unacked::idx`) does.
//!
//! Sequence numbers compare modulo 2^32 (`SeqNumber`), which is no total order. The scoreboard
//! orders segments by their distance from a base below them all (`off`), and keeps every
//! segment's range within [`EDGE`, `HALF - EDGE`] of it: two values both less than `HALF` from the
//! base compare by their distances exactly as `SeqNumber` compares them. A query value farther
//! than that (a damaged or stale number) is answered by walking every segment with the modular
//! tests, as before; a segment that cannot be placed (the held ones would span more than a
//! quarter of the sequence space) turns the scoreboard into the plain list in sending order
//! until it empties. Neither happens in a sane connection.

use std::collections::VecDeque;

use super::direction::Unacked;
use crate::seq_number::SeqNumber;
use crate::spare::ShrinkSpare;

/// Values less than this far above the base compare by distance exactly as modulo 2^32.
const HALF: u32 = 1 << 31;
/// Room kept between the segments and the edges of the exact range: more than any segment's
/// length, so that a query outside the range lies beyond every segment's reach (it can neither
/// end a segment exactly nor fall inside one).
const EDGE: u32 = 1 << 24;
/// A segment longer than this (no TCP segment is) makes the scoreboard a plain list.
const MAX_SPAN: u32 = 1 << 20;
/// SACKed ranges remembered (the blocks of the latest ACKs).
const MAX_SACKED: usize = 8;

/// A range [l, r) of sequence numbers whose segments held entirely inside it are all SACKed.
#[derive(Debug, Clone, Copy, Default)]
struct Sacked {
    l: u32,
    r: u32,
}

#[derive(Debug, Clone)]
pub(super) struct Scoreboard {
    /// Sorted by `off(seq)` (any order among equal ones) while `ordered`; else in sending order.
    segs: VecDeque<Unacked>,
    ordered: bool,
    base: u32,
    /// The longest `nextseq - seq` among the segments held since the scoreboard was last empty.
    max_span: u32,
    /// The highest `off(nextseq)` since then (an upper bound of the segments' reach).
    top: u32,
    /// The next segment's sending number.
    next_idx: u64,
    /// Ranges known to be SACKed (see `Sacked`), valid while `ordered` under this base.
    sacked: [Sacked; MAX_SACKED],
    n_sacked: usize,
    /// Segments a cumulative ACK cut at their front, put back after it (kept to reuse its room).
    trimmed: Vec<Unacked>,
    /// Remembered ranges jumped over (the tests check the fast paths ran).
    #[cfg(test)]
    jumps: usize,
}

impl Default for Scoreboard {
    fn default() -> Self {
        Scoreboard {
            segs: VecDeque::new(),
            ordered: true,
            base: 0,
            max_span: 0,
            top: 0,
            next_idx: 0,
            sacked: [Sacked::default(); MAX_SACKED],
            n_sacked: 0,
            trimmed: Vec::new(),
            #[cfg(test)]
            jumps: 0,
        }
    }
}

/// The newest segment SACKed or acknowledged for the first time that can time the path: the
/// latest sent, the first sent among equals (the former list's order).
#[derive(Default)]
struct Newest(Option<(i64, u64, u32)>);

impl Newest {
    fn offer(&mut self, u: &Unacked) {
        if self.0.is_none_or(|(ts, idx, _)| u.ts_ns > ts || (u.ts_ns == ts && u.idx < idx)) {
            self.0 = Some((u.ts_ns, u.idx, u.bif));
        }
    }
    fn sample(&self, now: i64) -> Option<(i64, u32)> {
        self.0.map(|(ts, _, bif)| (now - ts, bif))
    }
}

impl Scoreboard {
    pub(super) fn len(&self) -> usize {
        self.segs.len()
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.segs.capacity()
    }

    #[cfg(test)]
    pub(super) fn iter(&self) -> impl Iterator<Item = &Unacked> {
        self.segs.iter()
    }

    fn off(&self, x: u32) -> u32 {
        x.wrapping_sub(self.base)
    }

    /// Whether `x` compares with every segment by distance from the base.
    fn near(&self, x: u32) -> bool {
        self.ordered && self.off(x) < HALF
    }

    /// Index of the first segment with `off(seq) >= o` (ordered only).
    fn lower_bound(&self, o: u32) -> usize {
        self.segs.partition_point(|u| self.off(u.seq) < o)
    }

    fn reset(&mut self) {
        self.segs.clear();
        self.ordered = true;
        self.n_sacked = 0;
        self.max_span = 0;
        self.top = 0;
    }

    /// Forget every segment and give the memory back (the flow ended).
    pub(super) fn release(&mut self) {
        *self = Scoreboard { next_idx: self.next_idx, ..Scoreboard::default() };
    }

    pub(super) fn shrink_to_fit(&mut self) {
        self.segs.shrink_spare();
        self.trimmed.shrink_spare();
    }

    /// Keep only the segments starting at `seq`.
    pub(super) fn retain_seq(&mut self, seq: u32) {
        self.segs.retain(|u| u.seq == seq);
        if self.segs.is_empty() {
            self.reset();
        }
    }

    /// A segment sent: it gets the next sending number.
    pub(super) fn push(&mut self, mut u: Unacked) {
        u.idx = self.next_idx;
        self.next_idx += 1;
        let span = u.nextseq.wrapping_sub(u.seq);
        if self.segs.is_empty() {
            self.reset();
            self.base = u.seq.wrapping_sub(HALF / 2);
        }
        if !self.ordered || span == 0 || span > MAX_SPAN || !(self.fits(u.seq, span) || self.rebase(u.seq, span)) {
            self.unorder();
            self.segs.push_back(u);
            return;
        }
        self.max_span = self.max_span.max(span);
        let o = self.off(u.seq);
        self.top = self.top.max(o + span);
        self.forget_sacked_over(u.seq);
        if self.segs.back().is_none_or(|b| self.off(b.seq) <= o) {
            self.segs.push_back(u);
        } else {
            let i = self.segs.partition_point(|v| self.off(v.seq) <= o);
            self.segs.insert(i, u);
        }
    }

    fn fits(&self, seq: u32, span: u32) -> bool {
        let o = self.off(seq);
        (EDGE..=HALF - EDGE - span).contains(&o)
    }

    /// Move the base so that the segments held and a new one at `seq` all fit, if they can:
    /// every held segment keeps its order (they all lie in [front, top], which moves as one).
    fn rebase(&mut self, seq: u32, span: u32) -> bool {
        let Some(front) = self.segs.front() else { return false };
        let lo = front.seq;
        let held = i64::from(self.top - self.off(lo));
        let d = i64::from(seq.wrapping_sub(lo) as i32);
        let (from, to) = (d.min(0), held.max(d + i64::from(span)));
        let room = i64::from(HALF - 2 * EDGE);
        if to - from > room {
            return false;
        }
        let new_base = lo.wrapping_add(from as i32 as u32).wrapping_sub(EDGE + ((room - (to - from)) / 2) as u32);
        self.top = (i64::from(lo.wrapping_sub(new_base)) + held) as u32;
        self.base = new_base;
        self.n_sacked = 0;
        self.fits(seq, span)
    }

    /// The plain list in sending order, for segments the ordered scoreboard cannot place.
    fn unorder(&mut self) {
        if self.ordered {
            self.segs.make_contiguous().sort_unstable_by_key(|u| u.idx);
            self.ordered = false;
            self.n_sacked = 0;
        }
    }

    /// A segment now held at `seq` that is not SACKed: no remembered range may claim it.
    fn forget_sacked_over(&mut self, seq: u32) {
        let o = self.off(seq);
        let mut i = 0;
        while i < self.n_sacked {
            let s = self.sacked[i];
            if self.off(s.l) <= o && o < self.off(s.r) {
                if self.off(s.l) == o {
                    self.n_sacked -= 1;
                    self.sacked[i] = self.sacked[self.n_sacked];
                    continue;
                }
                self.sacked[i].r = seq;
            }
            i += 1;
        }
    }

    fn remember_sacked(&mut self, l: u32, r: u32) {
        let (lo, ro) = (self.off(l), self.off(r));
        if self.sacked[..self.n_sacked].iter().any(|s| self.off(s.l) <= lo && ro <= self.off(s.r)) {
            return;
        }
        let mut i = 0;
        while i < self.n_sacked {
            let s = self.sacked[i];
            if lo <= self.off(s.l) && self.off(s.r) <= ro {
                self.n_sacked -= 1;
                self.sacked[i] = self.sacked[self.n_sacked];
            } else {
                i += 1;
            }
        }
        if self.n_sacked == MAX_SACKED {
            // The one that reaches least far is the least likely to be jumped over again.
            let (i, _) = self.sacked.iter().enumerate().min_by_key(|(_, s)| self.off(s.r)).expect("full");
            self.sacked[i] = Sacked { l, r };
        } else {
            self.sacked[self.n_sacked] = Sacked { l, r };
            self.n_sacked += 1;
        }
    }

    /// Where to go on from a SACKed segment starting at offset `o`: past every segment a
    /// remembered range claims SACKed (those that start no later than its end less the longest
    /// segment), or nowhere.
    fn jump(&self, o: u32) -> Option<u32> {
        let reach = self.sacked[..self.n_sacked].iter().filter(|s| self.off(s.l) <= o).map(|s| self.off(s.r)).max()?;
        let past = reach.checked_sub(self.max_span)? + 1;
        (past > o + 1).then_some(past)
    }

    /// Retire what the cumulative ACK `ack` acknowledges: segments ending at or below it go,
    /// one it cuts keeps its bytes above it. `deliver` sees every segment starting below `ack`.
    /// Returns the exact match's RTT sample (the first sent of those never retransmitted nor
    /// SACKed) and whether retransmitted data was retired.
    pub(super) fn settle(
        &mut self,
        ack: u32,
        now: i64,
        mut deliver: impl FnMut(&Unacked),
    ) -> (Option<(i64, u32)>, bool) {
        let mut timed_at: Option<(u64, i64, u32)> = None;
        let mut retired_retx = false;
        if !self.near(ack) {
            // The former walk: outside the exact range only removals can happen (see EDGE).
            self.segs.retain_mut(|u| {
                if SeqNumber(ack).after(u.seq) {
                    deliver(u);
                }
                if ack == u.nextseq {
                    retired_retx |= u.retransmitted;
                    if !u.retransmitted && !u.sacked && timed_at.is_none_or(|(idx, ..)| u.idx < idx) {
                        timed_at = Some((u.idx, now - u.ts_ns, u.bif));
                    }
                    false
                } else if SeqNumber(ack).after(u.seq) && SeqNumber(ack).at_or_before(u.nextseq) {
                    u.seq = ack;
                    true
                } else {
                    let keep = !SeqNumber(u.nextseq).at_or_before(ack);
                    retired_retx |= !keep && u.retransmitted;
                    keep
                }
            });
            if self.segs.is_empty() {
                self.reset();
            }
            return (timed_at.map(|(_, r, bif)| (r, bif)), retired_retx);
        }
        let a = self.off(ack);
        while self.segs.front().is_some_and(|u| self.off(u.seq) < a) {
            let mut u = self.segs.pop_front().expect("front");
            deliver(&u);
            let end = self.off(u.nextseq);
            if end == a {
                retired_retx |= u.retransmitted;
                if !u.retransmitted && !u.sacked && timed_at.is_none_or(|(idx, ..)| u.idx < idx) {
                    timed_at = Some((u.idx, now - u.ts_ns, u.bif));
                }
            } else if end > a {
                u.seq = ack;
                self.trimmed.push(u);
            } else {
                retired_retx |= u.retransmitted;
            }
        }
        if !self.trimmed.is_empty() {
            // Every segment left starts at or above `ack`: the cut ones go back in front.
            let mut trimmed = std::mem::take(&mut self.trimmed);
            for u in trimmed.drain(..) {
                if !u.sacked {
                    self.forget_sacked_over(ack);
                }
                self.segs.push_front(u);
            }
            self.trimmed = trimmed;
        }
        if self.segs.is_empty() {
            self.reset();
        } else {
            // Ranges wholly below the ACK claim nothing any more.
            let mut i = 0;
            while i < self.n_sacked {
                if self.off(self.sacked[i].r) <= a {
                    self.n_sacked -= 1;
                    self.sacked[i] = self.sacked[self.n_sacked];
                } else {
                    i += 1;
                }
            }
        }
        (timed_at.map(|(_, r, bif)| (r, bif)), retired_retx)
    }

    /// Mark the segments held entirely inside a SACK block. `deliver` sees each one marked.
    /// Returns the RTT sample of the newest one marked that was never retransmitted: (RTT, bytes
    /// in flight when it was sent).
    pub(super) fn sack(
        &mut self,
        blocks: &[(u32, u32)],
        now: i64,
        mut deliver: impl FnMut(&Unacked),
    ) -> Option<(i64, u32)> {
        let mut newest = Newest::default();
        let mut mark = |u: &mut Unacked| {
            deliver(u);
            u.sacked = true;
            if !u.retransmitted {
                newest.offer(u);
            }
        };
        for &(l, r) in blocks {
            if !(self.near(l) && self.near(r)) {
                for u in self.segs.iter_mut() {
                    if !u.sacked && SeqNumber(l).at_or_before(u.seq) && SeqNumber(u.nextseq).at_or_before(r) {
                        mark(u);
                    }
                }
                continue;
            }
            let (lo, ro) = (self.off(l), self.off(r));
            if ro <= lo {
                continue; // holds no segment
            }
            let mut i = self.lower_bound(lo);
            while let Some(u) = self.segs.get(i) {
                let o = self.off(u.seq);
                if o >= ro {
                    break;
                }
                if u.sacked {
                    match self.jump(o) {
                        Some(past) => {
                            #[cfg(test)]
                            {
                                self.jumps += 1;
                            }
                            i = self.lower_bound(past)
                        }
                        None => i += 1,
                    }
                    continue;
                }
                if self.off(u.nextseq) <= ro {
                    mark(&mut self.segs[i]);
                }
                i += 1;
            }
            self.remember_sacked(l, r);
        }
        newest.sample(now)
    }

    /// Whether a retransmitted segment holds a byte of [from, to). One that starts below `from`
    /// counts too: a resend captured above TSO/GSO is a super-segment, and the receiver's ACK
    /// may stop inside it (it arrived as wire segments, one lost again; lab pool GSO draws:
    /// draw1026 port 44708, a 2,896-byte resend from byte 1 and the next hole reported from
    /// 1,449, counted as closed without a resend, i.e. reordered).
    pub(super) fn any_resent_in(&self, from: u32, to: u32) -> bool {
        if !(self.near(from) && self.near(to)) {
            return self
                .segs
                .iter()
                .any(|u| u.retransmitted && SeqNumber(u.seq).before(to) && SeqNumber(from).before(u.nextseq));
        }
        let (fo, to_off) = (self.off(from), self.off(to));
        self.segs
            .range(self.lower_bound((fo + 1).saturating_sub(self.max_span))..)
            .take_while(|u| self.off(u.seq) < to_off)
            .any(|u| u.retransmitted && SeqNumber(from).before(u.nextseq))
    }

    /// The segments holding the byte at `seq`.
    fn covering(&self, seq: u32) -> impl Iterator<Item = &Unacked> {
        let near = self.near(seq);
        let x = self.off(seq);
        let from = if near { self.lower_bound((x + 1).saturating_sub(self.max_span)) } else { 0 };
        self.segs
            .range(from..)
            .take_while(move |u| !near || self.off(u.seq) <= x)
            .filter(move |u| SeqNumber(u.seq).at_or_before(seq) && SeqNumber(seq).before(u.nextseq))
    }

    /// The first segment sent that holds the byte at `seq`.
    pub(super) fn first_covering(&self, seq: u32) -> Option<Unacked> {
        self.covering(seq).min_by_key(|u| u.idx).copied()
    }

    /// The latest segment sent that holds the byte at `seq`.
    pub(super) fn latest_covering(&self, seq: u32) -> Option<&Unacked> {
        self.covering(seq).max_by_key(|u| u.idx)
    }

    /// The latest segment sent that starts at `seq` and was `len` bytes long when sent.
    pub(super) fn latest_exact(&self, seq: u32, len: u32) -> Option<Unacked> {
        let near = self.near(seq);
        let from = if near { self.lower_bound(self.off(seq)) } else { 0 };
        self.segs
            .range(from..)
            .take_while(|u| !near || u.seq == seq)
            .filter(|u| u.seq == seq && u.len == len)
            .max_by_key(|u| u.idx)
            .copied()
    }

    /// Mark every segment overlapping a resend of `seglen` bytes at `seq` (a bare FIN or SYN: its
    /// one sequence number) retransmitted.
    pub(super) fn mark_retransmitted(&mut self, seq: u32, seglen: u32) {
        let end = seq.wrapping_add(seglen.max(1));
        let overlaps = |u: &Unacked| SeqNumber(seq).before(u.nextseq) && SeqNumber(u.seq).before(end);
        if !(self.near(seq) && self.near(end)) {
            self.segs.iter_mut().filter(|u| overlaps(u)).for_each(|u| u.retransmitted = true);
            return;
        }
        let eo = self.off(end);
        let from = self.lower_bound((self.off(seq) + 1).saturating_sub(self.max_span));
        for i in from..self.segs.len() {
            let u = &self.segs[i];
            if self.off(u.seq) >= eo {
                break;
            }
            if overlaps(u) {
                self.segs[i].retransmitted = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The scoreboard against the list it replaced (the former code, kept here verbatim as the
    //! reference): every answer and every segment the same after each operation.

    use std::collections::VecDeque;

    use super::*;

    /// The former in-flight list: segments in sending order, every query a walk.
    #[derive(Default)]
    struct Reference {
        segs: VecDeque<Unacked>,
        next_idx: u64,
    }

    impl Reference {
        fn push(&mut self, mut u: Unacked) {
            u.idx = self.next_idx;
            self.next_idx += 1;
            self.segs.push_back(u);
        }
        fn settle(&mut self, ack: u32, now: i64, delivered: &mut Vec<u64>) -> (Option<(i64, u32)>, bool) {
            let mut timed = None;
            let mut retired_retx = false;
            let mut settle = |u: &mut Unacked| {
                if SeqNumber(ack).after(u.seq) {
                    delivered.push(u.idx);
                }
                if ack == u.nextseq {
                    retired_retx |= u.retransmitted;
                    if !u.retransmitted && !u.sacked && timed.is_none() {
                        timed = Some((now - u.ts_ns, u.bif));
                    }
                    false
                } else if SeqNumber(ack).after(u.seq) && SeqNumber(ack).at_or_before(u.nextseq) {
                    u.seq = ack;
                    true
                } else {
                    let keep = !SeqNumber(u.nextseq).at_or_before(ack);
                    retired_retx |= !keep && u.retransmitted;
                    keep
                }
            };
            self.segs.retain_mut(&mut settle);
            (timed, retired_retx)
        }
        fn sack(&mut self, blocks: &[(u32, u32)], now: i64, delivered: &mut Vec<u64>) -> Option<(i64, u32)> {
            let mut sample = None;
            let mut newest: Option<&Unacked> = None;
            for u in self.segs.iter_mut() {
                if !u.sacked
                    && blocks
                        .iter()
                        .any(|&(l, r)| SeqNumber(l).at_or_before(u.seq) && SeqNumber(u.nextseq).at_or_before(r))
                {
                    delivered.push(u.idx);
                    u.sacked = true;
                    if !u.retransmitted && newest.is_none_or(|n| u.ts_ns > n.ts_ns) {
                        sample = Some((now - u.ts_ns, u.bif));
                        newest = Some(u);
                    }
                }
            }
            sample
        }
        fn any_resent_in(&self, ack: u32, l: u32) -> bool {
            self.segs.iter().any(|u| u.retransmitted && SeqNumber(u.seq).before(l) && SeqNumber(ack).before(u.nextseq))
        }
        fn first_covering(&self, seq: u32) -> Option<Unacked> {
            self.segs
                .iter()
                .find(|u| u.seq == seq || (SeqNumber(u.seq).at_or_before(seq) && SeqNumber(seq).before(u.nextseq)))
                .copied()
        }
        fn latest_exact(&self, seq: u32, len: u32) -> Option<Unacked> {
            self.segs.iter().rev().find(|u| u.seq == seq && u.len == len).copied()
        }
        fn latest_covering(&self, seq: u32) -> Option<u64> {
            self.segs
                .iter()
                .rev()
                .find(|u| SeqNumber(u.seq).at_or_before(seq) && SeqNumber(seq).before(u.nextseq))
                .map(|u| u.idx)
        }
        fn mark_retransmitted(&mut self, seq: u32, seglen: u32) {
            for u in self.segs.iter_mut() {
                if SeqNumber(seq).before(u.nextseq) && SeqNumber(u.seq).before(seq.wrapping_add(seglen.max(1))) {
                    u.retransmitted = true;
                }
            }
        }
    }

    fn seg(seq: u32, len: u32, ts_ns: i64, retransmitted: bool) -> Unacked {
        Unacked {
            seq,
            nextseq: seq.wrapping_add(len.max(1)),
            ts_ns,
            first_ts_ns: ts_ns,
            retransmitted,
            ip_id: None,
            len,
            bif: (ts_ns as u32) ^ seq,
            sacked: false,
            ack: 0,
            win: 0,
            tsval: None,
            tx_idx: Some(seq),
            idx: 0,
        }
    }

    /// Same segments (by sending number) with the same fields.
    fn same(board: &Scoreboard, reference: &Reference) {
        let mut a: Vec<Unacked> = board.iter().copied().collect();
        a.sort_by_key(|u| u.idx);
        let b: Vec<Unacked> = reference.segs.iter().copied().collect();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        if board.ordered {
            let offs: Vec<u32> = board.iter().map(|u| board.off(u.seq)).collect();
            assert!(offs.windows(2).all(|w| w[0] <= w[1]), "kept in sequence order");
        }
    }

    /// A small xorshift: the tests need no crate for randomness.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n.max(1)
        }
        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    /// One random sender: new data, resends (the same or other boundaries), cumulative ACKs,
    /// SACK and D-SACK blocks, stale and damaged numbers, across the wrap of the sequence space.
    /// Returns how many operations found the scoreboard ordered, and its jumps over SACKed ranges.
    fn run(seed: u64, steps: usize, window: u32, odd: bool) -> (usize, usize) {
        let mut ordered = 0;
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut board = Scoreboard::default();
        let mut reference = Reference::default();
        // Start near the wrap half the time.
        let start = if rng.chance(50) { u32::MAX - rng.below(200_000) as u32 } else { rng.next() as u32 };
        let mss = [1u32, 7, 100, 1448][rng.below(4) as usize];
        let (mut high, mut una) = (start, start);
        let mut now = 0i64;
        for _ in 0..steps {
            now += rng.below(3) as i64; // equal send times happen
            let in_flight = high.wrapping_sub(una);
            match rng.below(100) {
                // New data, while the window allows.
                0..=39 if in_flight < window * mss => {
                    let len = if rng.chance(90) { mss } else { 1 + rng.below(u64::from(mss) * 3) as u32 };
                    let u = seg(high, len, now, false);
                    high = u.nextseq;
                    board.push(u);
                    reference.push(u);
                }
                // A resend of bytes in flight, with the resend's queries first.
                40..=54 if in_flight > 0 => {
                    let at = una.wrapping_add(rng.below(u64::from(in_flight)) as u32);
                    let len = if rng.chance(70) { mss } else { 1 + rng.below(u64::from(mss) * 2) as u32 };
                    assert_eq!(
                        format!("{:?}", board.first_covering(at)),
                        format!("{:?}", reference.first_covering(at))
                    );
                    assert_eq!(
                        format!("{:?}", board.latest_exact(at, len)),
                        format!("{:?}", reference.latest_exact(at, len))
                    );
                    assert_eq!(board.latest_covering(at).map(|u| u.idx), reference.latest_covering(at));
                    board.mark_retransmitted(at, len);
                    reference.mark_retransmitted(at, len);
                    let u = seg(at, len, now, true);
                    board.push(u);
                    reference.push(u);
                }
                // A cumulative ACK: forward, duplicate, stale, or (rarely) a damaged number.
                55..=74 => {
                    let ack = match rng.below(20) {
                        0 if odd => rng.next() as u32,
                        1 => una.wrapping_sub(rng.below(5000) as u32),
                        2..=5 => una,
                        _ => una.wrapping_add(rng.below(u64::from(in_flight) + 1) as u32),
                    };
                    let (mut d1, mut d2) = (Vec::new(), Vec::new());
                    assert_eq!(board.settle(ack, now, |u| d1.push(u.idx)), reference.settle(ack, now, &mut d2));
                    d1.sort_unstable();
                    d2.sort_unstable();
                    assert_eq!(d1, d2, "the same segments delivered");
                    if SeqNumber(ack).after(una) && SeqNumber(ack).at_or_before(high) {
                        una = ack;
                    }
                }
                // SACK blocks above the ACK, a D-SACK below it or inside another block, odd ones.
                75..=94 => {
                    let mut blocks = Vec::new();
                    for _ in 0..1 + rng.below(4) {
                        let l = match rng.below(10) {
                            0 => una.wrapping_sub(rng.below(3000) as u32),
                            1 if odd => rng.next() as u32,
                            _ => una.wrapping_add(rng.below(u64::from(in_flight) + 1) as u32),
                        };
                        let r = if rng.chance(3) {
                            l.wrapping_sub(rng.below(100) as u32)
                        } else {
                            l.wrapping_add(rng.below(u64::from(in_flight) + 2 * u64::from(mss)) as u32)
                        };
                        blocks.push((l, r));
                    }
                    let (mut d1, mut d2) = (Vec::new(), Vec::new());
                    assert_eq!(board.sack(&blocks, now, |u| d1.push(u.idx)), reference.sack(&blocks, now, &mut d2));
                    d1.sort_unstable();
                    d2.sort_unstable();
                    assert_eq!(d1, d2, "the same segments SACKed");
                    let (a, l) = (blocks[0].0, blocks[blocks.len() - 1].0);
                    assert_eq!(board.any_resent_in(a, l), reference.any_resent_in(a, l));
                    assert_eq!(board.any_resent_in(una, a), reference.any_resent_in(una, a));
                }
                // A segment far away (a damaged sequence number recorded), or a jump of the data.
                95 if odd => {
                    let u = seg(rng.next() as u32, 1 + rng.below(2000) as u32, now, rng.chance(50));
                    board.push(u);
                    reference.push(u);
                }
                96 => {
                    high = high.wrapping_add(rng.below(1 << 30) as u32);
                }
                97 if rng.chance(20) => {
                    let keep = reference.segs.front().map_or(una, |u| u.seq);
                    board.retain_seq(keep);
                    reference.segs.retain(|u| u.seq == keep);
                }
                _ => {}
            }
            same(&board, &reference);
            ordered += usize::from(board.ordered);
        }
        (ordered, board.jumps)
    }

    #[test]
    fn answers_as_the_list_in_sending_order_did() {
        let mut ordered = 0;
        for seed in 1..300 {
            ordered += run(seed, 600, 40, true).0;
        }
        assert!(ordered > 300 * 600 / 4, "the ordered paths ran ({ordered} operations)");
    }

    #[test]
    fn answers_as_the_list_did_with_large_windows() {
        let (mut ordered, mut jumps) = (0, 0);
        for seed in 1000..1030 {
            let (o, j) = run(seed, 6000, 2000, seed % 3 == 0);
            ordered += o;
            jumps += j;
        }
        assert!(ordered > 30 * 6000 / 2 && jumps > 1000, "the fast paths ran ({ordered} ordered, {jumps} jumps)");
    }

    fn unsacked(board: &Scoreboard) -> Vec<u32> {
        let mut v: Vec<u32> = board.iter().filter(|u| !u.sacked).map(|u| u.seq).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn cumulative_ack_across_the_wrap_retires_the_prefix_and_cuts_a_segment() {
        let mut b = Scoreboard::default();
        let start = u32::MAX - 1000;
        for i in 0..4u32 {
            b.push(seg(start.wrapping_add(i * 1000), 1000, i64::from(i), false));
        }
        // Acknowledges the first two segments (the second ends past the wrap) and half the third.
        let ack = start.wrapping_add(2500);
        let mut delivered = Vec::new();
        let (timed, retx) = b.settle(ack, 10, |u| delivered.push(u.seq));
        assert_eq!(delivered, vec![start, start.wrapping_add(1000), start.wrapping_add(2000)]);
        assert_eq!((timed, retx), (None, false), "no segment ends at the ACK");
        let left: Vec<(u32, u32)> = b.iter().map(|u| (u.seq, u.nextseq)).collect();
        assert_eq!(left, vec![(ack, start.wrapping_add(3000)), (start.wrapping_add(3000), start.wrapping_add(4000))]);
        // An exact match times the path (sent at 3 ns, now 10).
        let (timed, _) = b.settle(start.wrapping_add(4000), 10, |_| {});
        assert_eq!(timed, Some((7, (3u32) ^ start.wrapping_add(3000))));
        assert_eq!(b.len(), 0);
    }

    #[test]
    fn sack_blocks_mark_only_segments_wholly_inside() {
        let mut b = Scoreboard::default();
        for i in 0..10u32 {
            b.push(seg(1000 + i * 100, 100, i64::from(i), false));
        }
        // [1250, 1600) covers 1300..1600 wholly, 1200-1300 only partly.
        let mut marked = Vec::new();
        let sample = b.sack(&[(1250, 1600)], 20, |u| marked.push(u.seq));
        assert_eq!(marked, vec![1300, 1400, 1500]);
        assert_eq!(sample.map(|s| s.0), Some(20 - 5), "the newest marked times the path");
        // The block grows: only the segments new to it are marked (and delivered).
        marked.clear();
        b.sack(&[(1250, 1800)], 21, |u| marked.push(u.seq));
        assert_eq!(marked, vec![1600, 1700]);
        // A block spanning segments already marked and one partly covered marks none again.
        marked.clear();
        b.sack(&[(1300, 1850)], 22, |u| marked.push(u.seq));
        assert!(marked.is_empty());
        assert_eq!(unsacked(&b), vec![1000, 1100, 1200, 1800, 1900]);
    }

    #[test]
    fn a_resend_inside_a_sacked_range_is_marked_by_the_next_block() {
        let mut b = Scoreboard::default();
        for i in 0..100u32 {
            b.push(seg(i * 10, 10, 0, false));
        }
        b.sack(&[(100, 1000)], 1, |_| {});
        // A (spurious) resend of SACKed bytes: the remembered range must not hide it.
        b.mark_retransmitted(500, 10);
        b.push(seg(500, 10, 2, true));
        let mut marked = Vec::new();
        let sample = b.sack(&[(100, 1000)], 3, |u| marked.push((u.seq, u.retransmitted)));
        assert_eq!(marked, vec![(500, true)]);
        assert_eq!(sample, None, "a resend times nothing");
    }

    #[test]
    fn dsack_below_the_ack_and_the_resend_queries() {
        let mut b = Scoreboard::default();
        for i in 0..5u32 {
            b.push(seg(i * 100, 100, i64::from(i), false));
        }
        // Segment 1 resent twice, the second time as two halves.
        b.mark_retransmitted(100, 100);
        b.push(seg(100, 100, 10, true));
        b.mark_retransmitted(100, 50);
        b.push(seg(100, 50, 11, true));
        b.push(seg(150, 50, 11, true));
        assert_eq!(b.first_covering(120).map(|u| u.ts_ns), Some(1), "the original");
        assert_eq!(b.latest_covering(160).map(|u| u.ts_ns), Some(11), "the latest copy");
        assert_eq!(b.latest_exact(100, 100).map(|u| u.ts_ns), Some(10));
        assert!(b.any_resent_in(0, 200) && !b.any_resent_in(200, 500));
        // a hole reported from inside a resend (a super-segment the ACK stopped in)
        assert!(b.any_resent_in(150, 300) && b.any_resent_in(120, 130));
        // The ACK passes segment 1; a D-SACK reports it received twice: it is below the ACK and
        // nothing is held there any more, so nothing is marked.
        let (timed, retx) = b.settle(200, 20, |_| {});
        assert_eq!(timed, None, "Karn: retransmitted data was retired");
        assert!(retx);
        let mut marked = 0;
        b.sack(&[(100, 200), (300, 400)], 21, |_| marked += 1);
        assert_eq!(marked, 1, "only the segment at 300, inside the second block");
        assert_eq!(unsacked(&b), vec![200, 400]);
    }

    #[test]
    fn segments_out_of_reach_turn_it_into_the_plain_list_until_it_empties() {
        let mut b = Scoreboard::default();
        b.push(seg(0, 100, 0, false));
        b.push(seg(1 << 31, 100, 1, false)); // half the space away: no order holds both
        assert!(!b.ordered);
        b.push(seg(100, 100, 2, false));
        let (timed, _) = b.settle(200, 5, |_| {});
        assert_eq!(timed, Some((3, 2u32 ^ 100)), "the former walk's answer");
        b.settle((1 << 31) + 100, 6, |_| {});
        assert_eq!(b.len(), 0);
        b.push(seg(7, 1, 7, false));
        assert!(b.ordered, "ordered again once empty");
    }
}

//! RTT samples and the sender's RTO estimate.
//!
//! Samples come from data→ACK pairs with Karn's rule (a retransmitted segment never yields a
//! sample) and from TCP timestamp echoes the way pping does it (the first packet echoing a TSval
//! measures the time since that TSval was first sent). The estimator follows RFC 6298, with the
//! floor Linux uses (RTO = SRTT + max(4·RTTVAR, 200 ms)).

use crate::spare::ShrinkSpare;

const RTO_MIN_NS: i64 = 200_000_000;
const RTO_INITIAL_NS: i64 = 1_000_000_000;
/// Samples kept per flow for the percentiles; beyond it every other sample is dropped and the
/// stride doubles, so memory stays bounded while min and max stay exact.
const MAX_KEPT: usize = 4096;

#[derive(Debug, Clone, Default)]
pub struct Estimator {
    srtt: Option<i64>,
    rttvar: i64,
}

impl Estimator {
    pub fn add(&mut self, r: i64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(s.saturating_sub(r).saturating_abs()) / 4;
                self.srtt = Some(s.saturating_mul(7).saturating_add(r) / 8);
            }
        }
    }
    pub fn srtt(&self) -> Option<i64> {
        self.srtt
    }
    pub fn rto(&self) -> i64 {
        match self.srtt {
            None => RTO_INITIAL_NS,
            Some(s) => s.saturating_add(self.rttvar.saturating_mul(4).max(RTO_MIN_NS)),
        }
    }
}

/// A bounded sample set with exact min/max and approximate percentiles.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    kept: Vec<i64>,
    stride: u32,
    seen: u64,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

impl Samples {
    pub fn shrink_to_fit(&mut self) {
        self.kept.shrink_spare();
    }
    pub fn add(&mut self, r: i64) {
        self.min = Some(self.min.map_or(r, |m| m.min(r)));
        self.max = Some(self.max.map_or(r, |m| m.max(r)));
        let stride = u64::from(self.stride.max(1));
        if self.seen.is_multiple_of(stride) {
            self.kept.push(r);
            if self.kept.len() >= MAX_KEPT {
                let mut i = 0;
                self.kept.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = (self.stride.max(1)) * 2;
            }
        }
        self.seen += 1;
    }
    pub fn count(&self) -> u64 {
        self.seen
    }
    /// Nearest-rank percentile of the kept samples.
    pub fn percentile(&self, p: f64) -> Option<i64> {
        if self.kept.is_empty() {
            return None;
        }
        let mut v = self.kept.clone();
        let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
        // The value at that rank of the sorted samples, without sorting them all.
        let k = rank.min(v.len()) - 1;
        let (_, nth, _) = v.select_nth_unstable(k);
        Some(*nth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimator_follows_rfc6298_with_linux_floor() {
        let mut e = Estimator::default();
        assert_eq!(e.rto(), 1_000_000_000);
        e.add(100_000_000);
        assert_eq!(e.srtt(), Some(100_000_000));
        assert_eq!(e.rto(), 100_000_000 + 200_000_000);
        for _ in 0..50 {
            e.add(100_000_000);
        }
        assert!(e.rto() >= 300_000_000 - 1 && e.rto() <= 300_000_000 + 1);
    }

    #[test]
    fn samples_stay_bounded_and_exact_at_the_ends() {
        let mut s = Samples::default();
        for i in 0..100_000 {
            s.add(i);
        }
        assert!(s.kept.len() < MAX_KEPT);
        assert_eq!((s.min, s.max, s.count()), (Some(0), Some(99_999), 100_000));
        let p50 = s.percentile(50.0).unwrap();
        assert!((45_000..55_000).contains(&p50), "{p50}");
    }
}

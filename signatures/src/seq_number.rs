//! TCP sequence and acknowledgment numbers compared modulo 2^32 (RFC 9293 §3.4): `a` is after
//! `b` when it lies less than half the sequence space ahead of it. That is no total order (it is
//! not transitive across the wrap), so `SeqNumber` does not implement `Ord`: it names the test.

/// A sequence or acknowledgment number, for wrap-around comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// How far `self` lies ahead of `other` (negative: behind), within half the sequence space.
    fn offset_from(self, other: u32) -> i32 {
        self.0.wrapping_sub(other) as i32
    }
    pub fn after(self, other: u32) -> bool {
        self.offset_from(other) > 0
    }
    pub fn before(self, other: u32) -> bool {
        self.offset_from(other) < 0
    }
    pub fn at_or_before(self, other: u32) -> bool {
        self.offset_from(other) <= 0
    }
    pub fn at_or_after(self, other: u32) -> bool {
        self.offset_from(other) >= 0
    }
}

#[cfg(test)]
mod tests {
    use super::SeqNumber;

    #[test]
    fn comparisons_wrap_around() {
        assert!(SeqNumber(5).after(u32::MAX - 5), "5 follows 2^32 - 6 across the wrap");
        assert!(SeqNumber(u32::MAX - 5).before(5));
        assert!(SeqNumber(7).at_or_before(7) && SeqNumber(7).at_or_after(7));
        assert!(!SeqNumber(7).after(7) && !SeqNumber(7).before(7));
        // Half the space ahead reads as behind (the sign of the 32-bit difference).
        assert!(SeqNumber(1 << 31).before(0));
        assert!(SeqNumber((1 << 31) - 1).after(0));
    }
}

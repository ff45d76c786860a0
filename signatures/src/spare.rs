//! Giving back a buffer's spare room (a closed flow's state, `TcpState::compact`) only when it is
//! worth a reallocation. Shrinking to the exact length after every packet of a closed flow made
//! each late packet that pushed an entry grow the buffer and shrink it again: two reallocations
//! per packet (issue 28's profile).

use std::collections::VecDeque;

/// Entries a buffer may keep unused beyond its length before `shrink_spare` gives them back.
const SLACK: usize = 16;

pub(crate) trait ShrinkSpare {
    /// Shrink to fit when more than the length plus `SLACK` entries are unused: the waste stays
    /// below twice the length plus `SLACK`, and an empty buffer gives everything back.
    fn shrink_spare(&mut self);
}

impl<T> ShrinkSpare for Vec<T> {
    fn shrink_spare(&mut self) {
        if self.capacity() > 2 * self.len() + SLACK || (self.is_empty() && self.capacity() > 0) {
            self.shrink_to_fit();
        }
    }
}

impl<T> ShrinkSpare for VecDeque<T> {
    fn shrink_spare(&mut self) {
        if self.capacity() > 2 * self.len() + SLACK || (self.is_empty() && self.capacity() > 0) {
            self.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shrinks_only_when_the_spare_room_is_worth_it() {
        let mut v: Vec<u8> = Vec::with_capacity(100);
        v.extend([1, 2, 3]);
        v.shrink_spare();
        assert_eq!(v.capacity(), 3);
        v.push(4); // grows (doubles): no shrink back for one late entry
        let grown = v.capacity();
        v.shrink_spare();
        assert_eq!(v.capacity(), grown);
        v.clear();
        v.shrink_spare();
        assert_eq!(v.capacity(), 0, "an empty buffer gives everything back");
        let mut d: VecDeque<u8> = VecDeque::with_capacity(64);
        d.push_back(1);
        d.shrink_spare();
        assert!(d.capacity() < 64);
    }
}

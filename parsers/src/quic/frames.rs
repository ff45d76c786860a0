//! Frames of a decrypted Initial packet, and reassembly of the CRYPTO stream.
//!
//! An Initial packet may carry only PADDING, PING, ACK, CRYPTO and CONNECTION_CLOSE (RFC 9000
//! §12.4, Table 3). Parsing stops cleanly at the first other frame type (noted in
//! [`FrameSummary::unknown_frame`]) or at a frame cut short ([`FrameSummary::malformed`]); what
//! was parsed before stays valid.

use std::collections::BTreeMap;

use super::version::FrameDialect;
use super::Reader;

/// Where one CRYPTO frame's data sits: `offset` in the CRYPTO stream, `start..start+len` in the
/// decrypted payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CryptoRange {
    pub offset: u64,
    pub start: usize,
    pub len: usize,
}

/// One ACK frame. `ranges` are inclusive `(smallest, largest)` packet number ranges, largest
/// first; `ranges[0].1 == largest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckFrame {
    pub largest: u64,
    /// ACK Delay as encoded (scaled by the peer's ack_delay_exponent, default 3: × 8 µs).
    pub delay: u64,
    pub ranges: Vec<(u64, u64)>,
    /// ECN counts (ECT0, ECT1, CE) of an ACK_ECN frame.
    pub ecn: Option<(u64, u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionClose {
    pub error_code: u64,
    /// The frame type that caused the error (0x1c only).
    pub frame_type: Option<u64>,
    /// 0x1d: an application error.
    pub application: bool,
    pub reason: String,
}

/// What a decrypted Initial payload held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameSummary {
    pub crypto: Vec<CryptoRange>,
    pub acks: Vec<AckFrame>,
    pub ping: bool,
    /// PADDING bytes.
    pub padding: usize,
    pub connection_close: Option<ConnectionClose>,
    /// The first frame type not allowed in an Initial packet; parsing stopped there.
    pub unknown_frame: Option<u64>,
    /// A frame ran past the end of the payload or held an impossible value; parsing stopped.
    pub malformed: bool,
}

/// Most ACK ranges kept per frame (a hostile frame may claim 2^62; parsing still walks them all,
/// bounded by the payload length, but only this many are stored).
pub const MAX_ACK_RANGES: usize = 64;

/// Parse an Initial packet's decrypted payload (RFC 9000 frames).
pub fn parse_frames(payload: &[u8]) -> FrameSummary {
    parse_frames_dialect(payload, FrameDialect::Ietf)
}

pub(crate) fn parse_frames_dialect(payload: &[u8], dialect: FrameDialect) -> FrameSummary {
    let mut s = FrameSummary::default();
    let frame = match dialect {
        FrameDialect::Ietf => ietf_frame,
        FrameDialect::Google => google_frame,
    };
    s.malformed = walk_frames(payload, &mut s, frame);
    s
}

/// Walk a payload's frames with `frame` (`Some(true)` go on, `Some(false)` stop at a type whose
/// length cannot be known, `None` malformed), keeping what came before a stop; true when a frame
/// was malformed.
pub(crate) fn walk_frames<S>(
    payload: &[u8],
    s: &mut S,
    mut frame: impl FnMut(&mut Reader<'_>, &mut S) -> Option<bool>,
) -> bool {
    let mut r = Reader::new(payload);
    while !r.is_empty() {
        match frame(&mut r, s) {
            Some(true) => {}
            Some(false) => return false,
            None => return true,
        }
    }
    false
}

/// After a PADDING frame's type: it and the padding right after it. Runs of padding are the bulk
/// of most Initials: they are taken at once.
pub(crate) fn padding_run(r: &mut Reader<'_>) -> usize {
    let mut n = 1;
    while r.peek_u8() == Some(0) {
        r.u8();
        n += 1;
    }
    n
}

/// The body of a CRYPTO frame, after its type.
pub(crate) fn crypto_frame(r: &mut Reader<'_>) -> Option<CryptoRange> {
    let offset = r.varint()?;
    let len = r.varint()?;
    let data = r.bytes(len)?;
    // The stream may not reach 2^62 (RFC 9000 §19.6).
    offset.checked_add(len).filter(|&e| e < 1 << 62)?;
    Some(CryptoRange { offset, start: r.pos() - data.len(), len: data.len() })
}

/// The body of a CONNECTION_CLOSE frame (`ty` 0x1c: transport, 0x1d: application), after its type.
pub(crate) fn close_frame(r: &mut Reader<'_>, ty: u64) -> Option<ConnectionClose> {
    let error_code = r.varint()?;
    let frame_type = if ty == 0x1c { Some(r.varint()?) } else { None };
    let n = r.varint()?;
    let reason = r.bytes(n)?;
    Some(ConnectionClose {
        error_code,
        frame_type,
        application: ty == 0x1d,
        reason: String::from_utf8_lossy(reason).into_owned(),
    })
}

/// One frame: `Some(true)` go on, `Some(false)` stop (unknown type), `None` malformed.
fn ietf_frame(r: &mut Reader<'_>, s: &mut FrameSummary) -> Option<bool> {
    let ty = r.varint()?;
    match ty {
        0x00 => s.padding += padding_run(r),
        0x01 => s.ping = true,
        0x02 | 0x03 => s.acks.push(ack_frame(r, ty == 0x03)?),
        0x06 => s.crypto.push(crypto_frame(r)?),
        0x1c | 0x1d => s.connection_close = Some(close_frame(r, ty)?),
        other => {
            s.unknown_frame = Some(other);
            return Some(false);
        }
    }
    Some(true)
}

/// The body of an ACK (or, `ecn`, ACK_ECN) frame, after its type.
pub(crate) fn ack_frame(r: &mut Reader<'_>, ecn: bool) -> Option<AckFrame> {
    let largest = r.varint()?;
    let delay = r.varint()?;
    let count = r.varint()?;
    let first = r.varint()?;
    let mut smallest = largest.checked_sub(first)?;
    let mut ranges = vec![(smallest, largest)];
    let mut i = 0u64;
    while i < count {
        let gap = r.varint()?;
        let len = r.varint()?;
        let hi = smallest.checked_sub(gap)?.checked_sub(2)?;
        smallest = hi.checked_sub(len)?;
        if ranges.len() < MAX_ACK_RANGES {
            ranges.push((smallest, hi));
        }
        i += 1;
    }
    let ecn = if ecn { Some((r.varint()?, r.varint()?, r.varint()?)) } else { None };
    Some(AckFrame { largest, delay, ranges, ecn })
}

/// Google QUIC (Q050, T050, T051) Initial frames: padding and CRYPTO are all we read.
fn google_frame(r: &mut Reader<'_>, s: &mut FrameSummary) -> Option<bool> {
    let ty = r.u8()?;
    match ty {
        0x00 => s.padding += 1,
        0x07 => s.ping = true,
        0x08 => s.crypto.push(crypto_frame(r)?),
        other => {
            s.unknown_frame = Some(u64::from(other));
            return Some(false);
        }
    }
    Some(true)
}

/// Reassembles one direction's CRYPTO stream (of one packet number space) from frames that
/// arrive out of order, overlap or repeat. Data at or past `limit` bytes is dropped, and so is
/// data that would make the out-of-order buffer exceed `limit` bytes; [`Self::overflowed`]
/// says so.
#[derive(Debug, Clone)]
pub struct CryptoReassembler {
    contiguous: Vec<u8>,
    pending: BTreeMap<u64, Vec<u8>>,
    pending_bytes: usize,
    limit: usize,
    overflowed: bool,
}

/// Default limit: far more than any ClientHello (which must fit the Initial packets a client
/// sends before it hears from the server; even post-quantum key shares stay under 4 KiB).
pub const DEFAULT_CRYPTO_LIMIT: usize = 64 * 1024;

impl Default for CryptoReassembler {
    fn default() -> Self {
        CryptoReassembler::new(DEFAULT_CRYPTO_LIMIT)
    }
}

impl CryptoReassembler {
    pub fn new(limit: usize) -> Self {
        CryptoReassembler {
            contiguous: Vec::new(),
            pending: BTreeMap::new(),
            pending_bytes: 0,
            limit,
            overflowed: false,
        }
    }

    /// Add the data of one CRYPTO frame. Returns whether the contiguous prefix grew.
    pub fn insert(&mut self, offset: u64, data: &[u8]) -> bool {
        let Ok(start) = usize::try_from(offset) else {
            self.overflowed = true;
            return false;
        };
        let Some(end) = start.checked_add(data.len()) else {
            self.overflowed = true;
            return false;
        };
        let end = if end > self.limit {
            self.overflowed = true;
            self.limit
        } else {
            end
        };
        if start >= end {
            return false;
        }
        let data = &data[..end - start];
        let have = self.contiguous.len();
        if end <= have {
            return false; // all seen
        }
        if start > have {
            // A hole before it: keep it for later (the longest copy per offset).
            if self.pending.get(&offset).is_some_and(|d| d.len() >= data.len()) {
                return false;
            }
            if self.pending_bytes + data.len() > self.limit {
                self.overflowed = true;
                return false;
            }
            self.pending_bytes += data.len();
            if let Some(old) = self.pending.insert(offset, data.to_vec()) {
                self.pending_bytes -= old.len();
            }
            return false;
        }
        self.contiguous.extend_from_slice(&data[have - start..]);
        // Pull in whatever the new bytes reached.
        while let Some((&off, _)) = self.pending.first_key_value() {
            let have = self.contiguous.len() as u64;
            if off > have {
                break;
            }
            let Some((off, chunk)) = self.pending.pop_first() else {
                break;
            };
            self.pending_bytes -= chunk.len();
            let skip = (have - off) as usize;
            if skip < chunk.len() {
                self.contiguous.extend_from_slice(&chunk[skip..]);
            }
        }
        true
    }

    /// The stream from offset 0 up to the first hole.
    pub fn contiguous(&self) -> &[u8] {
        &self.contiguous
    }

    /// Bytes held past a hole.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Whether data was dropped for the memory limit.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_out_of_order_and_overlapping() {
        let data: Vec<u8> = (0..=255u8).collect();
        let mut r = CryptoReassembler::default();
        assert!(!r.insert(100, &data[100..150]));
        assert!(!r.insert(140, &data[140..200]));
        assert!(!r.insert(100, &data[100..120])); // shorter duplicate
        assert!(r.insert(0, &data[0..50]));
        assert_eq!(r.contiguous(), &data[..50]);
        assert!(r.insert(30, &data[30..101]));
        assert_eq!(r.contiguous(), &data[..200]);
        assert_eq!(r.pending_bytes(), 0);
        assert!(!r.insert(0, &data[..10]));
        assert!(r.insert(199, &data[199..]));
        assert_eq!(r.contiguous(), &data[..]);
    }

    #[test]
    fn bounded_memory() {
        let mut r = CryptoReassembler::new(100);
        assert!(!r.insert(u64::MAX, &[1, 2, 3]));
        assert!(r.overflowed());
        let mut r = CryptoReassembler::new(100);
        for off in 1..100 {
            r.insert(off, &[0u8; 100]);
        }
        assert!(r.pending_bytes() <= 100);
        assert!(r.insert(0, &[1]));
        assert!(r.contiguous().len() <= 100);
    }

    #[test]
    fn frames_of_rfc9001_server_initial() {
        // RFC 9001 A.3 payload: ACK then CRYPTO.
        let p = [0x02u8, 0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x40, 0x5a, 0xaa];
        let s = parse_frames(&p);
        assert_eq!(s.acks, vec![AckFrame { largest: 0, delay: 0, ranges: vec![(0, 0)], ecn: None }]);
        // The CRYPTO frame claims 90 bytes and has 1: malformed, nothing kept for it.
        assert!(s.malformed);
        assert!(s.crypto.is_empty());
    }

    #[test]
    fn ack_ranges() {
        // Largest 10, first range 2 (8..=10), gap 1 len 0 -> hi = 8-1-2 = 5, 5..=5.
        let s = parse_frames(&[0x02, 10, 0, 1, 2, 1, 0, 0x01]);
        assert!(!s.malformed);
        assert_eq!(s.acks[0].ranges, vec![(8, 10), (5, 5)]);
        assert!(s.ping);
        // A range below zero is malformed.
        assert!(parse_frames(&[0x02, 1, 0, 0, 5]).malformed);
        // A huge count of ranges is bounded by the payload.
        let s = parse_frames(&[0x02, 0x3f, 0, 0x80, 0xff, 0xff, 0xff, 0, 0, 0]);
        assert!(s.malformed);
    }

    #[test]
    fn stops_at_stream_frame() {
        let s = parse_frames(&[0x00, 0x00, 0x01, 0x08, 0x00, 0x01]);
        assert_eq!(s.padding, 2);
        assert_eq!(s.unknown_frame, Some(0x08));
        assert!(!s.malformed);
    }
}

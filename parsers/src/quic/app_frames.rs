//! Frames of a decrypted Handshake or 1-RTT packet (RFC 9000 §19, plus DATAGRAM, RFC 9221, and
//! the ACK frequency extension's frames): what loss and stream analysis needs - ACKs, STREAM
//! ranges, CRYPTO ranges - and whether the packet is ack-eliciting (RFC 9002 §2).
//!
//! Every frame type of a 1-RTT packet is walked, so a STREAM frame after a MAX_DATA is found;
//! parsing stops at an unknown type (its length cannot be known) or a frame cut short, keeping
//! what came before.

use super::frames::{
    ack_frame, close_frame, crypto_frame, padding_run, walk_frames, AckFrame, ConnectionClose, CryptoRange,
};
use super::Reader;

/// One STREAM frame: `start..start+len` in the decrypted payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRange {
    pub stream_id: u64,
    pub offset: u64,
    pub len: usize,
    pub fin: bool,
    pub start: usize,
}

/// What a decrypted Handshake / 1-RTT payload held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppFrames {
    pub acks: Vec<AckFrame>,
    pub streams: Vec<StreamRange>,
    pub crypto: Vec<CryptoRange>,
    /// RESET_STREAM frames: (stream id, final size).
    pub resets: Vec<(u64, u64)>,
    pub ping: bool,
    pub padding: usize,
    pub handshake_done: bool,
    pub connection_close: Option<ConnectionClose>,
    /// Any frame other than PADDING, ACK and CONNECTION_CLOSE (RFC 9002 §2).
    pub ack_eliciting: bool,
    pub unknown_frame: Option<u64>,
    pub malformed: bool,
}

/// Most STREAM frames kept per packet (a packet holds at most a few dozen real ones).
pub const MAX_STREAM_FRAMES: usize = 256;

pub fn parse_app_frames(payload: &[u8]) -> AppFrames {
    let mut s = AppFrames::default();
    s.malformed = walk_frames(payload, &mut s, frame);
    s
}

fn frame(r: &mut Reader<'_>, s: &mut AppFrames) -> Option<bool> {
    let ty = r.varint()?;
    if !matches!(ty, 0x00 | 0x02 | 0x03 | 0x1c | 0x1d) {
        s.ack_eliciting = true;
    }
    match ty {
        0x00 => s.padding += padding_run(r),
        0x01 => s.ping = true,
        0x02 | 0x03 => s.acks.push(ack_frame(r, ty == 0x03)?),
        0x04 => {
            let id = r.varint()?;
            r.varint()?;
            let final_size = r.varint()?;
            s.resets.push((id, final_size));
        }
        0x05 => {
            r.varint()?;
            r.varint()?;
        }
        0x06 => s.crypto.push(crypto_frame(r)?),
        0x07 => {
            let n = r.varint()?;
            r.bytes(n)?;
        }
        0x08..=0x0f => {
            let stream_id = r.varint()?;
            let offset = if ty & 0x04 != 0 { r.varint()? } else { 0 };
            let len = if ty & 0x02 != 0 { r.varint()? } else { r.remaining() as u64 };
            let data = r.bytes(len)?;
            offset.checked_add(len).filter(|&e| e < 1 << 62)?;
            if s.streams.len() < MAX_STREAM_FRAMES {
                s.streams.push(StreamRange {
                    stream_id,
                    offset,
                    len: data.len(),
                    fin: ty & 0x01 != 0,
                    start: r.pos() - data.len(),
                });
            }
        }
        0x10 | 0x12 | 0x13 | 0x14 | 0x16 | 0x17 | 0x19 => {
            r.varint()?;
        }
        0x11 | 0x15 => {
            r.varint()?;
            r.varint()?;
        }
        0x18 => {
            r.varint()?;
            r.varint()?;
            let n = r.u8()?;
            if n == 0 || n > 20 {
                return None;
            }
            r.bytes(usize::from(n) + 16)?;
        }
        0x1a | 0x1b => {
            r.bytes(8usize)?;
        }
        0x1c | 0x1d => s.connection_close = Some(close_frame(r, ty)?),
        0x1e => s.handshake_done = true,
        // IMMEDIATE_ACK (draft-ietf-quic-ack-frequency).
        0x1f => {}
        // DATAGRAM without and with a length (RFC 9221).
        0x30 => {
            r.bytes(r.remaining())?;
        }
        0x31 => {
            let n = r.varint()?;
            r.bytes(n)?;
        }
        // ACK_FREQUENCY: sequence, ack-eliciting threshold, request max ack delay, reordering threshold.
        0xaf => {
            for _ in 0..4 {
                r.varint()?;
            }
        }
        other => {
            s.unknown_frame = Some(other);
            return Some(false);
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ack_and_control_frames() {
        let mut p = vec![0x02, 10, 3, 0, 2]; // ACK 8..=10, delay 3
        p.extend([0x10, 0x44, 0x00]); // MAX_DATA
        p.extend([0x0e, 0x04, 0x40, 0x64, 0x03, b'a', b'b', b'c']); // STREAM id 4 off 100 len 3
        p.extend([0x09, 0x08, b'x', b'y']); // STREAM id 8, no offset, to the end, FIN
        let s = parse_app_frames(&p);
        assert!(!s.malformed && s.unknown_frame.is_none());
        assert!(s.ack_eliciting);
        assert_eq!(s.acks[0].ranges, vec![(8, 10)]);
        assert_eq!(s.acks[0].delay, 3);
        assert_eq!(s.streams.len(), 2);
        assert_eq!(
            (s.streams[0].stream_id, s.streams[0].offset, s.streams[0].len, s.streams[0].fin),
            (4, 100, 3, false)
        );
        assert_eq!(&p[s.streams[0].start..s.streams[0].start + 3], b"abc");
        assert_eq!((s.streams[1].stream_id, s.streams[1].offset, s.streams[1].len, s.streams[1].fin), (8, 0, 2, true));
    }

    #[test]
    fn ack_only_is_not_ack_eliciting_and_lies_stop_the_parse() {
        let s = parse_app_frames(&[0x02, 5, 0, 0, 0, 0x00, 0x00]);
        assert!(!s.ack_eliciting);
        assert_eq!(s.padding, 2);
        assert!(parse_app_frames(&[0x0a, 0x04, 0x10, b'a']).malformed);
        assert_eq!(parse_app_frames(&[0x01, 0x40, 0x40]).unknown_frame, Some(0x40));
        assert!(parse_app_frames(&[0x18, 1, 0, 21]).malformed);
    }
}

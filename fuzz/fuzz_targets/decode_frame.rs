//! One frame through `decode_frame`: the link layers we support (and an unknown interface), IP,
//! tunnels, TCP and UDP. Input: [link type selector, snaplen cut, frame bytes...].
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailscope_parsers::capture::{Frame, LINKTYPE_UNKNOWN_INTERFACE};
use tailscope_parsers::{decode_frame, SkipReason};

/// Every link type `link::supported` accepts, one it does not, and the pcapng "no such
/// interface" marker.
const LINKTYPES: [u32; 13] = [0, 1, 9, 50, 51, 101, 108, 113, 228, 229, 276, 147, LINKTYPE_UNKNOWN_INTERFACE];

fuzz_target!(|data: &[u8]| {
    let [sel, cut, frame @ ..] = data else { return };
    let linktype = LINKTYPES[usize::from(*sel) % LINKTYPES.len()];
    // Bytes the snaplen cut: none, a few, or a jumbo frame's worth.
    let cut = match cut >> 6 {
        0 => 0,
        1 => u32::from(cut & 0x3f),
        2 => u32::from(cut & 0x3f) * 1024,
        _ => u32::MAX - frame.len() as u32,
    };
    let f = Frame {
        number: 1,
        ts_ns: 1_700_000_000_000_000_000,
        linktype,
        wire_len: (frame.len() as u32).saturating_add(cut),
        data: frame,
        offset: 0,
    };
    match decode_frame(&f) {
        Ok(p) => {
            let base = frame.as_ptr() as usize;
            let at = p.payload.as_ptr() as usize;
            // The payload is a view into the frame (or empty).
            assert!(p.payload.is_empty() || (at >= base && at + p.payload.len() <= base + frame.len()));
            assert!(p.proto == 6 || p.proto == 17);
            assert_eq!(p.frame, 1);
            if let Some(t) = p.tcp() {
                assert!(t.header_len >= 20 && t.header_len <= 60);
                assert!(t.sack_blocks().len() <= 4);
            }
        }
        Err(reason) => {
            assert!(SkipReason::ALL.contains(&reason));
            let _ = reason.name();
        }
    }
});

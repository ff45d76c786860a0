//! Session-level behavior on small hand-made captures: per-file accounting and how output leaves
//! the session.

use tailscope_signatures::session::{Session, SessionConfig};

/// A raw-IPv4 pcap (microsecond timestamps) of (microseconds, TCP segment) records.
fn pcap(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    out.extend_from_slice(&262_144u32.to_le_bytes());
    out.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for (us, pkt) in records {
        for v in [(us / 1_000_000) as u32, (us % 1_000_000) as u32, pkt.len() as u32, pkt.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(pkt);
    }
    out
}

fn tcp(c2s: bool, seq: u32, ack: u32, flags: u8, payload: usize) -> Vec<u8> {
    let (src, dst, sport, dport) = if c2s { ([10, 0, 0, 1], [10, 0, 0, 2], 40000u16, 80u16) } else { ([10, 0, 0, 2], [10, 0, 0, 1], 80, 40000) };
    let total = (40 + payload) as u16;
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.extend_from_slice(&[5 << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    p.extend(std::iter::repeat_n(b'x', payload));
    p
}

/// One frame stamped a second ahead of its neighbours steps back once (the frame after it), as
/// tshark's negative `frame.time_delta` shows; the frames after that go forward again.
#[test]
fn ts_backwards_counts_steps_back_from_the_previous_frame() {
    let times = [0u64, 1_000_000, 1_000, 2_000, 3_000, 500];
    let records: Vec<(u64, Vec<u8>)> = times.iter().enumerate().map(|(i, &t)| (t, tcp(true, 1000 + i as u32, 0, 0x10, 0))).collect();
    let mut s = Session::new(SessionConfig::default(), "t");
    let mut cur = s.open_bytes(pcap(&records), "t").expect("a capture");
    while !cur.done {
        s.step(&mut cur, 1000);
    }
    assert_eq!(cur.stats.frames, 6);
    assert_eq!(cur.stats.ts_backwards, 2); // 1 s → 1 ms, and 3 ms → 0.5 ms
    assert_eq!((cur.stats.first_ts_ns, cur.stats.last_ts_ns), (Some(0), Some(1_000_000_000)));
}

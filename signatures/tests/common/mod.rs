//! Little captures built byte by byte, shared by the session-level test files.
#![allow(dead_code)] // each test file uses its own part

/// A raw-IPv4 pcap (microsecond timestamps) of (microseconds, IP packet) records.
pub fn pcap(records: &[(u64, Vec<u8>)]) -> Vec<u8> {
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

/// An IPv4 TCP segment between 10.0.0.1:`sport` (the client) and 10.0.0.2:80, with TCP options
/// `opts` (a multiple of 4 bytes) and `payload` bytes of data.
pub fn segment(sport: u16, c2s: bool, seq: u32, ack: u32, flags: u8, payload: usize, opts: &[u8]) -> Vec<u8> {
    let (src, dst, a, b) =
        if c2s { ([10, 0, 0, 1], [10, 0, 0, 2], sport, 80u16) } else { ([10, 0, 0, 2], [10, 0, 0, 1], 80, sport) };
    let header = 20 + opts.len();
    let total = (20 + header + payload) as u16;
    let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
    p[2..4].copy_from_slice(&total.to_be_bytes());
    p.extend_from_slice(&src);
    p.extend_from_slice(&dst);
    p.extend_from_slice(&a.to_be_bytes());
    p.extend_from_slice(&b.to_be_bytes());
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ack.to_be_bytes());
    p.extend_from_slice(&[((header / 4) as u8) << 4, flags, 0xff, 0xff, 0, 0, 0, 0]);
    p.extend_from_slice(opts);
    p.extend(std::iter::repeat_n(b'x', payload));
    p
}

/// A segment of the one connection most tests need (client port 40000), without options.
pub fn tcp(c2s: bool, seq: u32, ack: u32, flags: u8, payload: usize) -> Vec<u8> {
    segment(40000, c2s, seq, ack, flags, payload, &[])
}

//! One frame to one [`Packet`]: link layer ([`crate::link`]), IP (`etherparse`'s lax slicer,
//! which keeps the header-declared lengths when the snaplen cut the payload), tunnels
//! ([`crate::tunnel`]), then TCP or UDP.

use std::net::IpAddr;

use etherparse::LaxIpSlice;

use crate::capture::Frame;
use crate::link;
use crate::skip::SkipReason;
use crate::tunnel::{self, Inner, Tunnel};
pub use crate::tunnel::{Encap, TunnelEnds};

/// Tunnels nested deeper than this are skipped (a hostile packet could nest forever).
const MAX_TUNNEL_DEPTH: usize = 4;

pub const TCP_FIN: u16 = 0x001;
pub const TCP_SYN: u16 = 0x002;
pub const TCP_RST: u16 = 0x004;
pub const TCP_PSH: u16 = 0x008;
pub const TCP_ACK: u16 = 0x010;
pub const TCP_URG: u16 = 0x020;
pub const TCP_ECE: u16 = 0x040;
pub const TCP_CWR: u16 = 0x080;
pub const TCP_NS: u16 = 0x100;

/// TCP header fields, options parsed. `options_truncated` is set when the snaplen cut the
/// options: the fixed header is still valid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TcpInfo {
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
    pub window: u16,
    pub header_len: u8,
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub sack: [(u32, u32); 4],
    pub sack_count: u8,
    pub ts: Option<(u32, u32)>,
    pub options_truncated: bool,
}

impl TcpInfo {
    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack[..usize::from(self.sack_count)]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    Tcp(TcpInfo),
    Udp,
}

/// The parsed form of one frame: plain values, plus the captured L4 payload bytes (which the
/// QUIC and TLS parsers read).
#[derive(Debug, Clone)]
pub struct Packet<'a> {
    pub ts_ns: i64,
    pub frame: u64,
    pub wire_len: u32,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    pub proto: u8,
    pub ttl: u8,
    /// IPv4 identification, or the IPv6 fragment header's identification when present.
    pub ip_id: Option<u32>,
    /// IP total length as the header declares it (not what was captured).
    pub ip_len: u32,
    /// L4 payload length as the headers declare it (independent of the snaplen).
    pub payload_len: u32,
    /// First fragment of a fragmented datagram (later fragments are skipped); for a tunnelled
    /// packet, also when the outer datagram was fragmented.
    pub fragmented: bool,
    pub encap: Encap,
    /// The outermost tunnel's endpoints and identifier (None when not tunnelled).
    pub tunnel: Option<TunnelEnds>,
    pub transport: Transport,
    /// The captured part of the L4 payload (may be shorter than `payload_len`).
    pub payload: &'a [u8],
}

impl Packet<'_> {
    pub fn tcp(&self) -> Option<&TcpInfo> {
        match &self.transport {
            Transport::Tcp(t) => Some(t),
            Transport::Udp => None,
        }
    }
}

/// Decode a frame, or say why not.
pub fn decode_frame<'a>(frame: &Frame<'a>) -> Result<Packet<'a>, SkipReason> {
    let mut p = Packet::empty();
    decode_frame_into(frame, &mut p)?;
    Ok(p)
}

/// `decode_frame` into a packet the caller holds. The decoders fill one packet in place: a
/// packet (about 170 bytes) returned through a `Result` at each level was copied three times
/// per frame, each copy reading fields written just before (a store-forwarding stall).
/// On an error `p` holds whatever was decoded so far.
pub fn decode_frame_into<'a>(frame: &Frame<'a>, p: &mut Packet<'a>) -> Result<(), SkipReason> {
    if frame.data.is_empty() {
        return Err(SkipReason::EmptyFrame);
    }
    if frame.linktype == crate::capture::LINKTYPE_UNKNOWN_INTERFACE || !link::supported(frame.linktype) {
        return Err(SkipReason::UnsupportedLinkType);
    }
    let l3 = link::strip(frame.linktype, frame.data)?;
    decode_ip(p, l3, 0, Outer::default())?;
    p.ts_ns = frame.ts_ns;
    p.frame = frame.number;
    p.wire_len = frame.wire_len;
    // When the IP header gave no length (e.g. TSO captures with total length 0) the payload length
    // falls back to what was captured plus what the snaplen cut.
    let cut = frame.wire_len.saturating_sub(frame.data.len() as u32);
    if p.payload_len == u32::MAX {
        p.payload_len = (p.payload.len() as u32).saturating_add(cut);
        p.ip_len = p.ip_len.saturating_add(cut);
    } else if cut == 0 && (p.payload.len() as u32) < p.payload_len && !(p.fragmented && p.encap != Encap::None) {
        // The whole frame was captured, yet the headers claim more than it holds: the length
        // field is wrong (or a shim such as PPPoE bounded the packet), not the capture. Believe
        // the bytes, as Wireshark does ("IPv4 total length exceeds packet length").
        // `ip_len` keeps the header's claim: it is what Zeek's ip_bytes sum.
        // Not so for a tunnelled packet in the first fragment of its outer datagram: the rest
        // of its bytes are in the next fragment, and its own headers say how many there are
        // (repro `gre_outer_fragment.pcap`: 2,920, of which 1,418 are in the first fragment).
        p.payload_len = p.payload.len() as u32;
    }
    Ok(())
}

/// What the tunnels around a packet said, handed down to the inner packet's decoder.
#[derive(Debug, Clone, Copy, Default)]
struct Outer {
    /// The outermost tunnel and its endpoints.
    tunnel: Option<(Encap, TunnelEnds)>,
    /// Some datagram around this one was a (first) fragment.
    fragmented: bool,
}

impl Outer {
    /// The context for the packet inside `t`, found in an IP datagram from `src` to `dst`.
    fn enter(self, t: &Tunnel<'_>, src: IpAddr, dst: IpAddr, fragmented: bool) -> Outer {
        Outer {
            tunnel: self.tunnel.or(Some((t.encap, TunnelEnds { src, dst, id: t.id }))),
            fragmented: self.fragmented || fragmented,
        }
    }
}

/// The packet in an IP datagram, into `p` (every field but the frame's own, which
/// `decode_frame_into` sets).
fn decode_ip<'a>(p: &mut Packet<'a>, data: &'a [u8], depth: usize, outer: Outer) -> Result<(), SkipReason> {
    if depth > MAX_TUNNEL_DEPTH {
        return Err(SkipReason::TunnelTooDeep);
    }
    let (ip, _ext_err) = LaxIpSlice::from_slice(data).map_err(|e| {
        use etherparse::err::ip::LaxHeaderSliceError as E;
        match e {
            E::Len(_) => SkipReason::TruncatedIpHeader,
            E::Content(_) => SkipReason::MalformedIpHeader,
        }
    })?;
    let (src, dst, ttl, ip_id, declared_ip_len) = match &ip {
        LaxIpSlice::Ipv4(v4) => {
            let h = v4.header();
            (
                IpAddr::V4(h.source_addr()),
                IpAddr::V4(h.destination_addr()),
                h.ttl(),
                Some(u32::from(h.identification())),
                u32::from(h.total_len()),
            )
        }
        LaxIpSlice::Ipv6(v6) => {
            let h = v6.header();
            let frag_id = ipv6_fragment_id(v6);
            (
                IpAddr::V6(h.source_addr()),
                IpAddr::V6(h.destination_addr()),
                h.hop_limit(),
                frag_id,
                // A zero payload length is a jumbogram or TSO: no usable claim.
                if h.payload_length() == 0 { 0 } else { 40 + u32::from(h.payload_length()) },
            )
        }
    };
    let pl = ip.payload();
    let header_bytes = (pl.payload.as_ptr() as usize - data.as_ptr() as usize) as u32;
    // u32::MAX marks "no declared length" (a zero length field, as in TSO captures, or one
    // shorter than the headers); decode_frame then takes the length from the wire.
    let (ip_len, l4_len) = if declared_ip_len == 0 || declared_ip_len < header_bytes {
        (data.len() as u32, u32::MAX)
    } else {
        (declared_ip_len, declared_ip_len - header_bytes)
    };
    if pl.fragmented && !is_first_fragment(&ip) {
        return Err(SkipReason::IpFragment);
    }
    let proto = pl.ip_number.0;
    if let Some(t) = tunnel::from_ip_payload(proto, pl.payload)? {
        let outer = outer.enter(&t, src, dst, pl.fragmented);
        return decode_inner(p, t.inner, depth, outer);
    }
    let l4 = pl.payload;
    match proto {
        6 => decode_tcp(p, l4, l4_len)?,
        17 => {
            decode_udp(p, l4, l4_len)?;
            if let Some(t) = tunnel::from_udp_payload(p.sport, p.dport, p.payload) {
                let outer = outer.enter(&t, src, dst, pl.fragmented);
                // An inner packet that does not decode leaves the outer UDP packet as it was.
                let mut q = Packet::empty();
                if decode_inner(&mut q, t.inner, depth, outer).is_ok() {
                    *p = q;
                    return Ok(());
                }
            }
        }
        _ => return Err(SkipReason::NotTcpUdp),
    }
    p.src = src;
    p.dst = dst;
    p.ttl = ttl;
    p.ip_id = ip_id;
    p.ip_len = ip_len;
    p.proto = proto;
    p.fragmented = pl.fragmented || outer.fragmented;
    (p.encap, p.tunnel) = match outer.tunnel {
        Some((encap, ends)) => (encap, Some(ends)),
        None => (Encap::None, None),
    };
    Ok(())
}

fn decode_inner<'a>(p: &mut Packet<'a>, inner: Inner<'a>, depth: usize, outer: Outer) -> Result<(), SkipReason> {
    let ip = match inner {
        Inner::Ip(d) => d,
        Inner::Ethernet(d) => link::ethernet(d)?,
        Inner::EtherType(ty, d) => link::ether_payload(ty, d, 0)?,
        Inner::Ppp(d) => link::ppp(d)?,
        Inner::Ieee80211(d) => {
            let (ty, rest) = tunnel::ieee80211_data(d)?;
            link::ether_payload(ty, rest, 0)?
        }
    };
    decode_ip(p, ip, depth + 1, outer)
}

/// IPv6 extension headers as (header type, header bytes), walked with our own bounds checks.
///
/// Not etherparse's `Ipv6ExtensionSliceIter`: it trusts the chain to end inside the slice, which
/// a lax parse that stopped at a cut or invalid header does not guarantee (the last whole header
/// then names a next header that is not there, and the iterator reads it past the end of the
/// slice; fuzz regression `tests::ipv6_extension_chain_ending_in_a_cut_header`).
fn ipv6_extensions<'a>(v6: &etherparse::LaxIpv6Slice<'a>) -> impl Iterator<Item = (u8, &'a [u8])> {
    let exts = v6.extensions();
    let mut next = exts.first_header().map(|n| n.0);
    let mut rest: &'a [u8] = exts.slice();
    std::iter::from_fn(move || {
        let ty = next.take()?;
        let len = match ty {
            // Hop-by-Hop, Routing, Destination Options: length in 8-octet units, not counting
            // the first 8.
            0 | 43 | 60 => (usize::from(*rest.get(1)?) + 1) * 8,
            // Fragment: always 8.
            44 => 8,
            // Authentication Header: length in 4-octet units, not counting the first 2.
            51 => (usize::from(*rest.get(1)?) + 2) * 4,
            _ => return None,
        };
        let h = rest.get(..len)?;
        rest = &rest[len..];
        next = Some(h[0]);
        Some((ty, h))
    })
}

/// (fragment offset in 8-octet units, identification) of an IPv6 Fragment header.
fn ipv6_fragment(h: &[u8]) -> (u16, u32) {
    (u16::from_be_bytes([h[2], h[3]]) >> 3, u32::from_be_bytes([h[4], h[5], h[6], h[7]]))
}

fn ipv6_fragment_id(v6: &etherparse::LaxIpv6Slice<'_>) -> Option<u32> {
    ipv6_extensions(v6).find(|(ty, _)| *ty == 44).map(|(_, h)| ipv6_fragment(h).1)
}

fn is_first_fragment(ip: &LaxIpSlice<'_>) -> bool {
    match ip {
        LaxIpSlice::Ipv4(v4) => v4.header().fragments_offset().value() == 0,
        LaxIpSlice::Ipv6(v6) => ipv6_extensions(v6).all(|(ty, h)| ty != 44 || ipv6_fragment(h).0 == 0),
    }
}

impl Packet<'_> {
    /// A packet with every field zero or empty, to decode into.
    pub fn empty() -> Packet<'static> {
        empty_packet(Transport::Udp, 0, 0)
    }
}

fn empty_packet(transport: Transport, sport: u16, dport: u16) -> Packet<'static> {
    Packet {
        ts_ns: 0,
        frame: 0,
        wire_len: 0,
        src: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        sport,
        dport,
        proto: 0,
        ttl: 0,
        ip_id: None,
        ip_len: 0,
        payload_len: 0,
        fragmented: false,
        encap: Encap::None,
        tunnel: None,
        transport,
        payload: &[],
    }
}

/// TCP: the 20-byte fixed header is required; options are read as far as they were captured.
/// `p` becomes an empty packet with this segment's ports, TCP header and payload.
fn decode_tcp<'a>(p: &mut Packet<'a>, d: &'a [u8], l4_len: u32) -> Result<(), SkipReason> {
    if d.len() < 20 {
        return Err(SkipReason::TruncatedTcpHeader);
    }
    let be16 = |at: usize| u16::from_be_bytes([d[at], d[at + 1]]);
    let be32 = |at: usize| u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
    let header_len = usize::from(d[12] >> 4) * 4;
    if header_len < 20 {
        return Err(SkipReason::MalformedTcpHeader);
    }
    let opts_end = header_len.min(d.len());
    *p = empty_packet(
        Transport::Tcp(TcpInfo {
            seq: be32(4),
            ack: be32(8),
            flags: (u16::from(d[12] & 0x01) << 8) | u16::from(d[13]),
            window: be16(14),
            header_len: header_len as u8,
            options_truncated: opts_end < header_len,
            ..TcpInfo::default()
        }),
        be16(0),
        be16(2),
    );
    // The options are read into the packet's own TcpInfo, which is not moved afterwards.
    if let Transport::Tcp(t) = &mut p.transport {
        read_tcp_options(&d[20..opts_end], t);
    }
    p.payload = d.get(header_len..).unwrap_or(&[]);
    p.payload_len = if l4_len == u32::MAX { u32::MAX } else { l4_len.saturating_sub(header_len as u32) };
    Ok(())
}

/// The options etherparse's `TcpOptionsIterator` reads, read the way it reads them (it stops at
/// End of Option List; an unknown kind, a wrong length or a cut option is an error, after which
/// nothing more is read), without building an element per option. Every TCP packet passes here:
/// the iterator took about a quarter of decoding. `tests::options_read_as_etherparse_reads_them`
/// holds the two to the same result.
fn read_tcp_options(opts: &[u8], t: &mut TcpInfo) {
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let be32 = |b: &[u8], at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut rest = opts;
    while let Some(&kind) = rest.first() {
        let size = match kind {
            0 => return,
            1 => {
                rest = &rest[1..];
                continue;
            }
            2 => 4,
            3 => 3,
            4 => 2,
            8 => 10,
            5 => match rest.get(1) {
                Some(&len @ (10 | 18 | 26 | 34)) => usize::from(len),
                _ => 0,
            },
            _ => 0,
        };
        // A known option's length byte must be its size (checked after its size fits).
        if size == 0 || rest.len() < size || (kind != 5 && usize::from(rest[1]) != size) {
            t.options_truncated = true;
            return;
        }
        let o = &rest[..size];
        match kind {
            2 => t.mss = Some(be16(o, 2)),
            3 => t.wscale = Some(o[2]),
            4 => t.sack_permitted = true,
            8 => t.ts = Some((be32(o, 2), be32(o, 6))),
            _ => {
                t.sack[0] = (be32(o, 2), be32(o, 6));
                t.sack_count = 1;
                for at in (10..size).step_by(8) {
                    t.sack[usize::from(t.sack_count)] = (be32(o, at), be32(o, at + 4));
                    t.sack_count += 1;
                }
            }
        }
        rest = &rest[size..];
    }
}

/// `p` becomes an empty packet with this datagram's ports and payload.
fn decode_udp<'a>(p: &mut Packet<'a>, d: &'a [u8], l4_len: u32) -> Result<(), SkipReason> {
    if d.len() < 8 {
        return Err(SkipReason::TruncatedUdpHeader);
    }
    let sport = u16::from_be_bytes([d[0], d[1]]);
    let dport = u16::from_be_bytes([d[2], d[3]]);
    let udp_len = u32::from(u16::from_be_bytes([d[4], d[5]]));
    // The UDP length covers the whole datagram even for the first of several IP fragments;
    // fall back to the IP-derived length when it is zero (jumbograms) or smaller than a header.
    let payload_len = if udp_len >= 8 {
        udp_len - 8
    } else if l4_len == u32::MAX {
        u32::MAX
    } else {
        l4_len.saturating_sub(8)
    };
    *p = empty_packet(Transport::Udp, sport, dport);
    p.payload = &d[8..];
    p.payload_len = payload_len;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{TcpOptionElement, TcpOptionsIterator};

    /// What `read_tcp_options` did with etherparse's iterator, before it read the bytes itself.
    fn read_tcp_options_etherparse(opts: &[u8], t: &mut TcpInfo) {
        for opt in TcpOptionsIterator::from_slice(opts) {
            match opt {
                Ok(TcpOptionElement::MaximumSegmentSize(v)) => t.mss = Some(v),
                Ok(TcpOptionElement::WindowScale(v)) => t.wscale = Some(v),
                Ok(TcpOptionElement::SelectiveAcknowledgementPermitted) => t.sack_permitted = true,
                Ok(TcpOptionElement::SelectiveAcknowledgement(first, rest)) => {
                    t.sack[0] = first;
                    t.sack_count = 1;
                    for b in rest.iter().flatten() {
                        t.sack[usize::from(t.sack_count)] = *b;
                        t.sack_count += 1;
                    }
                }
                Ok(TcpOptionElement::Timestamp(val, ecr)) => t.ts = Some((val, ecr)),
                Ok(TcpOptionElement::Noop) => {}
                Err(_) => {
                    t.options_truncated = true;
                    break;
                }
            }
        }
    }

    #[test]
    fn options_read_as_etherparse_reads_them() {
        // Well-formed options, each alone and in a typical order, then every prefix of them and
        // every single-byte change of them (lengths, kinds, cuts), plus pseudo-random bytes.
        let sack = |n: u8| {
            let mut o = vec![5, 2 + 8 * n];
            for i in 0..u32::from(n) * 2 {
                o.extend_from_slice(&(0x1000_0000 + i * 0x111).to_be_bytes());
            }
            o
        };
        let mut cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![2, 4, 0x05, 0xb4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            vec![1, 1, 8, 10, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 9],
            [vec![1, 1], sack(1), sack(3)].concat(),
            [sack(4), vec![0, 2, 4, 5, 180]].concat(),
            [sack(3), sack(1)].concat(),
            vec![2, 4, 5, 180, 0, 3, 3, 7],
            vec![30, 4, 0, 0],
            vec![254, 4, 0, 0, 2, 4, 5, 180],
        ];
        for n in 1..=4 {
            cases.push([vec![1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 6], sack(n)].concat());
        }
        let base = cases.clone();
        for c in &base {
            for cut in 0..c.len() {
                cases.push(c[..cut].to_vec());
            }
            for at in 0..c.len() {
                for v in [0u8, 1, 2, 3, 4, 5, 8, 9, 10, 17, 18, 26, 33, 34, 35, 255] {
                    let mut m = c.clone();
                    m[at] = v;
                    cases.push(m);
                }
            }
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            let len = (x % 41) as usize;
            let mut c = Vec::with_capacity(len);
            for _ in 0..len {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                // Mostly the kinds and lengths that matter.
                let pick = [0u8, 1, 2, 3, 4, 5, 8, 10, 18, 26, 34, 4, 2, 3, (x >> 40) as u8];
                c.push(pick[((x >> 33) % pick.len() as u64) as usize]);
            }
            cases.push(c);
        }
        for c in &cases {
            let (mut got, mut want) = (TcpInfo::default(), TcpInfo::default());
            read_tcp_options(c, &mut got);
            read_tcp_options_etherparse(c, &mut want);
            assert_eq!(got, want, "options {c:?}");
        }
    }
    use crate::capture::Frame;
    use crate::link::LINKTYPE_RAW;

    fn raw_frame(data: &[u8]) -> Frame<'_> {
        Frame { number: 1, ts_ns: 0, linktype: LINKTYPE_RAW, wire_len: data.len() as u32, data, offset: 0 }
    }

    fn ipv6(next_header: u8, payload_len: u16, rest: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&payload_len.to_be_bytes());
        p.extend_from_slice(&[next_header, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(8)); // src, dst
        p.extend_from_slice(rest);
        p
    }

    /// Fuzz regression (decode_frame, SIGSEGV): a complete Hop-by-Hop header whose next header
    /// is a Destination Options header cut short. etherparse's lax slice keeps the Hop-by-Hop
    /// header, and its extension iterator then reads the missing header past the end of the
    /// slice (an out-of-bounds read, and a subtraction overflow in debug builds).
    #[test]
    fn ipv6_extension_chain_ending_in_a_cut_header() {
        // Hop-by-Hop (next: 60 Destination Options, 8 bytes), then 2 bytes of a Destination
        // Options header that claims 48.
        let hbh = [60u8, 0, 1, 4, 0, 0, 0, 0];
        let frame = ipv6(0, 8 + 48, &[&hbh[..], &[6, 5]].concat());
        let r = decode_frame(&raw_frame(&frame));
        assert!(r.is_err(), "{r:?}");
        // The same with a fragment header last (its 8 bytes cut to 4).
        let frame = ipv6(
            0,
            8 + 8,
            &[&hbh[..1], &[0u8; 7][..]].concat().iter().copied().chain([44u8, 0, 0, 0]).collect::<Vec<_>>(),
        );
        let _ = decode_frame(&raw_frame(&frame));
        // Every prefix of a chain Hop-by-Hop, Routing, Fragment, TCP.
        let mut chain = vec![43u8, 0, 0, 0, 0, 0, 0, 0]; // HbH -> Routing
        chain.extend_from_slice(&[44, 0, 0, 0, 0, 0, 0, 0]); // Routing -> Fragment
        chain.extend_from_slice(&[6, 0, 0, 0, 0x12, 0x34, 0x56, 0x78]); // Fragment (offset 0) -> TCP
        chain.extend_from_slice(&[0x9c, 0x40, 0x01, 0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        let whole = ipv6(0, chain.len() as u16, &chain);
        let p = decode_frame(&raw_frame(&whole)).expect("whole chain decodes");
        assert_eq!((p.sport, p.dport, p.ip_id), (40000, 443, Some(0x12345678)));
        for n in 40..whole.len() {
            let _ = decode_frame(&raw_frame(&whole[..n]));
        }
    }
}

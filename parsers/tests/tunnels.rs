//! Tunnels decoded to their inner TCP packet, each built byte by byte from its specification,
//! and the skip reasons that name an encapsulation we do not decode.

use std::net::{IpAddr, Ipv4Addr};

use tailscope_parsers::decode::TunnelEnds;
use tailscope_parsers::link::{LINKTYPE_ETHERNET, LINKTYPE_RAW};
use tailscope_parsers::{decode_frame, Encap, Frame, SkipReason};

const OUTER_SRC: [u8; 4] = [198, 51, 100, 1];
const OUTER_DST: [u8; 4] = [198, 51, 100, 2];

fn ipv4(src: [u8; 4], dst: [u8; 4], proto: u8, payload: &[u8]) -> Vec<u8> {
    let len = (20 + payload.len()) as u16;
    let mut h = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
    h[2..4].copy_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(payload);
    h
}

/// The inner packet: a 100-byte TCP segment 10.0.0.1:40000 -> 10.0.0.2:443.
fn inner_ip() -> Vec<u8> {
    let mut tcp = vec![0x9c, 0x40, 0x01, 0xbb, 0, 0, 0x03, 0xe8, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0];
    tcp.extend_from_slice(&[b'x'; 100]);
    ipv4([10, 0, 0, 1], [10, 0, 0, 2], 6, &tcp)
}

fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn outer(proto: u8, payload: &[u8]) -> Vec<u8> {
    ipv4(OUTER_SRC, OUTER_DST, proto, payload)
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn decode(linktype: u32, data: &[u8]) -> Result<(Encap, Option<TunnelEnds>, u16, u16, u32), SkipReason> {
    let f = Frame { number: 1, ts_ns: 0, linktype, wire_len: data.len() as u32, data, offset: 0 };
    decode_frame(&f).map(|p| (p.encap, p.tunnel, p.sport, p.dport, p.payload_len))
}

/// The inner segment came out, with this encapsulation and tunnel identifier.
fn assert_inner(data: &[u8], encap: Encap, id: Option<u32>) {
    let ends =
        TunnelEnds { src: IpAddr::V4(Ipv4Addr::from(OUTER_SRC)), dst: IpAddr::V4(Ipv4Addr::from(OUTER_DST)), id };
    assert_eq!(decode(LINKTYPE_RAW, data), Ok((encap, Some(ends), 40000, 443, 100)));
}

fn gre(flags: u16, proto: u16, extra: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut g = flags.to_be_bytes().to_vec();
    g.extend_from_slice(&proto.to_be_bytes());
    g.extend_from_slice(extra);
    g.extend_from_slice(payload);
    outer(47, &g)
}

#[test]
fn gtp_u_g_pdu_gives_the_inner_packet_and_its_teid() {
    let ip = inner_ip();
    // Version 1, PT 1, no optional fields; G-PDU; length; TEID.
    let mut g = vec![0x30, 0xff];
    g.extend_from_slice(&(ip.len() as u16).to_be_bytes());
    g.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    g.extend_from_slice(&ip);
    assert_inner(&outer(17, &udp(2152, 2152, &g)), Encap::GtpU, Some(0x1234_5678));

    // E and S flags: sequence number, N-PDU number, then a PDU Session Container extension
    // (type 0x85, one 4-byte unit) and the end of the chain.
    let mut g = vec![0x36, 0xff];
    let ext = [0x00, 0x2a, 0x00, 0x85, 0x01, 0x10, 0x09, 0x00];
    g.extend_from_slice(&((ext.len() + ip.len()) as u16).to_be_bytes());
    g.extend_from_slice(&7u32.to_be_bytes());
    g.extend_from_slice(&ext);
    g.extend_from_slice(&ip);
    assert_inner(&outer(17, &udp(2152, 2152, &g)), Encap::GtpU, Some(7));

    // An echo request (type 1) has no user packet: it stays a UDP packet on port 2152.
    let echo = outer(17, &udp(2152, 2152, &[0x32, 0x01, 0, 4, 0, 0, 0, 0, 0, 1, 0, 0]));
    let (encap, tunnel, sport, dport, _) = decode(LINKTYPE_RAW, &echo).unwrap();
    assert_eq!((encap, tunnel, sport, dport), (Encap::None, None, 2152, 2152));
}

#[test]
fn vxlan_and_gre_keep_their_identifier() {
    let mut v = vec![0x08, 0, 0, 0];
    v.extend_from_slice(&(0x00ab_cdefu32 << 8).to_be_bytes());
    v.extend_from_slice(&ethernet(0x0800, &inner_ip()));
    assert_inner(&outer(17, &udp(50000, 4789, &v)), Encap::Vxlan, Some(0xab_cdef));
    assert_inner(&gre(0x2000, 0x0800, &42u32.to_be_bytes(), &inner_ip()), Encap::Gre, Some(42));
    assert_inner(&gre(0x0000, 0x0800, &[], &inner_ip()), Encap::Gre, None);
    // Key and sequence number; checksum, key and sequence number.
    assert_inner(&gre(0x3000, 0x6558, &[0, 0, 0, 9, 0, 0, 0, 1], &ethernet(0x0800, &inner_ip())), Encap::Gre, Some(9));
    assert_inner(&gre(0xb000, 0x0800, &[0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 1], &inner_ip()), Encap::Gre, Some(9));
    // MPLS over GRE (bottom-of-stack label) and a VLAN-tagged bridged frame.
    assert_inner(&gre(0, 0x8847, &[0, 0x01, 0x01, 0x40], &inner_ip()), Encap::Gre, None);
    assert_inner(&gre(0, 0x8100, &[0, 7, 0x08, 0x00], &inner_ip()), Encap::Gre, None);
}

#[test]
fn erspan_types_one_two_three() {
    let frame = ethernet(0x0800, &inner_ip());
    // Type I: protocol 0x88BE without a sequence number, the frame right after GRE.
    assert_inner(&gre(0x0000, 0x88be, &[], &frame), Encap::Erspan, None);
    // Type II: sequence number, then version 1, VLAN 0, session 0x155, index.
    let ii = [0x10, 0x00, 0x01, 0x55, 0, 0, 0, 0];
    assert_inner(&gre(0x1000, 0x88be, &[&[0, 0, 0, 5][..], &ii].concat(), &frame), Encap::Erspan, Some(0x155));
    // Type III: version 2, session 0x3ff, timestamp, frame type 0 (Ethernet), O clear.
    let iii = [0x20, 0x00, 0x03, 0xff, 0, 0, 0, 1, 0, 0, 0x00, 0x00];
    assert_inner(&gre(0x1000, 0x22eb, &[&[0, 0, 0, 5][..], &iii].concat(), &frame), Encap::Erspan, Some(0x3ff));
    // Type III with the platform-specific subheader (O set) and frame type 2 (IP).
    let iii_o = [0x20, 0x00, 0x00, 0x07, 0, 0, 0, 1, 0, 0, 2 << 2, 0x01, 1, 2, 3, 4, 5, 6, 7, 8];
    assert_inner(&gre(0x1000, 0x22eb, &[&[0, 0, 0, 5][..], &iii_o].concat(), &inner_ip()), Encap::Erspan, Some(7));
    // A type II header of another version is named, not called not_tcp_udp.
    let bad = [0x70, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(
        decode(LINKTYPE_RAW, &gre(0x1000, 0x88be, &[&[0, 0, 0, 5][..], &bad].concat(), &frame)),
        Err(SkipReason::UndecodedErspan)
    );
}

#[test]
fn aruba_gre_carries_802_11_data_frames() {
    // QoS data frame, from DS: 24-byte header + 2 QoS bytes, then LLC/SNAP with IPv4.
    let mut wlan = vec![0x88, 0x02, 0, 0];
    wlan.extend_from_slice(&[0u8; 18]); // three addresses
    wlan.extend_from_slice(&[0x10, 0x00]); // sequence control
    wlan.extend_from_slice(&[0x00, 0x00]); // QoS control
    wlan.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
    wlan.extend_from_slice(&inner_ip());
    assert_inner(&gre(0, 0x8210, &[], &wlan), Encap::Aruba, None);
    // The same frame protected (WEP/WPA bit): named as such.
    let mut protected = wlan.clone();
    protected[1] |= 0x40;
    assert_eq!(decode(LINKTYPE_RAW, &gre(0, 0x8210, &[], &protected)), Err(SkipReason::UndecodedProtected80211));
}

#[test]
fn pptp_eoip_wccp_etherip_mpls_in_ip() {
    // PPTP enhanced GRE: K, S, A flags, version 1; payload length, call ID 0x77, seq, ack; PPP.
    let ppp = [&[0xff, 0x03, 0x00, 0x21][..], &inner_ip()].concat();
    let mut extra = (ppp.len() as u16).to_be_bytes().to_vec();
    extra.extend_from_slice(&[0, 0x77, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert_inner(&gre(0x3081, 0x880b, &extra, &ppp), Encap::Pptp, Some(0x77));
    // MikroTik EoIP: length (big-endian) and tunnel ID 5 (little-endian), then Ethernet.
    let frame = ethernet(0x0800, &inner_ip());
    let mut extra = (frame.len() as u16).to_be_bytes().to_vec();
    extra.extend_from_slice(&[5, 0]);
    assert_inner(&gre(0x2001, 0x6400, &extra, &frame), Encap::Eoip, Some(5));
    // WCCPv2: a 4-byte redirect header; WCCPv1: the IP packet right away.
    assert_inner(&gre(0, 0x883e, &[0, 0, 0, 0], &inner_ip()), Encap::Gre, None);
    assert_inner(&gre(0, 0x883e, &[], &inner_ip()), Encap::Gre, None);
    assert_inner(&outer(97, &[&[0x30, 0][..], &frame].concat()), Encap::EtherIp, None);
    assert_inner(&outer(137, &[&[0, 0x01, 0x01, 0x40][..], &inner_ip()].concat()), Encap::MplsInIp, None);
}

#[test]
fn skip_reasons_name_the_encapsulation() {
    let eth = |ip: Vec<u8>| ethernet(0x0800, &ip);
    let cases = [
        (gre(0, 0xfeae, &[], &inner_ip()), SkipReason::UndecodedGre), // Aerohive
        (gre(0x0002, 0x0800, &[], &inner_ip()), SkipReason::UndecodedGre), // unknown version
        (outer(47, &[0x00]), SkipReason::UndecodedGre),
        (outer(50, &[0, 0, 1, 0, 0, 0, 0, 1, 0xde, 0xad]), SkipReason::UndecodedEsp),
        (outer(115, &[0, 0, 0, 1, 0xde, 0xad]), SkipReason::UndecodedL2tp),
        (outer(97, &[0x10, 0]), SkipReason::UndecodedEtherIp),
        (outer(1, &[8, 0, 0, 0]), SkipReason::NotTcpUdp), // ICMP is no encapsulation
    ];
    for (ip, want) in cases {
        assert_eq!(decode(LINKTYPE_ETHERNET, &eth(ip)), Err(want));
    }
}

/// Repro `gre_outer_fragment.pcap` in small: the inner segment's length comes from its own
/// headers when the rest of it is in the outer datagram's next fragment.
#[test]
fn inner_length_of_a_tunnelled_packet_in_a_first_fragment() {
    let whole = gre(0, 0x0800, &[], &inner_ip());
    // The first fragment: more-fragments set, 64 bytes of the GRE payload.
    let mut first = whole[..20 + 64].to_vec();
    first[2..4].copy_from_slice(&(84u16).to_be_bytes());
    first[6] = 0x20;
    let f =
        Frame { number: 1, ts_ns: 0, linktype: LINKTYPE_RAW, wire_len: first.len() as u32, data: &first, offset: 0 };
    let p = decode_frame(&f).unwrap();
    assert_eq!((p.encap, p.payload_len, p.fragmented), (Encap::Gre, 100, true));
    assert_eq!(p.payload.len(), 64 - 4 - 20 - 20);
    // Without a tunnel, a length the captured bytes do not hold is still believed from them.
    let mut lying = inner_ip();
    lying.truncate(60);
    let f = Frame { number: 1, ts_ns: 0, linktype: LINKTYPE_RAW, wire_len: 60, data: &lying, offset: 0 };
    assert_eq!(decode_frame(&f).unwrap().payload_len, 20);
}

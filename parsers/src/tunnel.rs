//! Tunnels whose inner packet we decode instead of the outer one. The flow is the inner
//! connection, as in Zeek and in tshark's TCP conversation table; the outermost tunnel is
//! recorded in `Packet::encap`, with its endpoints (the outer IP addresses) and its identifier
//! (GTP-U TEID, VXLAN VNI, GRE key, ERSPAN session) in `Packet::tunnel`.
//!
//! - IP protocol 4 (IP-in-IP), 41 (6in4), 97 (EtherIP, RFC 3378), 137 (MPLS-in-IP, RFC 4023)
//!   and 47: GRE (RFC 2784/2890) with an IP, Ethernet (transparent bridging), VLAN, MPLS or
//!   PPPoE payload; ERSPAN types I, II and III; Aruba's AP-controller tunnel (802.11 frames,
//!   protocol types 0x8200-0x83f0, as Zeek registers them); MikroTik EoIP; WCCP redirection; and
//!   PPTP's enhanced GRE (version 1, PPP inside).
//! - UDP 4789 (VXLAN), 2152 (GTP-U, 3GPP TS 29.281: G-PDUs only) and Teredo (3544, or any port
//!   by content).
//!
//! A UDP packet on a tunnel port whose payload does not parse as the tunnel is left as plain UDP.
//! An IP-level encapsulation we recognise but do not decode is skipped under a reason that names
//! it (`undecoded_gre`, `undecoded_erspan`, `undecoded_esp`, ...), never as `not_tcp_udp`.

use std::net::IpAddr;

use crate::link;
use crate::skip::SkipReason;

pub const UDP_VXLAN: u16 = 4789;
pub const UDP_TEREDO: u16 = 3544;
pub const UDP_GTP_U: u16 = 2152;

/// The outermost encapsulation a packet was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum Encap {
    #[default]
    None = 0,
    IpInIp,
    SixInFour,
    Gre,
    Vxlan,
    Teredo,
    GtpU,
    Erspan,
    Aruba,
    Pptp,
    Eoip,
    EtherIp,
    MplsInIp,
}

impl Encap {
    /// The name in `packets.encap` / `flows.encap` (Wireshark's protocol names, lower case).
    pub fn name(self) -> &'static str {
        match self {
            Encap::None => "",
            Encap::IpInIp => "ipip",
            Encap::SixInFour => "6in4",
            Encap::Gre => "gre",
            Encap::Vxlan => "vxlan",
            Encap::Teredo => "teredo",
            Encap::GtpU => "gtpu",
            Encap::Erspan => "erspan",
            Encap::Aruba => "aruba",
            Encap::Pptp => "pptp",
            Encap::Eoip => "eoip",
            Encap::EtherIp => "etherip",
            Encap::MplsInIp => "mpls",
        }
    }
}

/// The outermost tunnel's endpoints (the outer IP header's source and destination) and its
/// identifier, when the encapsulation has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TunnelEnds {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub id: Option<u32>,
}

/// What a tunnel header unwraps to.
pub enum Inner<'a> {
    /// An IPv4 or IPv6 packet.
    Ip(&'a [u8]),
    /// An Ethernet frame.
    Ethernet(&'a [u8]),
    /// What follows an EtherType (VLAN tags, MPLS labels, PPPoE, IP).
    EtherType(u16, &'a [u8]),
    /// A PPP frame (PPTP).
    Ppp(&'a [u8]),
    /// An 802.11 frame (Aruba).
    Ieee80211(&'a [u8]),
}

/// A decoded tunnel header: which encapsulation, its identifier, and the inner packet.
pub struct Tunnel<'a> {
    pub encap: Encap,
    pub id: Option<u32>,
    pub inner: Inner<'a>,
}

impl<'a> Tunnel<'a> {
    fn new(encap: Encap, id: Option<u32>, inner: Inner<'a>) -> Self {
        Tunnel { encap, id, inner }
    }
}

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

fn be32(d: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
}

/// The inner packet carried by an IP payload with protocol number `proto`: `Ok(None)` when the
/// protocol is no tunnel, an error naming the encapsulation when it is one we do not decode.
pub fn from_ip_payload(proto: u8, payload: &[u8]) -> Result<Option<Tunnel<'_>>, SkipReason> {
    Ok(Some(match proto {
        4 => Tunnel::new(Encap::IpInIp, None, Inner::Ip(payload)),
        41 => Tunnel::new(Encap::SixInFour, None, Inner::Ip(payload)),
        47 => gre(payload)?,
        // EtherIP: a 16-bit header whose version nibble is 3, then an Ethernet frame.
        97 if payload.len() >= 2 && payload[0] >> 4 == 3 => {
            Tunnel::new(Encap::EtherIp, None, Inner::Ethernet(&payload[2..]))
        }
        97 => return Err(SkipReason::UndecodedEtherIp),
        137 => Tunnel::new(Encap::MplsInIp, None, Inner::EtherType(link::ETHERTYPE_MPLS, payload)),
        // Encrypted (ESP), or needing the tunnel's configuration to find the inner frame
        // (L2TPv3's cookie length is agreed out of band).
        50 => return Err(SkipReason::UndecodedEsp),
        115 => return Err(SkipReason::UndecodedL2tp),
        _ => return Ok(None),
    }))
}

/// The inner packet carried by a UDP payload, if its ports name a tunnel and it parses as one.
pub fn from_udp_payload(sport: u16, dport: u16, payload: &[u8]) -> Option<Tunnel<'_>> {
    let port = |p: u16| sport == p || dport == p;
    if port(UDP_VXLAN) {
        // 8-byte header whose I flag (0x08) says a VNI is present; an Ethernet frame follows.
        if payload.len() >= 8 + 14 && payload[0] & 0x08 != 0 {
            let vni = be32(payload, 4) >> 8;
            return Some(Tunnel::new(Encap::Vxlan, Some(vni), Inner::Ethernet(&payload[8..])));
        }
    }
    if port(UDP_GTP_U) {
        if let Some(t) = gtp_u(payload) {
            return Some(t);
        }
    }
    if port(UDP_TEREDO) {
        return teredo(payload).map(|p| Tunnel::new(Encap::Teredo, None, Inner::Ip(p)));
    }
    // Teredo relays use arbitrary ports (Zeek finds them by content, tshark does not): accept a
    // payload that is exactly one IPv6 packet to or from a Teredo address (2001:0::/32).
    if let Some(inner) = teredo(payload) {
        let teredo_addr = |at: usize| inner[at..at + 4] == [0x20, 0x01, 0x00, 0x00];
        if inner.len() == 40 + usize::from(be16(inner, 4)) && (teredo_addr(8) || teredo_addr(24)) {
            return Some(Tunnel::new(Encap::Teredo, None, Inner::Ip(inner)));
        }
    }
    None
}

/// GTPv1-U (3GPP TS 29.281 §5): an 8-byte header (version 1, protocol type GTP, message type
/// 255 = G-PDU, length, TEID), 4 more bytes when any of the E, S, PN flags is set, then the
/// extension header chain (each header's first byte is its length in 4-byte units, its last
/// byte the next type), then the user's IP packet. Echo, error indication and end marker
/// messages carry no user packet.
fn gtp_u(d: &[u8]) -> Option<Tunnel<'_>> {
    if d.len() < 8 || d[0] >> 5 != 1 || d[0] & 0x10 == 0 || d[1] != 0xff {
        return None;
    }
    let teid = be32(d, 4);
    let end = (8 + usize::from(be16(d, 2))).min(d.len());
    let mut at = 8;
    if d[0] & 0x07 != 0 {
        let mut next = *d.get(11)?;
        at = 12;
        if d[0] & 0x04 != 0 {
            while next != 0 {
                let len = usize::from(*d.get(at)?) * 4;
                if len == 0 {
                    return None;
                }
                next = *d.get(at + len - 1)?;
                at += len;
            }
        }
    }
    let inner = d.get(at..end)?;
    match inner.first()? >> 4 {
        4 | 6 => Some(Tunnel::new(Encap::GtpU, Some(teid), Inner::Ip(inner))),
        _ => None,
    }
}

const GRE_CHECKSUM: u16 = 0x8000;
const GRE_KEY: u16 = 0x2000;
const GRE_SEQUENCE: u16 = 0x1000;
const GRE_ACK: u16 = 0x0080; // enhanced GRE (version 1) only

const GRE_PPP: u16 = 0x880b;
const GRE_TEB: u16 = 0x6558; // transparent Ethernet bridging
const GRE_ERSPAN_II: u16 = 0x88be; // also type I, without a sequence number
const GRE_ERSPAN_III: u16 = 0x22eb;
const GRE_EOIP: u16 = 0x6400;
const GRE_WCCP: u16 = 0x883e;

fn gre(d: &[u8]) -> Result<Tunnel<'_>, SkipReason> {
    if d.len() < 4 {
        return Err(SkipReason::UndecodedGre);
    }
    let flags = be16(d, 0);
    let proto = be16(d, 2);
    match (flags & 0x0007, proto) {
        (1, GRE_PPP) => return pptp(d, flags),
        (1, GRE_EOIP) => return eoip(d),
        (0, _) => {}
        _ => return Err(SkipReason::UndecodedGre),
    }
    let mut at = 4;
    if flags & GRE_CHECKSUM != 0 {
        at += 4; // checksum and reserved
    }
    let key = if flags & GRE_KEY != 0 {
        at += 4;
        Some(be32(d.get(..at).ok_or(SkipReason::UndecodedGre)?, at - 4))
    } else {
        None
    };
    if flags & GRE_SEQUENCE != 0 {
        at += 4;
    }
    let rest = d.get(at..).ok_or(SkipReason::UndecodedGre)?;
    let t = |inner| Ok(Tunnel::new(Encap::Gre, key, inner));
    match proto {
        link::ETHERTYPE_IPV4 | link::ETHERTYPE_IPV6 => t(Inner::Ip(rest)),
        GRE_TEB => t(Inner::Ethernet(rest)),
        link::ETHERTYPE_VLAN | link::ETHERTYPE_MPLS | link::ETHERTYPE_MPLS_MC | link::ETHERTYPE_PPPOE_SESSION => {
            t(Inner::EtherType(proto, rest))
        }
        GRE_WCCP => {
            // WCCPv2 adds a 4-byte redirect header; WCCPv1 puts the IP packet right after GRE.
            let ip = if rest.first().is_some_and(|b| b >> 4 == 4) { rest } else { rest.get(4..).unwrap_or(&[]) };
            t(Inner::Ip(ip))
        }
        GRE_ERSPAN_II if flags & GRE_SEQUENCE == 0 => {
            // Type I: no sequence number and no ERSPAN header, the mirrored frame follows.
            Ok(Tunnel::new(Encap::Erspan, None, Inner::Ethernet(rest)))
        }
        GRE_ERSPAN_II => erspan_ii(rest),
        GRE_ERSPAN_III => erspan_iii(rest),
        0x8200..=0x83ff if proto & 0x000f == 0 => Ok(Tunnel::new(Encap::Aruba, key, Inner::Ieee80211(rest))),
        _ => Err(SkipReason::UndecodedGre),
    }
}

/// ERSPAN type II: an 8-byte header (version 1, VLAN, CoS, encapsulation, truncated, session
/// ID, index), then the mirrored Ethernet frame.
fn erspan_ii(d: &[u8]) -> Result<Tunnel<'_>, SkipReason> {
    if d.len() < 8 || d[0] >> 4 != 1 {
        return Err(SkipReason::UndecodedErspan);
    }
    let session = u32::from(be16(d, 2) & 0x03ff);
    Ok(Tunnel::new(Encap::Erspan, Some(session), Inner::Ethernet(&d[8..])))
}

/// ERSPAN type III: a 12-byte header (version 2, VLAN, CoS, BSO, truncated, session ID,
/// timestamp, SGT, P, frame type, hardware ID, direction, granularity, O), an 8-byte
/// platform-specific subheader when O is set, then the mirrored frame: Ethernet (frame type 0)
/// or IP (frame type 2).
fn erspan_iii(d: &[u8]) -> Result<Tunnel<'_>, SkipReason> {
    if d.len() < 12 || d[0] >> 4 != 2 {
        return Err(SkipReason::UndecodedErspan);
    }
    let session = u32::from(be16(d, 2) & 0x03ff);
    let frame_type = (d[10] >> 2) & 0x1f;
    let at = if d[11] & 0x01 != 0 { 20 } else { 12 };
    let rest = d.get(at..).ok_or(SkipReason::UndecodedErspan)?;
    let inner = match frame_type {
        0 => Inner::Ethernet(rest),
        2 => Inner::Ip(rest),
        _ => return Err(SkipReason::UndecodedErspan),
    };
    Ok(Tunnel::new(Encap::Erspan, Some(session), inner))
}

/// PPTP's enhanced GRE (RFC 2637 §4.1): key field = payload length and call ID, optional
/// sequence and acknowledgment numbers, then the PPP frame (bounded by the payload length).
fn pptp(d: &[u8], flags: u16) -> Result<Tunnel<'_>, SkipReason> {
    if d.len() < 8 || flags & GRE_KEY == 0 {
        return Err(SkipReason::UndecodedGre);
    }
    let len = usize::from(be16(d, 4));
    let call_id = u32::from(be16(d, 6));
    let mut at = 8;
    for bit in [GRE_SEQUENCE, GRE_ACK] {
        if flags & bit != 0 {
            at += 4;
        }
    }
    let ppp = d.get(at..).ok_or(SkipReason::UndecodedGre)?;
    Ok(Tunnel::new(Encap::Pptp, Some(call_id), Inner::Ppp(&ppp[..len.min(ppp.len())])))
}

/// MikroTik EoIP: GRE version 1 with protocol 0x6400 whose key field holds the payload length
/// (big-endian) and the tunnel ID (little-endian), then an Ethernet frame.
fn eoip(d: &[u8]) -> Result<Tunnel<'_>, SkipReason> {
    if d.len() < 8 {
        return Err(SkipReason::UndecodedGre);
    }
    let tunnel_id = u32::from(u16::from_le_bytes([d[6], d[7]]));
    Ok(Tunnel::new(Encap::Eoip, Some(tunnel_id), Inner::Ethernet(&d[8..])))
}

/// An 802.11 data frame down to its LLC/SNAP EtherType (IEEE 802.11-2020 §9.3.2.1): a 24-byte
/// header, 30 with a fourth address (to and from DS), 2 more for QoS, 4 more for HT control.
pub fn ieee80211_data(d: &[u8]) -> Result<(u16, &[u8]), SkipReason> {
    if d.len() < 24 {
        return Err(SkipReason::TruncatedLinkHeader);
    }
    let (fc0, fc1) = (d[0], d[1]);
    let (ty, subtype) = ((fc0 >> 2) & 0x03, fc0 >> 4);
    if ty != 2 || subtype & 0x04 != 0 {
        return Err(SkipReason::NotIp); // management, control, or a data frame without a body
    }
    if fc1 & 0x40 != 0 {
        return Err(SkipReason::UndecodedProtected80211);
    }
    let qos = subtype & 0x08 != 0;
    let mut at = 24;
    if fc1 & 0x03 == 0x03 {
        at += 6;
    }
    if qos {
        at += 2;
        if fc1 & 0x80 != 0 {
            at += 4;
        }
    }
    let llc = d.get(at..at + 8).ok_or(SkipReason::TruncatedLinkHeader)?;
    if llc[..6] != [0xaa, 0xaa, 0x03, 0, 0, 0] {
        return Err(SkipReason::NotIp);
    }
    Ok((be16(llc, 6), &d[at + 8..]))
}

/// RFC 4380: optional authentication and origin-indication headers, then an IPv6 packet.
fn teredo(d: &[u8]) -> Option<&[u8]> {
    let mut d = d;
    if d.len() >= 4 && d[0] == 0 && d[1] == 1 {
        let id_len = usize::from(d[2]);
        let au_len = usize::from(d[3]);
        d = d.get(4 + id_len + au_len + 8 + 1..)?;
    }
    if d.len() >= 8 && d[0] == 0 && d[1] == 0 {
        d = &d[8..];
    }
    if d.len() >= 40 && d[0] >> 4 == 6 {
        let payload_len = usize::from(be16(d, 4));
        if 40 + payload_len >= d.len() {
            return Some(d);
        }
    }
    None
}

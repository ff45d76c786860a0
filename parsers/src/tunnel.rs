//! Tunnels whose inner packet we decode instead of the outer one: IP-in-IP (4), 6in4 (41),
//! GRE (47), VXLAN (UDP 4789) and Teredo (UDP 3544). The flow is the inner connection, as in Zeek
//! and in tshark's TCP conversation table; the outermost tunnel is recorded in `Packet::encap`.
//!
//! A UDP packet on a tunnel port whose payload does not parse as the tunnel is left as plain UDP.

use crate::decode::Encap;
use crate::link;

pub const UDP_VXLAN: u16 = 4789;
pub const UDP_TEREDO: u16 = 3544;

/// What a tunnel header unwraps to.
pub enum Inner<'a> {
    Ip(&'a [u8]),
    Ethernet(&'a [u8]),
}

/// The inner packet carried by an IP payload with protocol number `proto`, if any.
pub fn from_ip_payload(proto: u8, payload: &[u8]) -> Option<(Encap, Inner<'_>)> {
    match proto {
        4 | 41 => Some((if proto == 4 { Encap::IpInIp } else { Encap::SixInFour }, Inner::Ip(payload))),
        47 => gre(payload).map(|i| (Encap::Gre, i)),
        _ => None,
    }
}

/// The inner packet carried by a UDP payload, if its ports name a tunnel and it parses as one.
pub fn from_udp_payload(sport: u16, dport: u16, payload: &[u8]) -> Option<(Encap, Inner<'_>)> {
    if sport == UDP_VXLAN || dport == UDP_VXLAN {
        // 8-byte header whose I flag (0x08) says a VNI is present; an Ethernet frame follows.
        if payload.len() >= 8 + 14 && payload[0] & 0x08 != 0 {
            return Some((Encap::Vxlan, Inner::Ethernet(&payload[8..])));
        }
    }
    if sport == UDP_TEREDO || dport == UDP_TEREDO {
        return teredo(payload).map(|p| (Encap::Teredo, Inner::Ip(p)));
    }
    // Teredo relays use arbitrary ports (Zeek finds them by content, tshark does not): accept a
    // payload that is exactly one IPv6 packet to or from a Teredo address (2001:0::/32).
    if let Some(inner) = teredo(payload) {
        let teredo_addr = |at: usize| inner[at..at + 4] == [0x20, 0x01, 0x00, 0x00];
        if inner.len() == 40 + usize::from(u16::from_be_bytes([inner[4], inner[5]]))
            && (teredo_addr(8) || teredo_addr(24))
        {
            return Some((Encap::Teredo, Inner::Ip(inner)));
        }
    }
    None
}

fn gre(d: &[u8]) -> Option<Inner<'_>> {
    if d.len() < 4 {
        return None;
    }
    let flags = u16::from_be_bytes([d[0], d[1]]);
    if flags & 0x0007 != 0 {
        return None; // version 1 is PPTP's enhanced GRE: PPP inside, not handled
    }
    let mut at = 4;
    for bit in [0x8000u16, 0x2000, 0x1000] {
        // checksum(+reserved), key, sequence number: 4 bytes each when present
        if flags & bit != 0 {
            at += 4;
        }
    }
    let rest = d.get(at..)?;
    match u16::from_be_bytes([d[2], d[3]]) {
        link::ETHERTYPE_IPV4 | link::ETHERTYPE_IPV6 => Some(Inner::Ip(rest)),
        0x6558 => Some(Inner::Ethernet(rest)), // transparent Ethernet bridging
        _ => None,
    }
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
        let payload_len = usize::from(u16::from_be_bytes([d[4], d[5]]));
        if 40 + payload_len >= d.len() {
            return Some(d);
        }
    }
    None
}

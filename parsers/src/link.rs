//! Link layers down to the network-layer packet.
//!
//! Each link type is a small view over the frame bytes: its header length and where its
//! protocol field sits are in the table below, the length is checked once, and the result is the
//! slice where the IP header starts. Ethernet also walks 802.1Q/802.1ad tags (QinQ), PPPoE
//! sessions and MPLS label stacks, because carriers' captures are full of them.

use crate::skip::SkipReason;

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_PPP: u32 = 9;
pub const LINKTYPE_PPP_HDLC: u32 = 50;
pub const LINKTYPE_PPP_ETHER: u32 = 51;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
pub const ETHERTYPE_PPPOE_SESSION: u16 = 0x8864;
pub const ETHERTYPE_MPLS: u16 = 0x8847;
pub const ETHERTYPE_MPLS_MC: u16 = 0x8848;

const PPP_IPV4: u16 = 0x0021;
const PPP_IPV6: u16 = 0x0057;

/// Most tags we walk before calling a frame malformed (QinQ is 2; 8 is generous).
const MAX_TAGS: usize = 8;

/// Is this link type one we decode?
pub fn supported(linktype: u32) -> bool {
    matches!(
        linktype,
        LINKTYPE_NULL
            | LINKTYPE_ETHERNET
            | LINKTYPE_PPP
            | LINKTYPE_PPP_HDLC
            | LINKTYPE_PPP_ETHER
            | LINKTYPE_RAW
            | LINKTYPE_LOOP
            | LINKTYPE_LINUX_SLL
            | LINKTYPE_IPV4
            | LINKTYPE_IPV6
            | LINKTYPE_LINUX_SLL2
    )
}

fn be16(d: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([d[at], d[at + 1]])
}

/// Strip the link layer; returns the network-layer bytes.
pub fn strip(linktype: u32, frame: &[u8]) -> Result<&[u8], SkipReason> {
    match linktype {
        LINKTYPE_ETHERNET => ethernet(frame),
        LINKTYPE_RAW | LINKTYPE_IPV4 | LINKTYPE_IPV6 => Ok(frame),
        LINKTYPE_LINUX_SLL => {
            // 16 bytes: packet type, ARPHRD, addr len, addr (8), protocol.
            need(frame, 16)?;
            ether_payload(be16(frame, 14), &frame[16..], 0)
        }
        LINKTYPE_LINUX_SLL2 => {
            // 20 bytes: protocol first, then reserved, ifindex, ARPHRD, type, addr len, addr.
            need(frame, 20)?;
            ether_payload(be16(frame, 0), &frame[20..], 0)
        }
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            // 4-byte address family: host byte order for NULL (so try both), network for LOOP.
            need(frame, 4)?;
            let le = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let be = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let af = if linktype == LINKTYPE_LOOP || le > 0xffff { be } else { le };
            match af {
                // AF_INET everywhere; AF_INET6 is 10 (Linux), 24 (NetBSD/OpenBSD), 28 (FreeBSD),
                // 30 (macOS).
                2 | 10 | 24 | 28 | 30 => Ok(&frame[4..]),
                _ => Err(SkipReason::NotIp),
            }
        }
        LINKTYPE_PPP | LINKTYPE_PPP_HDLC => ppp(frame),
        LINKTYPE_PPP_ETHER => pppoe(frame),
        _ => Err(SkipReason::UnsupportedLinkType),
    }
}

fn need(d: &[u8], n: usize) -> Result<(), SkipReason> {
    if d.len() < n {
        Err(SkipReason::TruncatedLinkHeader)
    } else {
        Ok(())
    }
}

pub fn ethernet(frame: &[u8]) -> Result<&[u8], SkipReason> {
    need(frame, 14)?;
    let ethertype = be16(frame, 12);
    if ethertype < 0x0600 {
        // 802.3 length field: only LLC/SNAP carrying an EtherType can hold IP.
        need(frame, 22)?;
        if frame[14..20] == [0xaa, 0xaa, 0x03, 0, 0, 0] {
            return ether_payload(be16(frame, 20), &frame[22..], 0);
        }
        return Err(SkipReason::NotIp);
    }
    ether_payload(ethertype, &frame[14..], 0)
}

/// Follow an EtherType through tags and shims to the IP header.
pub(crate) fn ether_payload(ethertype: u16, rest: &[u8], depth: usize) -> Result<&[u8], SkipReason> {
    if depth > MAX_TAGS {
        return Err(SkipReason::NotIp);
    }
    match ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(rest),
        ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => {
            need(rest, 4)?;
            ether_payload(be16(rest, 2), &rest[4..], depth + 1)
        }
        ETHERTYPE_PPPOE_SESSION => pppoe(rest),
        ETHERTYPE_MPLS | ETHERTYPE_MPLS_MC => {
            let mut at = 0;
            loop {
                need(rest, at + 4)?;
                let bottom = rest[at + 2] & 0x01 != 0;
                at += 4;
                if bottom || at / 4 > MAX_TAGS {
                    break;
                }
            }
            ip_by_version(&rest[at..])
        }
        _ => Err(SkipReason::NotIp),
    }
}

/// PPPoE session header (6 bytes) then a PPP protocol field. The header's length field bounds
/// the PPP frame: bytes after it are Ethernet padding, even when the IP header claims them.
fn pppoe(d: &[u8]) -> Result<&[u8], SkipReason> {
    need(d, 8)?;
    let end = (6 + usize::from(be16(d, 4))).clamp(8, d.len());
    ppp_protocol(be16(d, 6), &d[8..end])
}

/// PPP, with or without the HDLC address/control bytes, with a 1- or 2-byte protocol field.
pub(crate) fn ppp(d: &[u8]) -> Result<&[u8], SkipReason> {
    let d = if d.len() >= 2 && d[0] == 0xff && d[1] == 0x03 { &d[2..] } else { d };
    need(d, 1)?;
    if d[0] & 0x01 == 1 {
        // Protocol-field compression: a single odd byte.
        return ppp_protocol(u16::from(d[0]), &d[1..]);
    }
    need(d, 2)?;
    ppp_protocol(be16(d, 0), &d[2..])
}

fn ppp_protocol(proto: u16, rest: &[u8]) -> Result<&[u8], SkipReason> {
    match proto {
        PPP_IPV4 | PPP_IPV6 => Ok(rest),
        _ => Err(SkipReason::NotIp),
    }
}

fn ip_by_version(d: &[u8]) -> Result<&[u8], SkipReason> {
    match d.first().map(|b| b >> 4) {
        Some(4) | Some(6) => Ok(d),
        Some(_) => Err(SkipReason::NotIp),
        None => Err(SkipReason::TruncatedLinkHeader),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qinq_pppoe_reaches_ip() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x88, 0x64]);
        f.extend_from_slice(&[0x11, 0, 0, 1, 0, 20, 0x00, 0x21]);
        f.extend_from_slice(&[0x45, 0, 0, 20]);
        assert_eq!(strip(LINKTYPE_ETHERNET, &f).unwrap(), &[0x45, 0, 0, 20]);
    }

    #[test]
    fn short_frames_are_truncated_not_panics() {
        for n in 0..20 {
            let f = vec![0x81u8; n];
            for lt in [0, 1, 9, 51, 101, 108, 113, 228, 229, 276] {
                let _ = strip(lt, &f);
            }
        }
        assert_eq!(strip(LINKTYPE_LINUX_SLL, &[0; 10]), Err(SkipReason::TruncatedLinkHeader));
    }

    #[test]
    fn null_loopback_both_byte_orders() {
        assert!(strip(LINKTYPE_NULL, &[2, 0, 0, 0, 0x45]).is_ok());
        assert!(strip(LINKTYPE_NULL, &[0, 0, 0, 2, 0x45]).is_ok());
        assert!(strip(LINKTYPE_LOOP, &[0, 0, 0, 30, 0x60]).is_ok());
        assert_eq!(strip(LINKTYPE_NULL, &[7, 0, 0, 0]), Err(SkipReason::NotIp));
    }
}

//! Google QUIC Q035–Q043: the public header and the client's CHLO, which these versions send in
//! the clear (null encryption: a 12-byte FNV-1a-128 hash, then frames).
//!
//! Public header (gQUIC wire specification): a flags byte (0x01 version present, 0x02 public
//! reset, 0x04 diversification nonce (server only), 0x08 8-byte connection ID present, 0x30 packet
//! number length 1/2/4/6, 0x80 unused and zero), the connection ID, the version when flagged
//! (client packets until the server agrees), the packet number. No IETF long header: the high
//! bit is clear, so these packets are not read by [`crate::quic::header`].
//!
//! The handshake is on stream 1: a STREAM frame (type 1fdooossB: FIN, data length present,
//! offset length 0/2–8 bytes, stream ID length 1–4 bytes; big-endian from Q039, little-endian
//! before) whose data is a handshake message: tag `CHLO`, a little-endian entry count, two
//! padding bytes, then (tag, end offset) pairs and the values. The `SNI` tag is the server name.
//! Only the first frame of the first packet is read: Chrome's CHLO starts there.

use super::version::google_number;
use super::Reader;

/// The versions read here (Q044+ use IETF-style long headers, Q050+ encrypt their Initials).
pub const FIRST: u16 = 35;
pub const LAST: u16 = 43;

const FLAG_VERSION: u8 = 0x01;
const FLAG_RESET: u8 = 0x02;
const FLAG_NONCE: u8 = 0x04;
const FLAG_CID: u8 = 0x08;

/// A gQUIC public header that carries a version (a client's packet before the server agreed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublicHeader {
    pub version: u32,
    pub cid: Option<u64>,
    pub packet_number: u64,
    /// Where the packet's (null-encrypted or encrypted) payload starts.
    pub payload_offset: usize,
}

/// `Q035`…`Q043` as a version number, if `v` is one.
pub fn is_legacy_version(v: u32) -> bool {
    v >> 24 == u32::from(b'Q') && google_number(v).is_some_and(|n| (FIRST..=LAST).contains(&n))
}

/// Chromium's clients still set both connection-ID bits (0x0C) for an 8-byte connection ID: the
/// older public header coded the ID's length in them (0x0C: 8 bytes), and
/// `PACKET_PUBLIC_FLAGS_8BYTE_CONNECTION_ID_OLD` kept that value on the wire. Only a server sends
/// a diversification nonce, so in a packet naming a version 0x04 beside 0x08 is this, no nonce
/// (YouTube and WeChat captures, nDPI's youtube_quic.pcap and wechat.pcap: flags 0x0d on every
/// Q035 CHLO; tshark reads the same).
const FLAGS_CID_OLD: u8 = FLAG_CID | FLAG_NONCE;

/// The public header of a client packet that names a Q035–Q043 version.
pub fn parse_versioned(d: &[u8]) -> Option<PublicHeader> {
    let flags = *d.first()?;
    let nonce = flags & FLAGS_CID_OLD == FLAG_NONCE;
    if flags & 0x80 != 0 || flags & FLAG_VERSION == 0 || flags & FLAG_RESET != 0 || nonce {
        return None;
    }
    let mut r = Reader::new(d);
    r.u8()?;
    let cid = if flags & FLAG_CID != 0 { Some(u64::from_be_bytes(r.bytes(8usize)?.try_into().ok()?)) } else { None };
    let version = r.u32()?;
    if !is_legacy_version(version) {
        return None;
    }
    let pn_len = [1usize, 2, 4, 6][usize::from((flags >> 4) & 0x03)];
    let pn = r.bytes(pn_len)?;
    // Big-endian from Q039 (the header's packet number included), little-endian before.
    let big = google_number(version)? >= 39;
    let packet_number = uint(pn, big);
    Some(PublicHeader { version, cid, packet_number, payload_offset: r.pos() })
}

fn uint(b: &[u8], big_endian: bool) -> u64 {
    let f = |n: u64, x: &u8| (n << 8) | u64::from(*x);
    if big_endian {
        b.iter().fold(0, f)
    } else {
        b.iter().rev().fold(0, f)
    }
}

/// The server name in the CHLO of this client packet, when the packet is a Q035–Q043 packet
/// whose first frame is stream 1's handshake data starting with a CHLO that has an SNI tag.
pub fn client_hello_sni(d: &[u8]) -> Option<String> {
    let h = parse_versioned(d)?;
    let big = google_number(h.version)? >= 39;
    let mut r = Reader::new(d.get(h.payload_offset..)?);
    r.bytes(12usize)?; // null encryption's message hash
    let ty = r.u8()?;
    if ty & 0x80 == 0 {
        return None;
    }
    let id_len = usize::from(ty & 0x03) + 1;
    let off_len = match (ty >> 2) & 0x07 {
        0 => 0,
        n => usize::from(n) + 1,
    };
    let stream = uint(r.bytes(id_len)?, big);
    let offset = uint(r.bytes(off_len)?, big);
    let data = if ty & 0x20 != 0 {
        let n = uint(r.bytes(2usize)?, big);
        r.bytes(n)?
    } else {
        r.rest()
    };
    if stream != 1 || offset != 0 {
        return None;
    }
    chlo_tag(data, *b"SNI\0").and_then(|v| String::from_utf8(v.to_vec()).ok()).filter(|s| !s.is_empty())
}

/// The value of `tag` in a CHLO handshake message (little-endian counts and offsets).
fn chlo_tag(msg: &[u8], tag: [u8; 4]) -> Option<&[u8]> {
    let mut r = Reader::new(msg);
    if r.bytes(4usize)? != b"CHLO" {
        return None;
    }
    let n = usize::from(u16::from_le_bytes(r.bytes(2usize)?.try_into().ok()?));
    r.bytes(2usize)?;
    let index = r.bytes(n.checked_mul(8)?)?;
    let values = r.rest();
    let mut start = 0usize;
    for e in index.chunks_exact(8) {
        let end = u32::from_le_bytes(e[4..8].try_into().ok()?) as usize;
        if e[..4] == tag {
            return values.get(start..end);
        }
        start = end;
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A client's first packet of `version` (e.g. b"Q043") whose CHLO has `tags`, built as the
    /// wire specification lays it out.
    pub(crate) fn chlo_packet(version: &[u8; 4], tags: &[([u8; 4], &[u8])]) -> Vec<u8> {
        let n: u16 = version[1..].iter().fold(0, |n, d| n * 10 + u16::from(d - b'0'));
        let big = n >= 39;
        let mut msg = b"CHLO".to_vec();
        msg.extend_from_slice(&(tags.len() as u16).to_le_bytes());
        msg.extend_from_slice(&[0, 0]);
        let mut end = 0u32;
        for (t, v) in tags {
            end += v.len() as u32;
            msg.extend_from_slice(t);
            msg.extend_from_slice(&end.to_le_bytes());
        }
        for (_, v) in tags {
            msg.extend_from_slice(v);
        }
        // flags: version, 8-byte CID, 1-byte packet number
        let mut p = vec![0x09];
        p.extend_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        p.extend_from_slice(version);
        p.push(1);
        p.extend_from_slice(&[0xaa; 12]);
        // STREAM: FIN 0, data length present, no offset, 1-byte stream ID
        p.push(0x80 | 0x20);
        p.push(1);
        let len = msg.len() as u16;
        p.extend_from_slice(&if big { len.to_be_bytes() } else { len.to_le_bytes() });
        p.extend_from_slice(&msg);
        p.resize(1350, 0); // PADDING frames to the end, as Chrome pads its CHLO
        p
    }

    #[test]
    fn sni_from_the_chlo_of_q035_to_q043() {
        for v in [b"Q035", b"Q037", b"Q039", b"Q043"] {
            let p = chlo_packet(v, &[(*b"PAD\0", &[0u8; 30]), (*b"SNI\0", b"www.example.com"), (*b"VER\0", v)]);
            let h = parse_versioned(&p).unwrap();
            assert_eq!((h.version, h.cid, h.packet_number), (u32::from_be_bytes(*v), Some(0x1122_3344_5566_7788), 1));
            assert_eq!(client_hello_sni(&p).as_deref(), Some("www.example.com"), "{v:?}");
        }
        // No SNI tag (an IP literal), another version, a cut packet: no name, no panic.
        let p = chlo_packet(b"Q043", &[(*b"VER\0", b"Q043")]);
        assert_eq!(client_hello_sni(&p), None);
        assert!(parse_versioned(&chlo_packet(b"Q046", &[])).is_none());
        let p = chlo_packet(b"Q043", &[(*b"SNI\0", b"a.example")]);
        for n in 0..80 {
            let _ = client_hello_sni(&p[..n]);
        }
    }

    /// nDPI's youtube_quic.pcap frame 1 (Q035, flags 0x0d: version, 8-byte connection ID in the
    /// old two-bit coding, 1-byte packet number): the first bytes of its CHLO.
    #[test]
    fn chromium_old_8_byte_cid_flags() {
        let mut p = chlo_packet(b"Q035", &[(*b"PAD\0", &[0; 6]), (*b"SNI\0", b"pagead2.googlesyndication.com")]);
        p[0] = 0x0d;
        let h = parse_versioned(&p).expect("0x0C is an 8-byte connection ID");
        assert_eq!((h.cid, h.packet_number, h.payload_offset), (Some(0x1122_3344_5566_7788), 1, 14));
        assert_eq!(client_hello_sni(&p).as_deref(), Some("pagead2.googlesyndication.com"));
        // a nonce without the 8-byte flag is no such coding: a server's packet, not read here
        p[0] = 0x05;
        assert_eq!(parse_versioned(&p), None);
    }

    #[test]
    fn legacy_versions() {
        assert!(is_legacy_version(u32::from_be_bytes(*b"Q035")));
        assert!(is_legacy_version(u32::from_be_bytes(*b"Q043")));
        assert!(!is_legacy_version(u32::from_be_bytes(*b"Q034")));
        assert!(!is_legacy_version(u32::from_be_bytes(*b"Q046")));
        assert!(!is_legacy_version(u32::from_be_bytes(*b"T043")));
    }
}

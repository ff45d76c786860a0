//! Long and short headers, and the coalesced packets of one UDP datagram.
//!
//! [`LongHeader`] and [`ShortHeader`] are zero-copy views: `new_checked` walks the header once,
//! checking every length against the buffer, and keeps the field offsets; the accessors then
//! cannot fail. [`PacketHeader`] is the plain parsed form that [`parse_datagram`] returns.
//!
//! What is protected and what is not (RFC 9001 §5.4.1): header protection masks the low four
//! bits of a long header's first byte (reserved bits and packet number length) and the low five
//! bits of a short header's (reserved bits, key phase, packet number length), plus the packet
//! number itself. Everything else is in the clear: form, fixed bit, long packet type, version,
//! connection IDs, token, Length, and the short header's spin bit (0x20).

use super::version::{self, RetryIntegrity, Syntax, Version};
use super::{QuicError, Reader};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Form {
    Long,
    Short,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    Initial,
    ZeroRtt,
    Handshake,
    Retry,
    VersionNegotiation,
    /// A short header packet (1-RTT).
    OneRtt,
    /// A long header of a version whose type bits we do not know (grease, unknown).
    Unknown,
}

impl PacketType {
    pub fn name(self) -> &'static str {
        match self {
            PacketType::Initial => "initial",
            PacketType::ZeroRtt => "0rtt",
            PacketType::Handshake => "handshake",
            PacketType::Retry => "retry",
            PacketType::VersionNegotiation => "version_negotiation",
            PacketType::OneRtt => "1rtt",
            PacketType::Unknown => "unknown",
        }
    }
}

/// Map a long header's two type bits to a type, for versions that use them as v1 or v2 do.
fn long_packet_type(version: u32, bits: u8) -> PacketType {
    let t = version::long_type_bits(version);
    match bits {
        b if b == t[0] => PacketType::Initial,
        b if b == t[1] => PacketType::ZeroRtt,
        b if b == t[2] => PacketType::Handshake,
        _ => PacketType::Retry,
    }
}

type Span = (usize, usize);

fn span(r: &Reader<'_>, len: usize) -> Span {
    (r.pos() - len, r.pos())
}

/// A view of one long header packet. `buf` starts at the packet's first byte and may run past
/// the packet (the rest of the datagram); [`LongHeader::packet`] is the packet alone.
#[derive(Debug, Clone)]
pub struct LongHeader<'a> {
    buf: &'a [u8],
    version: u32,
    ty: PacketType,
    dcid: Span,
    scid: Span,
    token: Span,
    length: Option<u64>,
    pn_offset: Option<usize>,
    end: usize,
    truncated: bool,
    versions: Span,
    retry_tag: Option<Span>,
    retry_odcid: Option<Span>,
}

impl<'a> LongHeader<'a> {
    /// Walk the header of the long header packet at the start of `buf`.
    ///
    /// A greased version (0x?a?a?a?a) has no format of its own; clients send it in their first
    /// flight to elicit Version Negotiation, laid out as a v1 packet. It is read as v1 when that
    /// parses cleanly (and the Length fits), as Wireshark does; otherwise only its invariants
    /// (version, connection IDs) are read and the type is [`PacketType::Unknown`].
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, QuicError> {
        let version = buf.get(1..5).map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]));
        if version.is_some_and(|v| matches!(Version::classify(v), Version::Grease(_))) {
            if let Some(h) = Self::parse(buf, Syntax::Ietf).ok().filter(|h| !h.truncated) {
                return Ok(h);
            }
        }
        let syntax = match version {
            Some(version::VERSION_NEGOTIATION) | None => Syntax::Invariant,
            Some(v) => version::syntax(v),
        };
        Self::parse(buf, syntax)
    }

    fn parse(buf: &'a [u8], syntax: Syntax) -> Result<Self, QuicError> {
        let mut r = Reader::new(buf);
        let b0 = r.u8().ok_or(QuicError::Truncated("first byte"))?;
        if b0 & 0x80 == 0 {
            return Err(QuicError::Malformed("not a long header"));
        }
        let version = r.u32().ok_or(QuicError::Truncated("version"))?;
        let (dcid, scid) = if syntax == Syntax::Nibble {
            let lens = r.u8().ok_or(QuicError::Truncated("connection ID lengths"))?;
            let nib = |n: u8| if n == 0 { 0 } else { usize::from(n) + 3 };
            let (dl, sl) = (nib(lens >> 4), nib(lens & 0x0f));
            r.bytes(dl).ok_or(QuicError::Truncated("destination connection ID"))?;
            let d = span(&r, dl);
            r.bytes(sl).ok_or(QuicError::Truncated("source connection ID"))?;
            (d, span(&r, sl))
        } else {
            let max = match syntax {
                Syntax::Ietf => super::MAX_CID_LEN,
                _ if version == version::VERSION_NEGOTIATION => 255,
                _ => version::max_cid_len(version),
            };
            let mut cid = |what: &'static str| -> Result<Span, QuicError> {
                let n = usize::from(r.u8().ok_or(QuicError::Truncated(what))?);
                if n > max {
                    return Err(QuicError::CidTooLong(n));
                }
                r.bytes(n).ok_or(QuicError::Truncated(what))?;
                Ok(span(&r, n))
            };
            let d = cid("destination connection ID")?;
            let s = cid("source connection ID")?;
            (d, s)
        };
        let mut h = LongHeader {
            buf,
            version,
            ty: PacketType::Unknown,
            dcid,
            scid,
            token: (0, 0),
            length: None,
            pn_offset: None,
            end: buf.len(),
            truncated: false,
            versions: (0, 0),
            retry_tag: None,
            retry_odcid: None,
        };
        if version == version::VERSION_NEGOTIATION {
            h.ty = PacketType::VersionNegotiation;
            h.versions = (r.pos(), buf.len());
            return Ok(h);
        }
        match syntax {
            Syntax::Invariant => return Ok(h),
            // Body not parsed; the types are the drafts' (and Google's) of that era.
            Syntax::Nibble => {
                h.ty = long_packet_type(version::V1, (b0 >> 4) & 0x03);
                return Ok(h);
            }
            Syntax::Ietf => {}
        }
        h.ty = long_packet_type(version, (b0 >> 4) & 0x03);
        match h.ty {
            PacketType::Retry => {
                match version::retry_integrity(version) {
                    Some(RetryIntegrity::OdcidField) => {
                        let o = r.vec8().ok_or(QuicError::Truncated("original destination connection ID"))?;
                        h.retry_odcid = Some(span(&r, o.len()));
                        h.token = (r.pos(), buf.len());
                    }
                    _ => {
                        let rest = r.remaining();
                        if rest < 16 {
                            return Err(QuicError::Truncated("retry integrity tag"));
                        }
                        h.token = (r.pos(), buf.len() - 16);
                        h.retry_tag = Some((buf.len() - 16, buf.len()));
                    }
                }
                return Ok(h);
            }
            PacketType::Initial => {
                let n = r.varint().ok_or(QuicError::Truncated("token length"))?;
                let t = r.bytes(n).ok_or(QuicError::Truncated("token"))?;
                h.token = span(&r, t.len());
            }
            _ => {}
        }
        let length = r.varint().ok_or(QuicError::Truncated("length"))?;
        h.length = Some(length);
        h.pn_offset = Some(r.pos());
        match usize::try_from(length).ok().filter(|&l| l <= r.remaining()) {
            Some(l) => h.end = r.pos() + l,
            None => h.truncated = true,
        }
        Ok(h)
    }

    pub fn first_byte(&self) -> u8 {
        self.buf[0]
    }
    /// The two type bits as on the wire (their meaning depends on the version).
    pub fn type_bits(&self) -> u8 {
        (self.buf[0] >> 4) & 0x03
    }
    pub fn version(&self) -> u32 {
        self.version
    }
    pub fn packet_type(&self) -> PacketType {
        self.ty
    }
    pub fn dcid(&self) -> &'a [u8] {
        &self.buf[self.dcid.0..self.dcid.1]
    }
    pub fn scid(&self) -> &'a [u8] {
        &self.buf[self.scid.0..self.scid.1]
    }
    /// Initial: the token; Retry: the retry token; otherwise empty.
    pub fn token(&self) -> &'a [u8] {
        &self.buf[self.token.0..self.token.1]
    }
    /// The Length field (packet number and payload), for Initial, 0-RTT and Handshake.
    pub fn length(&self) -> Option<u64> {
        self.length
    }
    /// Offset of the (protected) packet number from the packet's first byte.
    pub fn pn_offset(&self) -> Option<usize> {
        self.pn_offset
    }
    /// The Length field claims more bytes than the buffer holds (a snaplen cut, or a lie):
    /// [`LongHeader::packet`] then runs to the end of the buffer.
    pub fn truncated(&self) -> bool {
        self.truncated
    }
    /// This packet's bytes: up to the end of its Length field for Initial, 0-RTT and Handshake
    /// packets, to the end of the buffer for the others (they cannot be followed by another).
    pub fn packet(&self) -> &'a [u8] {
        &self.buf[..self.end]
    }
    /// Version Negotiation: the raw list of supported versions.
    pub fn versions_raw(&self) -> &'a [u8] {
        &self.buf[self.versions.0..self.versions.1]
    }
    /// Retry (draft-25 and later, v1, v2): the integrity tag.
    pub fn retry_tag(&self) -> Option<&'a [u8]> {
        self.retry_tag.map(|(a, b)| &self.buf[a..b])
    }
    /// Retry (drafts 22–24): the Original Destination Connection ID field.
    pub fn retry_odcid(&self) -> Option<&'a [u8]> {
        self.retry_odcid.map(|(a, b)| &self.buf[a..b])
    }

    /// The plain parsed form; `offset` is where the packet starts in its datagram.
    pub fn to_header(&self, offset: usize) -> PacketHeader<'a> {
        PacketHeader {
            offset,
            bytes: self.packet(),
            form: Form::Long,
            ty: self.ty,
            type_bits: self.type_bits(),
            version: self.version,
            dcid: self.dcid(),
            scid: self.scid(),
            token: self.token(),
            length: self.length,
            pn_offset: self.pn_offset,
            spin: None,
            versions: self.versions_raw(),
            retry_tag: self.retry_tag(),
            retry_odcid: self.retry_odcid(),
            truncated: self.truncated,
        }
    }
}

/// A view of one short header packet, given the DCID length learned from the long headers.
#[derive(Debug, Clone)]
pub struct ShortHeader<'a> {
    buf: &'a [u8],
    dcid_len: usize,
}

impl<'a> ShortHeader<'a> {
    pub fn new_checked(buf: &'a [u8], dcid_len: usize) -> Result<Self, QuicError> {
        let b0 = *buf.first().ok_or(QuicError::Truncated("first byte"))?;
        if b0 & 0x80 != 0 {
            return Err(QuicError::Malformed("not a short header"));
        }
        if dcid_len > 255 || buf.len() - 1 < dcid_len {
            return Err(QuicError::Truncated("destination connection ID"));
        }
        Ok(ShortHeader { buf, dcid_len })
    }
    pub fn first_byte(&self) -> u8 {
        self.buf[0]
    }
    /// The latency spin bit (RFC 9000 §17.4). Not under header protection.
    pub fn spin(&self) -> bool {
        self.buf[0] & 0x20 != 0
    }
    /// The fixed bit (0x40); zero only where the peers agreed to grease it (RFC 9287).
    pub fn fixed_bit(&self) -> bool {
        self.buf[0] & 0x40 != 0
    }
    pub fn dcid(&self) -> &'a [u8] {
        &self.buf[1..1 + self.dcid_len]
    }
    pub fn pn_offset(&self) -> usize {
        1 + self.dcid_len
    }
    pub fn packet(&self) -> &'a [u8] {
        self.buf
    }
    pub fn to_header(&self, offset: usize) -> PacketHeader<'a> {
        PacketHeader {
            offset,
            bytes: self.buf,
            form: Form::Short,
            ty: PacketType::OneRtt,
            type_bits: 0,
            version: 0,
            dcid: self.dcid(),
            scid: &[],
            token: &[],
            length: None,
            pn_offset: Some(self.pn_offset()),
            spin: Some(self.spin()),
            versions: &[],
            retry_tag: None,
            retry_odcid: None,
            truncated: false,
        }
    }
}

/// The parsed form of one QUIC packet header (long or short).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketHeader<'a> {
    /// Offset of the packet's first byte in the UDP payload.
    pub offset: usize,
    /// The packet's bytes (header and protected payload), as captured: pass these to
    /// [`super::InitialDecryptor::open`] or [`super::verify_retry`].
    pub bytes: &'a [u8],
    pub form: Form,
    pub ty: PacketType,
    /// Long header: the two type bits as on the wire. Short header: 0.
    pub type_bits: u8,
    /// Long header: the version (0 for Version Negotiation). Short header: 0 (see `form`).
    pub version: u32,
    pub dcid: &'a [u8],
    /// Long header only (empty for short headers).
    pub scid: &'a [u8],
    /// Initial: the token; Retry: the retry token.
    pub token: &'a [u8],
    /// The Length field (Initial, 0-RTT, Handshake).
    pub length: Option<u64>,
    /// Offset of the protected packet number from the packet's first byte.
    pub pn_offset: Option<usize>,
    /// Short header: the spin bit.
    pub spin: Option<bool>,
    /// Version Negotiation: the supported versions, raw (see [`PacketHeader::supported_versions`]).
    pub versions: &'a [u8],
    /// Retry (draft-25+, v1, v2): the integrity tag.
    pub retry_tag: Option<&'a [u8]>,
    /// Retry (drafts 22–24): the Original Destination Connection ID.
    pub retry_odcid: Option<&'a [u8]>,
    /// The Length field runs past the captured bytes (`bytes` then ends with the capture).
    pub truncated: bool,
}

impl PacketHeader<'_> {
    pub fn version_kind(&self) -> Option<Version> {
        (self.form == Form::Long).then(|| Version::classify(self.version))
    }
    /// Version Negotiation: the versions the server lists (a trailing partial entry is ignored).
    pub fn supported_versions(&self) -> impl Iterator<Item = u32> + '_ {
        self.versions.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }
}

/// The packets of one UDP datagram.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Datagram<'a> {
    pub packets: Vec<PacketHeader<'a>>,
    /// The remaining bytes did not parse as a packet (they are counted in `trailing`).
    pub error: Option<QuicError>,
    /// Bytes after the last packet in `packets` that belong to no packet of this datagram:
    /// padding (a zero where the next packet would start), bytes that did not parse (`error`),
    /// or a packet whose DCID (or, long header, version) differs from the first packet's, which
    /// RFC 9000 §12.2 tells receivers to ignore.
    pub trailing: usize,
}

/// Parse every packet of a UDP datagram. `short_dcid_len`: see the module documentation.
pub fn parse_datagram(payload: &[u8], short_dcid_len: usize) -> Datagram<'_> {
    let mut it = packets(payload, short_dcid_len);
    let mut dg = Datagram::default();
    for p in it.by_ref() {
        match p {
            Ok(h) => dg.packets.push(h),
            Err(e) => dg.error = Some(e),
        }
    }
    dg.trailing = it.trailing;
    dg
}

/// The packets of a datagram, one at a time (no allocation). Ends after the first error.
pub fn packets(payload: &[u8], short_dcid_len: usize) -> Packets<'_> {
    Packets { buf: payload, pos: 0, short_dcid_len, done: false, trailing: 0, first: None }
}

#[derive(Debug, Clone)]
pub struct Packets<'a> {
    buf: &'a [u8],
    pos: usize,
    short_dcid_len: usize,
    done: bool,
    trailing: usize,
    /// The first packet's DCID, and its version if it has a long header.
    first: Option<(&'a [u8], Option<u32>)>,
}

impl Packets<'_> {
    /// Bytes after the last packet yielded (see [`Datagram::trailing`]); final once the
    /// iterator is exhausted.
    pub fn trailing(&self) -> usize {
        self.trailing
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = Result<PacketHeader<'a>, QuicError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let b0 = rest[0];
        // Zero padding after the packets (the fixed bit alone cannot tell: RFC 9287 lets peers
        // grease it, and some stacks do so in long headers too).
        if self.pos > 0 && b0 == 0 {
            self.trailing = rest.len();
            self.done = true;
            return None;
        }
        let parsed = if b0 & 0x80 != 0 {
            LongHeader::new_checked(rest).map(|h| h.to_header(self.pos))
        } else {
            ShortHeader::new_checked(rest, self.short_dcid_len).map(|h| h.to_header(self.pos))
        };
        match parsed {
            Ok(h) => {
                match self.first {
                    None => {
                        let v = (h.form == Form::Long).then_some(h.version);
                        self.first = Some((h.dcid, v));
                    }
                    // RFC 9000 §12.2: ignore a coalesced packet with another DCID; a long header
                    // of another version is not a packet of this connection either.
                    Some((dcid, v)) => {
                        let other_version = h.form == Form::Long && v.is_some_and(|v| v != h.version);
                        if h.dcid != dcid || other_version {
                            self.trailing = rest.len();
                            self.done = true;
                            return None;
                        }
                    }
                }
                self.pos += h.bytes.len();
                // Only Initial, 0-RTT and Handshake packets say where they end.
                if h.length.is_none() || h.truncated {
                    self.done = true;
                }
                Some(Ok(h))
            }
            Err(e) => {
                self.trailing = rest.len();
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn rfc9001_client_initial_header() {
        let p = hex("c000000001088394c8f03e5157080000449e7b9aec34");
        let mut p2 = p.clone();
        p2.resize(20 + 0x49e, 0);
        let h = LongHeader::new_checked(&p2).unwrap();
        assert_eq!(h.version(), 1);
        assert_eq!(h.packet_type(), PacketType::Initial);
        assert_eq!(h.dcid(), hex("8394c8f03e515708"));
        assert!(h.scid().is_empty());
        assert!(h.token().is_empty());
        assert_eq!(h.length(), Some(1182));
        assert_eq!(h.pn_offset(), Some(18));
        assert_eq!(h.packet().len(), 1200);
        assert!(!h.truncated());
        // Cut by a snaplen: still a header, flagged.
        let h = LongHeader::new_checked(&p).unwrap();
        assert!(h.truncated());
    }

    #[test]
    fn v2_types_differ_from_v1() {
        // RFC 9369: 0b01 is Initial, 0b00 Retry.
        let mut p = hex("d76b3343cf088394c8f03e5157080000449e");
        p.resize(18 + 0x49e, 0);
        let h = LongHeader::new_checked(&p).unwrap();
        assert_eq!(h.packet_type(), PacketType::Initial);
        let r = hex("cf6b3343cf0008f067a5502a4262b5746f6b656ec8646ce8bfe33952d955543665dcc7b6");
        let h = LongHeader::new_checked(&r).unwrap();
        assert_eq!(h.packet_type(), PacketType::Retry);
        assert_eq!(h.token(), b"token");
        assert_eq!(h.scid(), hex("f067a5502a4262b5"));
    }

    #[test]
    fn version_negotiation_lists_versions() {
        let p = hex("80 00000000 04 01020304 02 0a0b 00000001 6b3343cf babababa");
        let d = parse_datagram(&p, 0);
        assert_eq!(d.packets.len(), 1);
        let h = &d.packets[0];
        assert_eq!(h.ty, PacketType::VersionNegotiation);
        assert_eq!(h.dcid, &[1, 2, 3, 4]);
        assert_eq!(h.scid, &[0x0a, 0x0b]);
        assert_eq!(h.supported_versions().collect::<Vec<_>>(), vec![1, 0x6b3343cf, 0xbabababa]);
    }

    #[test]
    fn coalesced_then_short_then_padding() {
        // Initial (Length 3) + Handshake (Length 2) + short header (DCID 2) ... and zero padding
        // cannot follow a short header (it runs to the end), so test padding after a Handshake.
        let p = hex("c0 00000001 02 aabb 01 cc 00 03 010203  e0 00000001 02 aabb 01 cc 02 0405  40 aabb 0607");
        let d = parse_datagram(&p, 2);
        assert_eq!(d.error, None);
        let tys: Vec<_> = d.packets.iter().map(|p| p.ty).collect();
        assert_eq!(tys, vec![PacketType::Initial, PacketType::Handshake, PacketType::OneRtt]);
        assert_eq!(d.packets[2].dcid, &[0xaa, 0xbb]);
        assert_eq!(d.packets[2].spin, Some(false));
        let p = hex("e0 00000001 02 aabb 01 cc 02 0405 00000000");
        let d = parse_datagram(&p, 2);
        assert_eq!(d.packets.len(), 1);
        assert_eq!(d.trailing, 4);
        // Fixed bit greased (RFC 9287) in both long headers: still coalesced.
        let p = hex("80 00000001 02 aabb 01 cc 00 01 01  a0 00000001 02 aabb 01 cc 01 02");
        assert_eq!(parse_datagram(&p, 2).packets.len(), 2);
        // Another DCID, or another version: ignored (RFC 9000 section 12.2).
        let p = hex("c0 00000001 02 aabb 01 cc 00 01 01  e0 00000001 02 aabc 01 cc 01 02");
        let d = parse_datagram(&p, 2);
        assert_eq!((d.packets.len(), d.trailing), (1, 12));
        let p = hex("c0 00000001 02 aabb 01 cc 00 01 01  e0 ff00001d 02 aabb 01 cc 01 02");
        assert_eq!(parse_datagram(&p, 2).packets.len(), 1);
        let p = hex("c0 00000001 02 aabb 01 cc 00 01 01  40 aabc 0102");
        assert_eq!(parse_datagram(&p, 2).packets.len(), 1);
    }

    #[test]
    fn spin_bit_is_read_in_the_clear() {
        let d = parse_datagram(&[0x60, 1, 2, 3], 2);
        assert_eq!(d.packets[0].spin, Some(true));
        assert_eq!(d.packets[0].dcid, &[1, 2]);
        assert_eq!(parse_datagram(&[0x40, 1], 2).error, Some(QuicError::Truncated("destination connection ID")));
    }

    #[test]
    fn hostile_lengths() {
        assert_eq!(LongHeader::new_checked(&hex("c0 00000001 15")).unwrap_err(), QuicError::CidTooLong(21));
        assert_eq!(
            LongHeader::new_checked(&hex("c0 00000001 08 0102")).unwrap_err(),
            QuicError::Truncated("destination connection ID")
        );
        // Token length 2^62-1.
        assert_eq!(
            LongHeader::new_checked(&hex("c0 00000001 00 00 ffffffffffffffff 00")).unwrap_err(),
            QuicError::Truncated("token")
        );
        // Grease versions may carry long CIDs (invariants allow 255).
        let mut p = hex("c0 babababa 30");
        p.extend([7u8; 48]);
        p.push(0);
        let h = LongHeader::new_checked(&p).unwrap();
        assert_eq!(h.dcid().len(), 48);
        assert_eq!(h.packet_type(), PacketType::Unknown);
    }

    #[test]
    fn google_q046_nibble_cids() {
        let p = hex("c3 51303436 50 eacfe6e706df272d 00000004 60da58929f6839d0");
        let h = LongHeader::new_checked(&p).unwrap();
        assert_eq!(h.dcid(), hex("eacfe6e706df272d"));
        assert!(h.scid().is_empty());
        assert_eq!(h.packet_type(), PacketType::Initial);
        assert_eq!(h.packet().len(), p.len());
    }
}

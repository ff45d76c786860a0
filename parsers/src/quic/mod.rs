//! QUIC on the wire, for a passive observer: headers of every version we meet in captures,
//! Initial packet decryption, the CRYPTO stream and the TLS ClientHello inside it.
//!
//! Everything here works on the captured UDP payload ([`crate::Packet::payload`]) and never
//! panics on hostile input: every length is checked against the buffer before it is used, and
//! nothing is allocated in proportion to a claimed length before that check.
//!
//! # API (for the flow layer)
//!
//! **Headers** ([`header`]): one UDP datagram holds one or more QUIC packets (coalesced: long
//! header packets one after the other, delimited by their Length field; a short header packet, or
//! any packet without a Length field, runs to the end of the datagram).
//!
//! ```text
//! pub fn parse_datagram(payload: &[u8], short_dcid_len: usize) -> Datagram<'_>
//! pub fn packets(payload: &[u8], short_dcid_len: usize) -> Packets<'_>   // the same, lazily
//! pub struct Datagram<'a> { packets: Vec<PacketHeader<'a>>, error: Option<QuicError>, trailing: usize }
//! pub struct PacketHeader<'a> {
//!     offset, bytes,                // where the packet sits in the datagram, and its bytes
//!     form: Form, ty: PacketType, type_bits, version: u32,
//!     dcid, scid, token: &'a [u8],  // token: Initial token or Retry token
//!     length: Option<u64>, pn_offset: Option<usize>, spin: Option<bool>,
//!     versions: &'a [u8],           // Version Negotiation list (see PacketHeader::supported_versions)
//!     retry_tag: Option<&'a [u8]>, retry_odcid: Option<&'a [u8]>,
//!     truncated: bool,              // the Length field runs past the captured bytes
//! }
//! impl PacketHeader { fn version_kind(&self) -> Option<Version>; fn supported_versions(&self) }
//! ```
//!
//! A short header does not carry its Destination Connection ID length: `short_dcid_len` is the
//! length the flow learned from the long headers (the Source Connection ID that the *receiver*
//! of this datagram put in its own long headers). The spin bit (0x20 of a short header's first
//! byte) is **not** under header protection: RFC 9001 §5.4.1 masks only the low five bits of a
//! short header's first byte (reserved bits, key phase, packet number length), so the spin bit is
//! read directly. The views [`LongHeader`] and [`ShortHeader`] check lengths once in
//! `new_checked` and then read fields without further checks (smoltcp style).
//!
//! Coalescing: after the first packet, a zero byte is padding, and a packet whose DCID (or, long
//! header, version) differs from the first's is ignored as RFC 9000 §12.2 says; both end the
//! datagram and count in `Datagram::trailing`. The fixed bit (0x40) is not used to tell: peers
//! may grease it (RFC 9287), and the corpus has stacks doing so in long headers (`quic-33`,
//! `quic-34`, `quic-v2`). Every byte of the payload is in a packet's `bytes` or in `trailing`.
//!
//! **Versions** ([`version`]): [`Version::classify`] and [`Version::label`]: `v1`, `v2`
//! (RFC 9369, with its own long header type bits), `draft-22`…`draft-34`, `mvfst-draft-22`
//! (0xfaceb001), `mvfst-draft-27` (0xfaceb002), `mvfst-experimental` (0xfaceb00e),
//! `gquic-Q046`/`gquic-Q050`/`gquic-T051`…, `grease-0x1a2a3a4a`, `unknown-0x…`, `negotiation`.
//! Google Q044–Q048 (and drafts before 22) use 4-bit CID lengths: only their CIDs are read.
//! Q049+/T049+ use the draft-27 layout, and Q050/T050/T051 Initials are decrypted with their own
//! salts (gQUIC frames: the CRYPTO frame is read, the rest stops the parse). A greased version
//! has no layout of its own; its packets are read as v1 when that parses (as Wireshark does), and
//! its Initials are opened with draft-29's or v1's keys, whichever works (clients send them to
//! elicit Version Negotiation, and several interop clients protect them with draft-29 keys).
//!
//! **Initial decryption** ([`initial`]):
//!
//! ```text
//! impl InitialDecryptor {                                   // Clone + Send + Sync
//!     pub fn new(version: u32, client_dcid: &[u8]) -> Result<Self, QuicError>
//!     pub fn on_retry(&mut self, retry_scid: &[u8]) -> Result<(), QuicError>
//!     pub fn open(&mut self, packet: &[u8], from_client: bool) -> Result<DecryptedInitial, QuicError>
//!     pub fn version(&self) -> u32; original_dcid(&self) -> &[u8]; current_dcid(&self) -> &[u8]
//! }
//! pub struct DecryptedInitial { packet_number: u64, pn_len: usize, header: Vec<u8>,
//!                               plaintext: Vec<u8>, frames: FrameSummary, rekeyed: bool }
//! impl DecryptedInitial { pub fn crypto_data(&self) -> impl Iterator<Item = (u64, &[u8])> }
//! pub fn verify_retry(packet: &[u8], original_dcid: &[u8]) -> Result<RetryCheck, QuicError>
//! pub fn initial_secrets(version, dcid) -> Option<InitialSecrets>     // RFC 9001 A.1 values
//! pub fn packet_key_material(version, secret) -> Option<KeyMaterial>  // key, iv, hp
//! ```
//!
//! `packet` is one coalesced packet's bytes ([`PacketHeader::bytes`]). Client and server Initial
//! keys both come from the client's first Destination Connection ID; after a Retry, from the
//! client's new one (the Retry's Source Connection ID). The decryptor follows that by itself: a
//! client Initial that the current keys cannot open is tried again with keys derived from its
//! own DCID, and those keys are kept if they open it (`rekeyed`; this also covers a client that
//! starts a new connection on the same 4-tuple). [`InitialDecryptor::on_retry`] switches
//! explicitly. Packet numbers are decoded against the largest opened in that direction (RFC
//! 9000 A.3); if that fails, the number as sent is tried (a peer that restarted). Retry
//! integrity: RFC 9001 §5.8 key and nonce for v1 and drafts 33–34, RFC 9369's for v2, draft-29's
//! for drafts 29–32, draft-25's for 25–28 (and mvfst, Google Q050+), and for drafts 22–24 the
//! Original Destination Connection ID field is compared.
//!
//! **CRYPTO stream** ([`frames`]): [`FrameSummary`] (CRYPTO ranges, ACK frames with their ranges,
//! PING, PADDING bytes, CONNECTION_CLOSE; frame parsing stops cleanly at the first frame type an
//! Initial may not carry, or at a frame cut short) and [`CryptoReassembler`] (out-of-order,
//! overlapping, duplicated CRYPTO data in, the contiguous prefix out; memory bounded, 64 KiB by
//! default).
//!
//! **ClientHello** ([`tls`]): `parse_client_hello(&[u8]) -> Option<ClientHello>` with SNI, ALPN
//! list, cipher suites, extensions, supported versions and whether QUIC transport parameters are
//! present; a ClientHello cut short still yields every extension that is whole (`truncated` is
//! set). `handshake_messages(&[u8])` walks the messages of a CRYPTO stream: after a
//! HelloRetryRequest the client's stream holds a second ClientHello (corpus `quic-29.pcap`,
//! frame 5, CRYPTO offset 301).
//!
//! **What a flow should do** (`tests/quic_corpus.rs`, `handle_packet`, is a worked example that
//! agrees with Zeek on every connection of the corpus):
//! - keep, per endpoint, the length of the SCID it sends in long headers, and pass it as
//!   `short_dcid_len` for datagrams sent *to* that endpoint;
//! - on a client Initial with no decryptor, or with a decryptor of another version (the client
//!   moved on after Version Negotiation), create one from that packet's version and DCID;
//! - on a server Retry, check it with [`verify_retry`] against the decryptor's
//!   `current_dcid()`, then call `on_retry(retry.scid)` and start new CRYPTO streams; do the same
//!   when `open` reports `rekeyed`;
//! - feed `crypto_data()` into one [`CryptoReassembler`] per direction, and read every complete
//!   ClientHello from `handshake_messages(stream.contiguous())`.
//!
//! ```no_run
//! use tailscope_parsers::quic::{self, CryptoReassembler, InitialDecryptor, PacketType};
//! # let payload: &[u8] = &[]; let from_client = true;
//! let dg = quic::parse_datagram(payload, 8);
//! let mut dec: Option<InitialDecryptor> = None;
//! let mut stream = CryptoReassembler::default();
//! for p in &dg.packets {
//!     if p.ty == PacketType::Initial && from_client && dec.is_none() {
//!         dec = InitialDecryptor::new(p.version, p.dcid).ok();
//!     }
//!     if let (PacketType::Initial, Some(d)) = (p.ty, dec.as_mut()) {
//!         if let Ok(open) = d.open(p.bytes, from_client) {
//!             for (off, data) in open.crypto_data() {
//!                 stream.insert(off, data);
//!             }
//!         }
//!     }
//! }
//! let hello = quic::parse_client_hello(stream.contiguous());
//! ```
//!
//! **With a key log** ([`keylog`], [`protection`], [`keyed`], [`app_frames`]): an
//! SSLKEYLOGFILE's TLS 1.3 traffic secrets by ClientHello random ([`ClientHello::random`]);
//! the cipher suite from the server's ServerHello ([`parse_server_hello`], in its Initial
//! CRYPTO stream); [`KeyedDecryptor`] opens Handshake and 1-RTT packets with AES-128-GCM,
//! AES-256-GCM or ChaCha20-Poly1305 (v1 and v2 labels), recovers full packet numbers, follows
//! key updates, and parses every frame ([`parse_app_frames`]: ACK ranges and delay, STREAM
//! ranges, CRYPTO, ack-eliciting or not).
//!
//! ```text
//! let mut log = KeyLog::new(); log.add_file(path)?;
//! let secrets = log.get(&client_hello.random)?;
//! let suite = CipherSuite::from_tls(parse_server_hello(server_crypto)?.cipher_suite)?;
//! let mut dec = KeyedDecryptor::new(version, suite, secrets)?;
//! dec.open_short(packet_bytes, dcid_len, from_client) -> Result<OpenedPacket, QuicError>
//! dec.open_handshake(packet_bytes, from_client)       -> Result<OpenedPacket, QuicError>
//! ```
//!
//! **Google QUIC Q035–Q043** ([`gquic`]): these versions have no IETF long header (the public
//! flags byte has its high bit clear); `gquic::parse_versioned` reads a client packet's public
//! header and version, `gquic::client_hello_sni` the SNI of the CHLO it carries in the clear.
//!
//! Not covered: 0-RTT (it needs CLIENT_EARLY_TRAFFIC_SECRET, not read), and Google QUIC's own
//! handshake in Q044–Q050 (the gQUIC CHLO of Q046/Q050 is not parsed: no SNI for those versions).

pub mod app_frames;
pub mod frames;
pub mod gquic;
pub mod header;
pub mod initial;
pub mod keyed;
pub mod keylog;
pub mod protection;
pub mod tls;
pub mod version;

pub use app_frames::{parse_app_frames, AppFrames, StreamRange};
pub use frames::{AckFrame, ConnectionClose, CryptoRange, CryptoReassembler, FrameSummary};
pub use header::{packets, parse_datagram, Datagram, Form, LongHeader, PacketHeader, PacketType, Packets, ShortHeader};
pub use initial::{
    initial_secrets, packet_key_material, verify_retry, DecryptedInitial, InitialDecryptor, InitialSecrets,
    KeyMaterial, RetryCheck,
};
pub use keyed::{KeyedDecryptor, OpenedPacket, Space};
pub use keylog::{ConnectionSecrets, KeyLog, KeyLogStats};
pub use protection::{CipherSuite, DirectionKeys};
pub use tls::{handshake_messages, parse_client_hello, parse_server_hello, ClientHello, HandshakeMessage, ServerHello};
pub use version::Version;

/// Largest connection ID that QUIC v1, v2 and drafts 22+ allow (RFC 9000 §17.2).
pub const MAX_CID_LEN: usize = 20;

/// Why a packet could not be parsed or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuicError {
    /// The buffer ends before the field named.
    #[error("truncated: the buffer ends inside the {0}")]
    Truncated(&'static str),
    /// A field holds a value the format does not allow.
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// A connection ID longer than the version allows.
    #[error("connection ID of {0} bytes is longer than the version allows")]
    CidTooLong(usize),
    /// No Initial keys are known for this version (Google QUIC before Q050, grease, unknown).
    #[error("no Initial keys are known for version {0:#010x}")]
    UnsupportedVersion(u32),
    /// The packet is not a long header Initial packet.
    #[error("not an Initial packet")]
    NotInitial,
    /// The packet's version is not the decryptor's.
    #[error("version {got:#010x} is not the decryptor's {expected:#010x}")]
    VersionMismatch { expected: u32, got: u32 },
    /// Too few bytes after the packet number offset for the header protection sample and tag.
    #[error("packet too short to remove header protection")]
    TooShort,
    /// The AEAD tag did not verify: wrong keys (another DCID or version), or damaged bytes.
    #[error("authentication failed")]
    DecryptFailed,
}

/// Read a QUIC variable-length integer (RFC 9000 §16) at the start of `buf`: the value and the
/// number of bytes it took.
pub fn read_varint(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        v = (v << 8) | u64::from(*b);
    }
    Some((v, len))
}

/// A bounds-checked cursor. Every read returns `None` rather than running past the end.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    pub(crate) fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
    pub(crate) fn peek_u8(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        let b = self.peek_u8()?;
        self.pos += 1;
        Some(b)
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        let b = self.bytes(2)?;
        Some(u16::from_be_bytes([b[0], b[1]]))
    }
    pub(crate) fn u24(&mut self) -> Option<u32> {
        let b = self.bytes(3)?;
        Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        let b = self.bytes(4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn varint(&mut self) -> Option<u64> {
        let (v, n) = read_varint(self.rest())?;
        self.pos += n;
        Some(v)
    }
    /// `n` bytes, where `n` may be any claimed length: it is compared with what is left first.
    pub(crate) fn bytes(&mut self, n: impl TryInto<usize>) -> Option<&'a [u8]> {
        let n: usize = n.try_into().ok()?;
        if n > self.remaining() {
            return None;
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Some(s)
    }
    /// A length-prefixed (u8) vector.
    pub(crate) fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.bytes(n)
    }
    /// A length-prefixed (u16) vector.
    pub(crate) fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.bytes(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_from_rfc9000_appendix_a1() {
        assert_eq!(read_varint(&[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c]), Some((151_288_809_941_952_652, 8)));
        assert_eq!(read_varint(&[0x9d, 0x7f, 0x3e, 0x7d]), Some((494_878_333, 4)));
        assert_eq!(read_varint(&[0x7b, 0xbd]), Some((15_293, 2)));
        assert_eq!(read_varint(&[0x25]), Some((37, 1)));
        assert_eq!(read_varint(&[0x40, 0x25]), Some((37, 2)));
        assert_eq!(read_varint(&[0x40]), None);
        assert_eq!(read_varint(&[]), None);
    }

    #[test]
    fn reader_refuses_claims_past_the_end() {
        let mut r = Reader::new(&[3, 1, 2]);
        assert_eq!(r.vec8(), None);
        let mut r = Reader::new(&[0xff, 0xff]);
        assert_eq!(r.vec16(), None);
        let mut r = Reader::new(&[1, 2]);
        assert_eq!(r.bytes(u64::MAX), None);
        assert_eq!(r.bytes(2usize), Some(&[1u8, 2][..]));
        assert!(r.is_empty());
    }
}

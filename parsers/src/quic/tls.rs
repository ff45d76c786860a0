//! The TLS ClientHello at the start of a client's CRYPTO stream (RFC 8446 §4.1.2): server name
//! (RFC 6066 §3), ALPN (RFC 7301), and the lists a fingerprint needs. Also works on a TLS-over-TCP
//! ClientHello once the record header is removed.

use super::Reader;

const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;
const EXT_QUIC_TRANSPORT_PARAMETERS: u16 = 0x0039;
const EXT_QUIC_TRANSPORT_PARAMETERS_DRAFT: u16 = 0xffa5;

/// What a ClientHello says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// The first host_name of the server_name extension (lossy UTF-8; it should be ASCII).
    pub sni: Option<String>,
    /// The ALPN protocol names, in the client's order.
    pub alpn: Vec<String>,
    /// legacy_version (0x0303 for TLS 1.3).
    pub legacy_version: u16,
    /// The 32-byte random: what a key log (SSLKEYLOGFILE) names the connection by.
    pub random: [u8; 32],
    pub cipher_suites: Vec<u16>,
    /// Extension types in the order sent.
    pub extensions: Vec<u16>,
    /// From the supported_versions extension.
    pub supported_versions: Vec<u16>,
    /// A quic_transport_parameters extension (0x39, or the drafts' 0xffa5) is present.
    pub quic_transport_parameters: bool,
    /// The message is longer than the bytes given: only the whole extensions before the cut are
    /// reported.
    pub truncated: bool,
}

/// Total bytes (header included) of the handshake message at the start of `buf`, when `buf`
/// starts with a ClientHello header; use it to know when reassembly has all of it.
pub fn client_hello_len(buf: &[u8]) -> Option<usize> {
    let mut r = Reader::new(buf);
    (r.u8()? == HANDSHAKE_CLIENT_HELLO).then_some(())?;
    Some(4 + r.u24()? as usize)
}

/// One handshake message in a CRYPTO stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeMessage<'a> {
    /// Offset of the message in the buffer walked.
    pub offset: usize,
    /// HandshakeType (1 ClientHello, 2 ServerHello, 8 EncryptedExtensions, ...).
    pub msg_type: u8,
    /// The message, header included; shorter than `4 + length` when `complete` is false.
    pub bytes: &'a [u8],
    pub complete: bool,
}

/// Walk the handshake messages of a CRYPTO stream: a client's holds a second ClientHello after
/// a HelloRetryRequest. The last message may be incomplete (`complete` false); the walk stops
/// there.
pub fn handshake_messages(buf: &[u8]) -> impl Iterator<Item = HandshakeMessage<'_>> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let rest = buf.get(pos..)?;
        let mut r = Reader::new(rest);
        let msg_type = r.u8()?;
        let len = r.u24()? as usize;
        let total = 4 + len;
        let complete = rest.len() >= total;
        let m = HandshakeMessage { offset: pos, msg_type, bytes: &rest[..total.min(rest.len())], complete };
        pos = if complete { pos + total } else { buf.len() };
        Some(m)
    })
}

/// Parse the ClientHello at the start of `buf` (a handshake message: type 1, 24-bit length).
/// `None` if `buf` does not start with one, or if it is cut before its extensions begin, or if
/// a field contradicts its own length. A ClientHello cut inside its extensions is returned with
/// `truncated` set and the extensions that are whole.
pub fn parse_client_hello(buf: &[u8]) -> Option<ClientHello> {
    let total = client_hello_len(buf)?;
    let truncated = buf.len() < total;
    let body = &buf[4..total.min(buf.len())];
    let mut r = Reader::new(body);
    let mut ch = ClientHello { truncated, ..ClientHello::default() };
    ch.legacy_version = r.u16()?;
    ch.random.copy_from_slice(r.bytes(32usize)?);
    r.vec8()?; // legacy_session_id
    let suites = r.vec16()?;
    if suites.len() % 2 != 0 {
        return None;
    }
    ch.cipher_suites = suites.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
    r.vec8()?; // legacy_compression_methods
    if r.is_empty() && !truncated {
        return Some(ch); // no extensions (pre-TLS 1.2 style)
    }
    let ext_len = r.u16()?;
    let exts = r.rest();
    if usize::from(ext_len) > exts.len() && !truncated {
        return None;
    }
    let mut r = Reader::new(&exts[..usize::from(ext_len).min(exts.len())]);
    while !r.is_empty() {
        let Some(ty) = r.u16() else { break };
        let Some(data) = r.vec16() else { break }; // cut inside: keep what we have
        ch.extensions.push(ty);
        match ty {
            EXT_SERVER_NAME if ch.sni.is_none() => ch.sni = server_name(data),
            EXT_ALPN => ch.alpn = alpn(data).unwrap_or_default(),
            EXT_SUPPORTED_VERSIONS => ch.supported_versions = supported_versions(data).unwrap_or_default(),
            EXT_QUIC_TRANSPORT_PARAMETERS | EXT_QUIC_TRANSPORT_PARAMETERS_DRAFT => ch.quic_transport_parameters = true,
            _ => {}
        }
    }
    Some(ch)
}

const HANDSHAKE_SERVER_HELLO: u8 = 2;

/// The random of a HelloRetryRequest (RFC 8446 §4.1.3): a ServerHello that asks for another
/// ClientHello and chooses nothing yet.
const HELLO_RETRY_REQUEST_RANDOM: [u8; 32] = [
    0xcf, 0x21, 0xad, 0x74, 0xe5, 0x9a, 0x61, 0x11, 0xbe, 0x1d, 0x8c, 0x02, 0x1e, 0x65, 0xb8, 0x91, 0xc2, 0xa2, 0x11,
    0x16, 0x7a, 0xbb, 0x8c, 0x5e, 0x07, 0x9e, 0x09, 0xe2, 0xc8, 0xa8, 0x33, 0x9c,
];

/// What a ServerHello says that packet protection needs: the cipher suite chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerHello {
    pub cipher_suite: u16,
    /// A HelloRetryRequest: a second ClientHello (and ServerHello) follows.
    pub hello_retry_request: bool,
}

/// Parse the ServerHello at the start of `buf` (handshake message type 2); `None` if it is not
/// one or is cut before its cipher suite.
pub fn parse_server_hello(buf: &[u8]) -> Option<ServerHello> {
    let mut r = Reader::new(buf);
    (r.u8()? == HANDSHAKE_SERVER_HELLO).then_some(())?;
    r.u24()?;
    r.u16()?; // legacy_version
    let random = r.bytes(32usize)?;
    r.vec8()?; // legacy_session_id_echo
    let cipher_suite = r.u16()?;
    Some(ServerHello { cipher_suite, hello_retry_request: random == HELLO_RETRY_REQUEST_RANDOM })
}

fn server_name(data: &[u8]) -> Option<String> {
    let mut r = Reader::new(data);
    let mut list = Reader::new(r.vec16()?);
    while !list.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?;
        if kind == 0 && !name.is_empty() {
            return Some(String::from_utf8_lossy(name).into_owned());
        }
    }
    None
}

fn alpn(data: &[u8]) -> Option<Vec<String>> {
    let mut r = Reader::new(data);
    let mut list = Reader::new(r.vec16()?);
    let mut out = Vec::new();
    while !list.is_empty() {
        let p = list.vec8()?;
        out.push(String::from_utf8_lossy(p).into_owned());
    }
    Some(out)
}

fn supported_versions(data: &[u8]) -> Option<Vec<u16>> {
    let mut r = Reader::new(data);
    let list = r.vec8()?;
    Some(list.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// The ClientHello inside RFC 9001 A.2's CRYPTO frame.
    const RFC9001_CH: &str = "010000ed0303ebf8fa56f12939b9584a3896472ec40bb863cfd3e86804fe3a47f06a2b69484c
        00000413011302010000c000000010000e00000b6578616d706c652e636f6dff01000100000a0008000600
        1d0017001800100007000504616c706e000500050100000000003300260024001d00209370b2c9caa47fba
        baf4559fedba753de171fa71f50f1ce15d43e994ec74d748002b0003020304000d0010000e040305030603
        0203080408050806002d00020101001c00024001003900320408ffffffffffffffff05048000ffff070480
        00ffff0801100104800075300901100f088394c8f03e51570806048000ffff";

    #[test]
    fn rfc9001_client_hello() {
        let ch = parse_client_hello(&hex(RFC9001_CH)).unwrap();
        assert_eq!(ch.sni.as_deref(), Some("example.com"));
        assert_eq!(ch.alpn, vec!["alpn".to_string()]);
        assert_eq!(ch.cipher_suites, vec![0x1301, 0x1302]);
        assert_eq!(ch.random[..4], [0xeb, 0xf8, 0xfa, 0x56]);
        assert_eq!(ch.supported_versions, vec![0x0304]);
        assert!(ch.quic_transport_parameters);
        assert!(!ch.truncated);
        assert_eq!(client_hello_len(&hex(RFC9001_CH)), Some(4 + 0xed));
    }

    #[test]
    fn every_prefix_is_safe() {
        let full = hex(RFC9001_CH);
        for n in 0..full.len() {
            if let Some(ch) = parse_client_hello(&full[..n]) {
                assert!(ch.truncated);
                if ch.sni.is_some() {
                    assert_eq!(ch.sni.as_deref(), Some("example.com"));
                }
            }
        }
        // The SNI is whole well before the end.
        assert_eq!(parse_client_hello(&full[..120]).unwrap().sni.as_deref(), Some("example.com"));
    }

    #[test]
    fn second_client_hello_after_hello_retry_request() {
        let one = hex(RFC9001_CH);
        let mut stream = one.clone();
        stream.extend(&one);
        let msgs: Vec<_> = handshake_messages(&stream).collect();
        assert_eq!(msgs.len(), 2);
        assert!(msgs.iter().all(|m| m.complete && m.msg_type == 1));
        assert_eq!(msgs[1].offset, one.len());
        assert_eq!(parse_client_hello(msgs[1].bytes).unwrap().sni.as_deref(), Some("example.com"));
        let msgs: Vec<_> = handshake_messages(&stream[..one.len() + 10]).collect();
        assert_eq!(msgs.len(), 2);
        assert!(!msgs[1].complete);
        assert_eq!(handshake_messages(&[1, 0]).count(), 0);
    }

    #[test]
    fn rfc9001_server_hello() {
        // The ServerHello inside RFC 9001 A.3's CRYPTO frame.
        let sh = hex("020000560303eefce7f7b37ba1d1632e96677825ddf73988cfc79825df566dc5430b9a045a12001301
             00
             002e00330024001d00209d3c940d89690b84d08a60993c144eca684d1081287c834d5311bcf32bb9da1a002b00020304");
        let hello = parse_server_hello(&sh).unwrap();
        assert_eq!(hello.cipher_suite, 0x1301);
        assert!(!hello.hello_retry_request);
        assert!(parse_server_hello(&sh[..40]).is_none());
        let mut hrr = sh.clone();
        hrr[6..38].copy_from_slice(&HELLO_RETRY_REQUEST_RANDOM);
        assert!(parse_server_hello(&hrr).unwrap().hello_retry_request);
    }

    #[test]
    fn lies_are_refused() {
        let mut b = hex(RFC9001_CH);
        b[0] = 2; // ServerHello
        assert!(parse_client_hello(&b).is_none());
        let mut b = hex(RFC9001_CH);
        b[4 + 2 + 32 + 1] = 0xff; // cipher suites length past the end
        assert!(parse_client_hello(&b).is_none());
    }
}

//! QUIC versions: labels, header syntax, and the per-version constants of Initial protection
//! and Retry integrity.
//!
//! Sources of the constants: RFC 9001 §5.2 and §5.8 (v1, also used by drafts 33 and 34),
//! RFC 9369 §3.3 (v2), draft-ietf-quic-tls-22 (salt), -23 to -28 (salt), -29 to -32 (salt and
//! Retry key), -25 to -28 (Retry key); mvfst follows the draft it is based on (0xfaceb001:
//! draft-22; 0xfaceb002 and the experimental 0xfaceb00e: draft-27), and Google's Q050, T050 and
//! T051 have salts of their own (as in Wireshark and nDPI).

use std::fmt;

pub const VERSION_NEGOTIATION: u32 = 0;
pub const V1: u32 = 0x0000_0001;
pub const V2: u32 = 0x6b33_43cf;
pub const MVFST_DRAFT22: u32 = 0xface_b001;
pub const MVFST_DRAFT27: u32 = 0xface_b002;
pub const MVFST_EXPERIMENTAL: u32 = 0xface_b00e;
pub const GOOGLE_Q050: u32 = 0x5130_3530;
pub const GOOGLE_T050: u32 = 0x5430_3530;
pub const GOOGLE_T051: u32 = 0x5430_3531;

/// What a version number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Version {
    /// 0: the Version Negotiation packet.
    Negotiation,
    V1,
    /// RFC 9369.
    V2,
    /// IETF draft (0xff0000NN): the draft number.
    Draft(u8),
    /// Facebook mvfst (0xfaceb0NN).
    Mvfst(u32),
    /// Google QUIC: 'Q' or 'T' and three digits, e.g. Q046, Q050, T051.
    Google(u32),
    /// Reserved to exercise version negotiation (0x?a?a?a?a, RFC 9000 §15).
    Grease(u32),
    Unknown(u32),
}

impl Version {
    pub fn classify(v: u32) -> Version {
        match v {
            VERSION_NEGOTIATION => Version::Negotiation,
            V1 => Version::V1,
            V2 => Version::V2,
            _ if v >> 8 == 0x00ff_0000 => Version::Draft(v as u8),
            _ if v >> 8 == 0x00fa_ceb0 => Version::Mvfst(v),
            _ if v & 0x0f0f_0f0f == 0x0a0a_0a0a => Version::Grease(v),
            _ if google_number(v).is_some() => Version::Google(v),
            _ => Version::Unknown(v),
        }
    }

    /// The number on the wire.
    pub fn wire(self) -> u32 {
        match self {
            Version::Negotiation => VERSION_NEGOTIATION,
            Version::V1 => V1,
            Version::V2 => V2,
            Version::Draft(n) => 0xff00_0000 | u32::from(n),
            Version::Mvfst(v) | Version::Google(v) | Version::Grease(v) | Version::Unknown(v) => v,
        }
    }

    /// A short stable label: `v1`, `v2`, `draft-29`, `mvfst-draft-22`, `mvfst-draft-27`,
    /// `mvfst-experimental`, `mvfst-0xfaceb003`, `gquic-Q046`, `grease-0xbabababa`,
    /// `unknown-0x10010000`, `negotiation`.
    pub fn label(self) -> String {
        match self {
            Version::Negotiation => "negotiation".into(),
            Version::V1 => "v1".into(),
            Version::V2 => "v2".into(),
            Version::Draft(n) => format!("draft-{n}"),
            Version::Mvfst(MVFST_DRAFT22) => "mvfst-draft-22".into(),
            Version::Mvfst(MVFST_DRAFT27) => "mvfst-draft-27".into(),
            Version::Mvfst(MVFST_EXPERIMENTAL) => "mvfst-experimental".into(),
            Version::Mvfst(v) => format!("mvfst-{v:#010x}"),
            Version::Google(v) => {
                let b = v.to_be_bytes();
                format!("gquic-{}", String::from_utf8_lossy(&b))
            }
            Version::Grease(v) => format!("grease-{v:#010x}"),
            Version::Unknown(v) => format!("unknown-{v:#010x}"),
        }
    }

    /// The IETF draft whose wire format and constants this version uses, if any (v1 counts as
    /// 34, its last draft; v2 and non-IETF versions as `None`, except mvfst and Google's
    /// Q050/T050/T051, which follow drafts 22 and 27).
    pub fn draft_equivalent(self) -> Option<u8> {
        match self {
            Version::V1 => Some(34),
            Version::Draft(n) => Some(n),
            Version::Mvfst(MVFST_DRAFT22) => Some(22),
            Version::Mvfst(_) => Some(27),
            Version::Google(v) if google_number(v).is_some_and(|n| n >= 49) => Some(27),
            _ => None,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label())
    }
}

/// The number of a Google QUIC version ('Q' or 'T' then three ASCII digits).
pub(crate) fn google_number(v: u32) -> Option<u16> {
    let b = v.to_be_bytes();
    if (b[0] == b'Q' || b[0] == b'T') && b[1..].iter().all(u8::is_ascii_digit) {
        Some(b[1..].iter().fold(0u16, |n, d| n * 10 + u16::from(d - b'0')))
    } else {
        None
    }
}

/// How a long header of this version lays out its connection IDs and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// RFC 9000 §17.2 (drafts 22+, v1, v2, mvfst, Google Q049+/T049+): 8-bit CID lengths, types
    /// known, Length field on Initial/0-RTT/Handshake.
    Ietf,
    /// Drafts up to 21 and Google Q044–Q048 (and T048): one byte of two 4-bit CID lengths
    /// (each +3 when not zero). Body not parsed: the packet runs to the end of the datagram.
    Nibble,
    /// Only the RFC 8999 invariants are known (grease, unknown): version, CIDs.
    Invariant,
}

pub(crate) fn syntax(v: u32) -> Syntax {
    match Version::classify(v) {
        Version::V1 | Version::V2 | Version::Mvfst(_) => Syntax::Ietf,
        Version::Draft(n) if n >= 22 => Syntax::Ietf,
        Version::Draft(_) => Syntax::Nibble,
        Version::Google(g) => match google_number(g) {
            Some(n) if n >= 49 => Syntax::Ietf,
            Some(n) if n >= 44 => Syntax::Nibble,
            _ => Syntax::Invariant,
        },
        _ => Syntax::Invariant,
    }
}

/// Largest connection ID the version allows.
pub(crate) fn max_cid_len(v: u32) -> usize {
    match syntax(v) {
        Syntax::Ietf => super::MAX_CID_LEN,
        Syntax::Nibble => 18,
        Syntax::Invariant => 255,
    }
}

/// The two long-header type bits of this version, as (Initial, 0-RTT, Handshake, Retry).
pub(crate) fn long_type_bits(v: u32) -> [u8; 4] {
    if v == V2 {
        // RFC 9369 §3.2.
        [0b01, 0b10, 0b11, 0b00]
    } else {
        [0b00, 0b01, 0b10, 0b11]
    }
}

/// How a Retry packet of this version proves where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryIntegrity {
    /// A 16-byte AES-128-GCM tag over the pseudo-packet (draft-25 and later).
    Tag { key: [u8; 16], nonce: [u8; 12] },
    /// Drafts 22–24: the Retry carries the Original Destination Connection ID in the clear.
    OdcidField,
}

const RETRY_V1: RetryIntegrity =
    RetryIntegrity::Tag { key: hex16("be0c690b9f66575a1d766b54e368c84e"), nonce: hex12("461599d35d632bf2239825bb") };
const RETRY_V2: RetryIntegrity =
    RetryIntegrity::Tag { key: hex16("8fb4b01b56ac48e260fbcbcead7ccc92"), nonce: hex12("d86969bc2d7c6d9990efb04a") };
const RETRY_DRAFT29: RetryIntegrity =
    RetryIntegrity::Tag { key: hex16("ccce187ed09a09d05728155a6cb96be1"), nonce: hex12("e54930f97f2136f0530a8c1c") };
const RETRY_DRAFT25: RetryIntegrity =
    RetryIntegrity::Tag { key: hex16("4d32ecdb2a2133c841e4043df27d4430"), nonce: hex12("4d1611d05513a552c587d575") };

pub(crate) fn retry_integrity(v: u32) -> Option<RetryIntegrity> {
    if v == V2 {
        return Some(RETRY_V2);
    }
    match Version::classify(v).draft_equivalent()? {
        33.. => Some(RETRY_V1),
        29..=32 => Some(RETRY_DRAFT29),
        25..=28 => Some(RETRY_DRAFT25),
        22..=24 => Some(RetryIntegrity::OdcidField),
        _ => None,
    }
}

/// Frame encoding inside Initial packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameDialect {
    /// RFC 9000 §19 (and the drafts).
    Ietf,
    /// Google Q050/T050/T051: gQUIC frames (0x00 padding, 0x08 CRYPTO with varint offset and
    /// length); anything else ends the parse.
    Google,
}

/// The constants of Initial packet protection for one version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InitialParams {
    pub salt: [u8; 20],
    pub key_label: &'static [u8],
    pub iv_label: &'static [u8],
    pub hp_label: &'static [u8],
    pub frames: FrameDialect,
}

const SALT_V1: [u8; 20] = hex20("38762cf7f55934b34d179ae6a4c80cadccbb7f0a");
const SALT_V2: [u8; 20] = hex20("0dede3def700a6db819381be6e269dcbf9bd2ed9");
const SALT_DRAFT22: [u8; 20] = hex20("7fbcdb0e7c66bbe9193a96cd21519ebd7a02644a");
const SALT_DRAFT23: [u8; 20] = hex20("c3eef712c72ebb5a11a7d2432bb46365bef9f502");
const SALT_DRAFT29: [u8; 20] = hex20("afbfec289993d24c9e9786f19c6111e04390a899");
const SALT_Q050: [u8; 20] = hex20("504574efd066fe2f9d945cfcdbd3a7f0d3b56b45");
const SALT_T050: [u8; 20] = hex20("7ff579e5acd072915580304c43a2367c60488310");
const SALT_T051: [u8; 20] = hex20("7a4edef4e7ccee5fa4506c19124fc8ccda6e033d");

const QUIC_LABELS: (&[u8], &[u8], &[u8]) = (b"quic key", b"quic iv", b"quic hp");
const QUICV2_LABELS: (&[u8], &[u8], &[u8]) = (b"quicv2 key", b"quicv2 iv", b"quicv2 hp");

pub(crate) fn initial_params(v: u32) -> Option<InitialParams> {
    let (salt, labels, frames) = match v {
        V2 => (SALT_V2, QUICV2_LABELS, FrameDialect::Ietf),
        GOOGLE_Q050 => (SALT_Q050, QUIC_LABELS, FrameDialect::Google),
        GOOGLE_T050 => (SALT_T050, QUIC_LABELS, FrameDialect::Google),
        GOOGLE_T051 => (SALT_T051, QUIC_LABELS, FrameDialect::Google),
        _ => {
            let ver = Version::classify(v);
            if matches!(ver, Version::Google(_)) {
                return None;
            }
            let salt = match ver.draft_equivalent()? {
                33.. => SALT_V1,
                29..=32 => SALT_DRAFT29,
                23..=28 => SALT_DRAFT23,
                22 => SALT_DRAFT22,
                _ => return None,
            };
            (salt, QUIC_LABELS, FrameDialect::Ietf)
        }
    };
    Some(InitialParams { salt, key_label: labels.0, iv_label: labels.1, hp_label: labels.2, frames })
}

/// The parameter sets to try for a version: one, or for a greased version (whose Initials a
/// client protects with whatever its stack defaults to) draft-29's then v1's. Wireshark uses
/// draft-29's for greased versions.
pub(crate) fn initial_params_candidates(v: u32) -> Vec<InitialParams> {
    if let Version::Grease(_) = Version::classify(v) {
        let p = |salt| InitialParams {
            salt,
            key_label: QUIC_LABELS.0,
            iv_label: QUIC_LABELS.1,
            hp_label: QUIC_LABELS.2,
            frames: FrameDialect::Ietf,
        };
        return vec![p(SALT_DRAFT29), p(SALT_V1)];
    }
    initial_params(v).into_iter().collect()
}

// Hex constants, decoded at compile time (spaces are skipped so long values can be grouped).
const fn hexval(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => panic!("not a hex digit"),
    }
}

const fn hex_n<const N: usize>(s: &str) -> [u8; N] {
    let s = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    let mut n = 0;
    while i < s.len() {
        if s[i] == b' ' {
            i += 1;
            continue;
        }
        out[n] = hexval(s[i]) << 4 | hexval(s[i + 1]);
        n += 1;
        i += 2;
    }
    assert!(n == N, "wrong length");
    out
}

const fn hex12(s: &str) -> [u8; 12] {
    hex_n::<12>(s)
}
const fn hex16(s: &str) -> [u8; 16] {
    hex_n::<16>(s)
}
const fn hex20(s: &str) -> [u8; 20] {
    hex_n::<20>(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_and_label() {
        let cases: &[(u32, &str)] = &[
            (0, "negotiation"),
            (1, "v1"),
            (0x6b3343cf, "v2"),
            (0xff00001d, "draft-29"),
            (0xff000017, "draft-23"),
            (0xfaceb001, "mvfst-draft-22"),
            (0xfaceb002, "mvfst-draft-27"),
            (0xfaceb00e, "mvfst-experimental"),
            (0x51303436, "gquic-Q046"),
            (0x51303530, "gquic-Q050"),
            (0x54303531, "gquic-T051"),
            (0xbabababa, "grease-0xbabababa"),
            (0x0a0a0a0a, "grease-0x0a0a0a0a"),
            (0x10010000, "unknown-0x10010000"),
        ];
        for &(v, label) in cases {
            let c = Version::classify(v);
            assert_eq!(c.label(), label, "{v:#x}");
            assert_eq!(c.wire(), v);
        }
    }

    #[test]
    fn salts_by_version() {
        assert_eq!(initial_params(1).unwrap().salt, SALT_V1);
        assert_eq!(initial_params(0xff000022).unwrap().salt, SALT_V1);
        assert_eq!(initial_params(0xff000021).unwrap().salt, SALT_V1);
        assert_eq!(initial_params(0xff000020).unwrap().salt, SALT_DRAFT29);
        assert_eq!(initial_params(0xff00001d).unwrap().salt, SALT_DRAFT29);
        assert_eq!(initial_params(0xff00001c).unwrap().salt, SALT_DRAFT23);
        assert_eq!(initial_params(0xff000017).unwrap().salt, SALT_DRAFT23);
        assert_eq!(initial_params(0xff000016).unwrap().salt, SALT_DRAFT22);
        assert_eq!(initial_params(MVFST_DRAFT22).unwrap().salt, SALT_DRAFT22);
        assert_eq!(initial_params(MVFST_DRAFT27).unwrap().salt, SALT_DRAFT23);
        assert_eq!(initial_params(MVFST_EXPERIMENTAL).unwrap().salt, SALT_DRAFT23);
        assert_eq!(initial_params(V2).unwrap().key_label, b"quicv2 key");
        assert!(initial_params(0xff000015).is_none());
        assert!(initial_params(0x51303436).is_none());
        assert!(initial_params(0xbabababa).is_none());
        assert_eq!(initial_params(GOOGLE_T051).unwrap().frames, FrameDialect::Google);
    }

    #[test]
    fn syntax_by_version() {
        assert_eq!(syntax(0x51303436), Syntax::Nibble);
        assert_eq!(syntax(0x51303530), Syntax::Ietf);
        assert_eq!(syntax(0x54303531), Syntax::Ietf);
        assert_eq!(syntax(0xff000015), Syntax::Nibble);
        assert_eq!(syntax(0xbabababa), Syntax::Invariant);
        assert_eq!(syntax(0x51303433), Syntax::Invariant);
    }
}

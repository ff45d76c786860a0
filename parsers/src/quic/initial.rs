//! Passive decryption of Initial packets (RFC 9001 §5; RFC 9369 §3.3 for v2) and the Retry
//! integrity check (RFC 9001 §5.8).
//!
//! Initial keys are public: HKDF-Extract(version salt, client's first Destination Connection ID)
//! gives the initial secret, HKDF-Expand-Label("client in" / "server in") the two directions'
//! secrets, and "quic key" / "quic iv" / "quic hp" ("quicv2 …" for v2) the AES-128-GCM key, IV
//! and header protection key. Header protection is AES-128-ECB over a 16-byte sample of the
//! ciphertext taken 4 bytes after the packet number's start.

use aes::Aes128;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce, Tag};
use hkdf::Hkdf;
use sha2::Sha256;

use super::frames::{parse_frames_dialect, FrameSummary};
use super::header::{LongHeader, PacketType};
use super::version::{self, InitialParams, RetryIntegrity};
use super::QuicError;

/// The three secrets of RFC 9001 §5.2 for one client DCID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialSecrets {
    pub initial: [u8; 32],
    pub client: [u8; 32],
    pub server: [u8; 32],
}

/// Key, IV and header protection key expanded from one direction's secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMaterial {
    pub key: [u8; 16],
    pub iv: [u8; 12],
    pub hp: [u8; 16],
}

/// HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
fn expand_label(prk: &[u8], label: &[u8], out: &mut [u8]) -> Option<()> {
    let hk = Hkdf::<Sha256>::from_prk(prk).ok()?;
    let len = u16::try_from(out.len()).ok()?;
    let full = 6 + label.len();
    let mut info = Vec::with_capacity(4 + full);
    info.extend_from_slice(&len.to_be_bytes());
    info.push(u8::try_from(full).ok()?);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0);
    hk.expand(&info, out).ok()
}

fn secrets(params: &InitialParams, dcid: &[u8]) -> Option<InitialSecrets> {
    let (prk, _) = Hkdf::<Sha256>::extract(Some(&params.salt), dcid);
    let mut s = InitialSecrets { initial: [0; 32], client: [0; 32], server: [0; 32] };
    s.initial.copy_from_slice(&prk);
    expand_label(&s.initial, b"client in", &mut s.client)?;
    expand_label(&s.initial, b"server in", &mut s.server)?;
    Some(s)
}

fn key_material(params: &InitialParams, secret: &[u8; 32]) -> Option<KeyMaterial> {
    let mut m = KeyMaterial { key: [0; 16], iv: [0; 12], hp: [0; 16] };
    expand_label(secret, params.key_label, &mut m.key)?;
    expand_label(secret, params.iv_label, &mut m.iv)?;
    expand_label(secret, params.hp_label, &mut m.hp)?;
    Some(m)
}

/// The Initial secrets of `version` for a client DCID (`None`: no keys known for the version).
pub fn initial_secrets(version: u32, dcid: &[u8]) -> Option<InitialSecrets> {
    secrets(&version::initial_params(version)?, dcid)
}

/// Expand one direction's Initial secret into key, IV and header protection key.
pub fn packet_key_material(version: u32, secret: &[u8; 32]) -> Option<KeyMaterial> {
    key_material(&version::initial_params(version)?, secret)
}

#[derive(Clone)]
struct PacketKeys {
    aead: Aes128Gcm,
    hp: Aes128,
    iv: [u8; 12],
}

impl PacketKeys {
    fn new(m: &KeyMaterial) -> Self {
        use aes::cipher::KeyInit as _;
        PacketKeys { aead: Aes128Gcm::new(&m.key.into()), hp: Aes128::new(&m.hp.into()), iv: m.iv }
    }

    fn hp_mask(&self, sample: &[u8]) -> [u8; 16] {
        use aes::cipher::BlockEncrypt;
        let mut block = [0u8; 16];
        block.copy_from_slice(sample);
        let mut b = block.into();
        self.hp.encrypt_block(&mut b);
        b.into()
    }

    fn nonce(&self, pn: u64) -> [u8; 12] {
        let mut n = self.iv;
        for (i, b) in pn.to_be_bytes().iter().enumerate() {
            n[4 + i] ^= b;
        }
        n
    }
}

#[derive(Clone)]
struct KeySet {
    dcid: Vec<u8>,
    client: PacketKeys,
    server: PacketKeys,
}

impl KeySet {
    fn derive(params: &InitialParams, dcid: &[u8]) -> Result<Self, QuicError> {
        let fail = QuicError::Malformed("key derivation failed");
        let s = secrets(params, dcid).ok_or(fail.clone())?;
        let c = key_material(params, &s.client).ok_or(fail.clone())?;
        let v = key_material(params, &s.server).ok_or(fail)?;
        Ok(KeySet { dcid: dcid.to_vec(), client: PacketKeys::new(&c), server: PacketKeys::new(&v) })
    }
}

/// RFC 9000 Appendix A.3: the packet number closest to the next one expected.
pub fn decode_packet_number(largest: Option<u64>, truncated: u64, bits: u32) -> u64 {
    let expected = largest.map_or(0, |l| l.saturating_add(1));
    let win = 1u64 << bits;
    let hwin = win / 2;
    let candidate = (expected & !(win - 1)) | truncated;
    if expected >= hwin && candidate <= expected - hwin && candidate < (1 << 62) - win {
        candidate + win
    } else if candidate > expected.saturating_add(hwin) && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// One opened Initial packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecryptedInitial {
    /// The full packet number.
    pub packet_number: u64,
    /// Bytes the packet number took on the wire (1–4).
    pub pn_len: usize,
    /// The header with protection removed (first byte's low bits and packet number clear).
    pub header: Vec<u8>,
    /// The decrypted payload (frames).
    pub plaintext: Vec<u8>,
    pub frames: FrameSummary,
    /// The keys in use changed with this packet: a client Initial that only keys derived from
    /// its own DCID open (after a Retry, or a new connection on the same 4-tuple).
    pub rekeyed: bool,
}

impl DecryptedInitial {
    /// (stream offset, data) of each CRYPTO frame, in packet order.
    pub fn crypto_data(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.frames.crypto.iter().filter_map(|c| Some((c.offset, self.plaintext.get(c.start..c.start + c.len)?)))
    }
    /// The reserved bits (0x0c) of the unprotected first byte; non-zero is a protocol violation.
    pub fn reserved_bits(&self) -> u8 {
        self.header.first().map_or(0, |b| b & 0x0c)
    }
}

/// Opens the Initial packets of one connection attempt, both directions. `Clone`, `Send` and
/// `Sync`; about 3 KiB on the heap (two directions' AES key schedules; twice that for a greased
/// version until a packet opens). A flow can drop it once its Initial packets are over.
#[derive(Clone)]
pub struct InitialDecryptor {
    version: u32,
    /// The parameter sets still possible (one, except for a greased version until a packet
    /// opens), with their keys.
    candidates: Vec<(InitialParams, KeySet)>,
    original_dcid: Vec<u8>,
    /// Largest packet number opened, [from server, from client].
    largest: [Option<u64>; 2],
}

impl std::fmt::Debug for InitialDecryptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitialDecryptor")
            .field("version", &format_args!("{:#010x}", self.version))
            .field("original_dcid", &self.original_dcid)
            .field("current_dcid", &self.current_dcid())
            .field("candidates", &self.candidates.len())
            .field("largest", &self.largest)
            .finish()
    }
}

impl InitialDecryptor {
    /// Keys for `version` from the client's first Destination Connection ID. Greased versions
    /// (0x?a?a?a?a) are accepted: their Initials are tried with draft-29's and v1's keys.
    pub fn new(version: u32, client_dcid: &[u8]) -> Result<Self, QuicError> {
        let params = version::initial_params_candidates(version);
        if params.is_empty() {
            return Err(QuicError::UnsupportedVersion(version));
        }
        if client_dcid.len() > 255 {
            return Err(QuicError::CidTooLong(client_dcid.len()));
        }
        let candidates = params
            .into_iter()
            .map(|p| Ok((p, KeySet::derive(&p, client_dcid)?)))
            .collect::<Result<Vec<_>, QuicError>>()?;
        Ok(InitialDecryptor { version, candidates, original_dcid: client_dcid.to_vec(), largest: [None, None] })
    }

    pub fn version(&self) -> u32 {
        self.version
    }
    /// The DCID the decryptor was created with.
    pub fn original_dcid(&self) -> &[u8] {
        &self.original_dcid
    }
    /// The DCID the keys in use come from.
    pub fn current_dcid(&self) -> &[u8] {
        &self.candidates[0].1.dcid
    }

    /// After a Retry: both directions' keys come from the client's new DCID, which is the
    /// Retry's Source Connection ID (RFC 9001 §5.2).
    pub fn on_retry(&mut self, retry_scid: &[u8]) -> Result<(), QuicError> {
        self.rekey(retry_scid)
    }

    fn rekey(&mut self, dcid: &[u8]) -> Result<(), QuicError> {
        if dcid.len() > 255 {
            return Err(QuicError::CidTooLong(dcid.len()));
        }
        for c in &mut self.candidates {
            c.1 = KeySet::derive(&c.0, dcid)?;
        }
        self.largest = [None, None];
        Ok(())
    }

    /// Open one Initial packet (its bytes only: [`super::PacketHeader::bytes`]).
    pub fn open(&mut self, packet: &[u8], from_client: bool) -> Result<DecryptedInitial, QuicError> {
        let h = LongHeader::new_checked(packet)?;
        if h.version() != self.version {
            return Err(QuicError::VersionMismatch { expected: self.version, got: h.version() });
        }
        if h.packet_type() != PacketType::Initial {
            return Err(QuicError::NotInitial);
        }
        if h.truncated() {
            return Err(QuicError::Truncated("packet (its Length runs past the bytes given)"));
        }
        let pn_offset = h.pn_offset().ok_or(QuicError::NotInitial)?;
        let pkt = h.packet();
        let dir = usize::from(from_client);
        let mut rekeyed = false;
        let mut opened = self.try_candidates(pkt, pn_offset, from_client, self.largest[dir]);
        if opened == Err(QuicError::DecryptFailed) && from_client && h.dcid() != self.current_dcid() {
            // A client Initial protected with keys from its own DCID: after a Retry, or a new
            // connection attempt on the same 4-tuple. Adopt those keys only if they open it.
            let fresh = self
                .candidates
                .iter()
                .map(|c| Ok((c.0, KeySet::derive(&c.0, h.dcid())?)))
                .collect::<Result<Vec<_>, QuicError>>()?;
            let old = std::mem::replace(&mut self.candidates, fresh);
            opened = self.try_candidates(pkt, pn_offset, true, None);
            if opened.is_ok() {
                rekeyed = true;
                self.largest = [None, None];
            } else {
                self.candidates = old;
            }
        }
        let (i, (packet_number, pn_len, header, plaintext)) = opened?;
        if self.candidates.len() > 1 {
            let keep = self.candidates.swap_remove(i);
            self.candidates = vec![keep];
        }
        self.largest[dir] = Some(self.largest[dir].map_or(packet_number, |l| l.max(packet_number)));
        let frames = parse_frames_dialect(&plaintext, self.candidates[0].0.frames);
        Ok(DecryptedInitial { packet_number, pn_len, header, plaintext, frames, rekeyed })
    }

    /// The first candidate that opens the packet, or the last error.
    fn try_candidates(
        &self,
        pkt: &[u8],
        pn_offset: usize,
        from_client: bool,
        largest: Option<u64>,
    ) -> Result<(usize, Opened), QuicError> {
        let mut err = QuicError::DecryptFailed;
        for (i, c) in self.candidates.iter().enumerate() {
            match open_with(&c.1, pkt, pn_offset, from_client, largest) {
                Ok(o) => return Ok((i, o)),
                Err(e) => err = e,
            }
        }
        Err(err)
    }
}

type Opened = (u64, usize, Vec<u8>, Vec<u8>);

fn open_with(
    keys: &KeySet,
    pkt: &[u8],
    pn_offset: usize,
    from_client: bool,
    largest: Option<u64>,
) -> Result<Opened, QuicError> {
    let k = if from_client { &keys.client } else { &keys.server };
    let sample_end = pn_offset.checked_add(20).ok_or(QuicError::TooShort)?;
    let sample = pkt.get(pn_offset + 4..sample_end).ok_or(QuicError::TooShort)?;
    let mask = k.hp_mask(sample);
    let first = pkt[0] ^ (mask[0] & 0x0f);
    let pn_len = usize::from(first & 0x03) + 1;
    let payload_start = pn_offset + pn_len;
    // pkt.len() >= pn_offset + 20 >= payload_start + 16: there is room for the tag.
    let mut header = pkt[..payload_start].to_vec();
    header[0] = first;
    let mut truncated = 0u64;
    for i in 0..pn_len {
        header[pn_offset + i] ^= mask[1 + i];
        truncated = (truncated << 8) | u64::from(header[pn_offset + i]);
    }
    let (ct, tag) = pkt[payload_start..].split_at(pkt.len() - payload_start - 16);
    let decoded = decode_packet_number(largest, truncated, 8 * pn_len as u32);
    // The closest number to the largest seen, then the number as sent (a peer that restarted).
    let tries = if decoded == truncated { [decoded, decoded] } else { [decoded, truncated] };
    for (i, pn) in tries.into_iter().enumerate() {
        if i == 1 && pn == tries[0] {
            break;
        }
        let mut buf = ct.to_vec();
        let nonce = k.nonce(pn);
        if k.aead.decrypt_in_place_detached(Nonce::from_slice(&nonce), &header, &mut buf, Tag::from_slice(tag)).is_ok()
        {
            return Ok((pn, pn_len, header, buf));
        }
    }
    Err(QuicError::DecryptFailed)
}

/// The outcome of a Retry integrity check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryCheck {
    /// The tag (or, drafts 22–24, the ODCID field) matches the client's original DCID.
    Valid,
    Invalid,
}

/// Check a Retry packet against the DCID of the client's Initial it answers.
pub fn verify_retry(packet: &[u8], original_dcid: &[u8]) -> Result<RetryCheck, QuicError> {
    let h = LongHeader::new_checked(packet)?;
    if h.packet_type() != PacketType::Retry {
        return Err(QuicError::Malformed("not a Retry packet"));
    }
    let odcid_len = u8::try_from(original_dcid.len()).map_err(|_| QuicError::CidTooLong(original_dcid.len()))?;
    let ok = match version::retry_integrity(h.version()).ok_or(QuicError::UnsupportedVersion(h.version()))? {
        RetryIntegrity::OdcidField => h.retry_odcid() == Some(original_dcid),
        RetryIntegrity::Tag { key, nonce } => {
            let pkt = h.packet();
            let tag = h.retry_tag().ok_or(QuicError::Truncated("retry integrity tag"))?;
            let mut pseudo = Vec::with_capacity(1 + original_dcid.len() + pkt.len());
            pseudo.push(odcid_len);
            pseudo.extend_from_slice(original_dcid);
            pseudo.extend_from_slice(&pkt[..pkt.len() - 16]);
            let aead = Aes128Gcm::new(&key.into());
            aead.decrypt_in_place_detached(Nonce::from_slice(&nonce), &pseudo, &mut [], Tag::from_slice(tag)).is_ok()
        }
    };
    Ok(if ok { RetryCheck::Valid } else { RetryCheck::Invalid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decryptor_can_live_in_a_flow_table() {
        fn send_sync_clone<T: Send + Sync + Clone>() {}
        send_sync_clone::<InitialDecryptor>();
        send_sync_clone::<crate::quic::CryptoReassembler>();
    }

    #[test]
    fn packet_number_decoding_rfc9000_a3() {
        // RFC 9000 A.3's example: largest 0xa82f30ea, 16-bit 0x9b32 -> 0xa82f9b32.
        assert_eq!(decode_packet_number(Some(0xa82f30ea), 0x9b32, 16), 0xa82f9b32);
        assert_eq!(decode_packet_number(None, 0, 8), 0);
        assert_eq!(decode_packet_number(None, 2, 32), 2);
        assert_eq!(decode_packet_number(Some(255), 1, 8), 257);
        assert_eq!(decode_packet_number(Some(300), 0xff, 8), 255);
        let _ = decode_packet_number(Some(u64::MAX), 0, 8); // no overflow
    }
}

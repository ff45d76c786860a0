//! QUIC packet protection (RFC 9001 §5) for the keys a key log gives: Handshake and 1-RTT
//! packets with the cipher suite the ServerHello chose, and key updates (§6).
//!
//! The Initial code ([`super::initial`]) only ever needs AES-128-GCM with SHA-256; here the
//! suite decides the hash of HKDF-Expand-Label (SHA-384 for TLS_AES_256_GCM_SHA384), the AEAD
//! and the header protection cipher (AES-ECB for the AES suites, ChaCha20 for
//! TLS_CHACHA20_POLY1305_SHA256, §5.4.4). Labels are "quic key/iv/hp/ku", "quicv2 …" for v2
//! (RFC 9369 §3.3).

use aes::{Aes128, Aes256};
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, Aes256Gcm, KeyInit, Nonce, Tag};
use chacha20poly1305::ChaCha20Poly1305;
use hkdf::Hkdf;
use sha2::{Sha256, Sha384};

use super::version::V2;

/// The TLS 1.3 cipher suites QUIC can use (RFC 9001 §5.3; TLS_AES_128_CCM_8_SHA256 is barred
/// and TLS_AES_128_CCM_SHA256 is not deployed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    Aes128GcmSha256,
    Aes256GcmSha384,
    ChaCha20Poly1305Sha256,
}

impl CipherSuite {
    /// From the ServerHello's cipher_suite.
    pub fn from_tls(id: u16) -> Option<CipherSuite> {
        match id {
            0x1301 => Some(CipherSuite::Aes128GcmSha256),
            0x1302 => Some(CipherSuite::Aes256GcmSha384),
            0x1303 => Some(CipherSuite::ChaCha20Poly1305Sha256),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CipherSuite::Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            CipherSuite::Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
            CipherSuite::ChaCha20Poly1305Sha256 => "TLS_CHACHA20_POLY1305_SHA256",
        }
    }

    fn key_len(self) -> usize {
        match self {
            CipherSuite::Aes128GcmSha256 => 16,
            _ => 32,
        }
    }

    fn hash_len(self) -> usize {
        match self {
            CipherSuite::Aes256GcmSha384 => 48,
            _ => 32,
        }
    }
}

struct Labels {
    key: &'static [u8],
    iv: &'static [u8],
    hp: &'static [u8],
    ku: &'static [u8],
}

fn labels(version: u32) -> Labels {
    if version == V2 {
        Labels { key: b"quicv2 key", iv: b"quicv2 iv", hp: b"quicv2 hp", ku: b"quicv2 ku" }
    } else {
        Labels { key: b"quic key", iv: b"quic iv", hp: b"quic hp", ku: b"quic ku" }
    }
}

/// HKDF-Expand-Label (RFC 8446 §7.1), empty context, with the suite's hash.
pub fn expand_label(suite: CipherSuite, secret: &[u8], label: &[u8], len: usize) -> Option<Vec<u8>> {
    let full = 6 + label.len();
    let mut info = Vec::with_capacity(4 + full);
    info.extend_from_slice(&u16::try_from(len).ok()?.to_be_bytes());
    info.push(u8::try_from(full).ok()?);
    info.extend_from_slice(b"tls13 ");
    info.extend_from_slice(label);
    info.push(0);
    let mut out = vec![0u8; len];
    match suite {
        CipherSuite::Aes256GcmSha384 => Hkdf::<Sha384>::from_prk(secret).ok()?.expand(&info, &mut out).ok()?,
        _ => Hkdf::<Sha256>::from_prk(secret).ok()?.expand(&info, &mut out).ok()?,
    }
    Some(out)
}

#[derive(Clone)]
enum Aead {
    Aes128(Box<Aes128Gcm>),
    Aes256(Box<Aes256Gcm>),
    ChaCha(ChaCha20Poly1305),
}

#[derive(Clone)]
enum HeaderKey {
    Aes128(Box<Aes128>),
    Aes256(Box<Aes256>),
    ChaCha([u8; 32]),
}

/// Header protection of one direction (it does not change on key update, RFC 9001 §6).
#[derive(Clone)]
pub struct HeaderProtection(HeaderKey);

impl HeaderProtection {
    /// The 5-byte mask for a 16-byte sample (§5.4.3, §5.4.4).
    pub fn mask(&self, sample: &[u8; 16]) -> [u8; 5] {
        let mut out = [0u8; 5];
        match &self.0 {
            HeaderKey::Aes128(k) => out.copy_from_slice(&aes_block(&**k, sample)[..5]),
            HeaderKey::Aes256(k) => out.copy_from_slice(&aes_block(&**k, sample)[..5]),
            HeaderKey::ChaCha(key) => {
                use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
                let counter = u32::from_le_bytes([sample[0], sample[1], sample[2], sample[3]]);
                let mut c = chacha20::ChaCha20::new(key.into(), sample[4..].into());
                c.seek(u64::from(counter) * 64);
                c.apply_keystream(&mut out);
            }
        }
        out
    }
}

fn aes_block<C: aes::cipher::BlockEncrypt<BlockSize = aes::cipher::consts::U16>>(c: &C, sample: &[u8; 16]) -> [u8; 16] {
    let mut b = aes::Block::from(*sample);
    c.encrypt_block(&mut b);
    b.into()
}

/// The AEAD key and IV of one direction and key generation.
#[derive(Clone)]
pub struct PacketKey {
    aead: Aead,
    iv: [u8; 12],
}

impl PacketKey {
    fn nonce(&self, pn: u64) -> [u8; 12] {
        let mut n = self.iv;
        for (i, b) in pn.to_be_bytes().iter().enumerate() {
            n[4 + i] ^= b;
        }
        n
    }

    /// Decrypt a payload (ciphertext then 16-byte tag) with the unprotected header as AAD.
    pub fn open(&self, pn: u64, header: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
        let split = payload.len().checked_sub(16)?;
        let (ct, tag) = payload.split_at(split);
        let mut buf = ct.to_vec();
        let nonce = self.nonce(pn);
        let (n, t) = (Nonce::from_slice(&nonce), Tag::from_slice(tag));
        let ok = match &self.aead {
            Aead::Aes128(a) => a.decrypt_in_place_detached(n, header, &mut buf, t),
            Aead::Aes256(a) => a.decrypt_in_place_detached(n, header, &mut buf, t),
            Aead::ChaCha(a) => a.decrypt_in_place_detached(n, header, &mut buf, t),
        };
        ok.is_ok().then_some(buf)
    }

    /// Encrypt a payload: ciphertext then tag (for tests and fuzz seeds).
    pub fn seal(&self, pn: u64, header: &[u8], plaintext: &[u8]) -> Vec<u8> {
        let mut buf = plaintext.to_vec();
        let nonce = self.nonce(pn);
        let n = Nonce::from_slice(&nonce);
        let tag = match &self.aead {
            Aead::Aes128(a) => a.encrypt_in_place_detached(n, header, &mut buf),
            Aead::Aes256(a) => a.encrypt_in_place_detached(n, header, &mut buf),
            Aead::ChaCha(a) => a.encrypt_in_place_detached(n, header, &mut buf),
        }
        .expect("payloads of a QUIC packet are far below the AEAD limit");
        buf.extend_from_slice(&tag);
        buf
    }
}

/// One direction's keys of one packet number space, from a traffic secret.
#[derive(Clone)]
pub struct DirectionKeys {
    pub suite: CipherSuite,
    pub version: u32,
    secret: Vec<u8>,
    pub packet: PacketKey,
    pub hp: HeaderProtection,
}

impl std::fmt::Debug for DirectionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectionKeys").field("suite", &self.suite).field("version", &self.version).finish()
    }
}

impl DirectionKeys {
    /// Keys from a TLS traffic secret (its length must be the suite's hash length).
    pub fn new(suite: CipherSuite, version: u32, secret: &[u8]) -> Option<DirectionKeys> {
        if secret.len() != suite.hash_len() {
            return None;
        }
        let l = labels(version);
        let hp = expand_label(suite, secret, l.hp, suite.key_len())?;
        let hp = HeaderProtection(match suite {
            CipherSuite::Aes128GcmSha256 => {
                HeaderKey::Aes128(Box::new(aes::cipher::KeyInit::new_from_slice(&hp).ok()?))
            }
            CipherSuite::Aes256GcmSha384 => {
                HeaderKey::Aes256(Box::new(aes::cipher::KeyInit::new_from_slice(&hp).ok()?))
            }
            CipherSuite::ChaCha20Poly1305Sha256 => HeaderKey::ChaCha(hp.try_into().ok()?),
        });
        Self::with_hp(suite, version, secret, hp)
    }

    fn with_hp(suite: CipherSuite, version: u32, secret: &[u8], hp: HeaderProtection) -> Option<DirectionKeys> {
        let l = labels(version);
        let key = expand_label(suite, secret, l.key, suite.key_len())?;
        let iv: [u8; 12] = expand_label(suite, secret, l.iv, 12)?.try_into().ok()?;
        let aead = match suite {
            CipherSuite::Aes128GcmSha256 => Aead::Aes128(Box::new(Aes128Gcm::new_from_slice(&key).ok()?)),
            CipherSuite::Aes256GcmSha384 => Aead::Aes256(Box::new(Aes256Gcm::new_from_slice(&key).ok()?)),
            CipherSuite::ChaCha20Poly1305Sha256 => Aead::ChaCha(ChaCha20Poly1305::new_from_slice(&key).ok()?),
        };
        Some(DirectionKeys { suite, version, secret: secret.to_vec(), packet: PacketKey { aead, iv }, hp })
    }

    /// The next key generation after a key update (§6.1: "quic ku"; header protection stays).
    pub fn next_generation(&self) -> Option<DirectionKeys> {
        let next = expand_label(self.suite, &self.secret, labels(self.version).ku, self.secret.len())?;
        Self::with_hp(self.suite, self.version, &next, self.hp.clone())
    }

    pub fn secret(&self) -> &[u8] {
        &self.secret
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    /// RFC 9001 A.5: the ChaCha20-Poly1305 short header packet, key by key.
    #[test]
    fn rfc9001_a5_chacha20_keys() {
        let s = CipherSuite::ChaCha20Poly1305Sha256;
        let secret = hex("9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b");
        assert_eq!(
            expand_label(s, &secret, b"quic key", 32).unwrap(),
            hex("c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8")
        );
        assert_eq!(expand_label(s, &secret, b"quic iv", 12).unwrap(), hex("e0459b3474bdd0e44a41c144"));
        assert_eq!(
            expand_label(s, &secret, b"quic hp", 32).unwrap(),
            hex("25a282b9e82f06f21f488917a4fc8f1b73573685608597d0efcb076b0ab7a7a4")
        );
        let k = DirectionKeys::new(s, 1, &secret).unwrap();
        assert_eq!(
            k.next_generation().unwrap().secret(),
            &hex("1223504755036d556342ee9361d253421a826c9ecdf3c7148684b36b714881f9")[..]
        );
        let sample: [u8; 16] = hex("5e5cd55c41f69080575d7999c25a5bfb").try_into().unwrap();
        assert_eq!(k.hp.mask(&sample).to_vec(), hex("aefefe7d03"));
        assert_eq!(k.packet.nonce(654_360_564).to_vec(), hex("e0459b3474bdd0e46d417eb0"));
        assert_eq!(k.packet.seal(654_360_564, &hex("4200bff4"), &[0x01]), hex("655e5cd55c41f69080575d7999c25a5bfb"));
    }

    #[test]
    fn every_suite_round_trips_and_refuses_other_keys() {
        for (suite, len) in [
            (CipherSuite::Aes128GcmSha256, 32),
            (CipherSuite::Aes256GcmSha384, 48),
            (CipherSuite::ChaCha20Poly1305Sha256, 32),
        ] {
            for version in [1, V2] {
                let k = DirectionKeys::new(suite, version, &vec![7u8; len]).unwrap();
                let sealed = k.packet.seal(42, b"hdr", b"frames");
                assert_eq!(k.packet.open(42, b"hdr", &sealed).as_deref(), Some(&b"frames"[..]));
                assert!(k.packet.open(43, b"hdr", &sealed).is_none());
                assert!(k.packet.open(42, b"hdX", &sealed).is_none());
                let other = k.next_generation().unwrap();
                assert!(other.packet.open(42, b"hdr", &sealed).is_none());
                assert_eq!(other.hp.mask(&[3; 16]), k.hp.mask(&[3; 16]));
            }
            assert!(DirectionKeys::new(suite, 1, &[0u8; 20]).is_none(), "secret length is the hash's");
        }
        assert_eq!(CipherSuite::from_tls(0x1303), Some(CipherSuite::ChaCha20Poly1305Sha256));
        assert_eq!(CipherSuite::from_tls(0x1304), None);
    }
}

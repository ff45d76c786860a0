//! Opening one connection's Handshake and 1-RTT packets with the secrets of a key log
//! (RFC 9001 §5; key updates §6), both directions.
//!
//! Packet numbers are recovered against the largest opened in the same space and direction
//! (RFC 9000 A.3). A 1-RTT packet whose key phase bit differs from the current phase is opened
//! with the next generation's keys ("quic ku") when its number is past the first packet of the
//! current phase, else with the previous generation's (a packet reordered across the update);
//! the other is tried if the first fails. Header protection keys never change.

use super::app_frames::{parse_app_frames, AppFrames};
use super::header::{LongHeader, PacketType, ShortHeader};
use super::initial::decode_packet_number;
use super::keylog::ConnectionSecrets;
use super::protection::{CipherSuite, DirectionKeys, HeaderProtection};
use super::QuicError;

/// The packet number space of an opened packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Space {
    Handshake,
    Application,
}

/// One opened Handshake or 1-RTT packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedPacket {
    pub space: Space,
    pub packet_number: u64,
    pub pn_len: usize,
    /// The key phase bit (1-RTT only).
    pub key_phase: Option<bool>,
    /// This packet started a new key generation (the peer updated its keys).
    pub key_update: bool,
    pub payload: Vec<u8>,
    pub frames: AppFrames,
}

/// A packet with header protection removed: the header as authenticated data, the packet
/// number as sent, and where the payload starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unprotected {
    pub header: Vec<u8>,
    pub truncated_pn: u64,
    pub pn_len: usize,
}

/// Remove header protection (RFC 9001 §5.4): `long` masks the first byte's low four bits, a
/// short header its low five.
pub fn remove_header_protection(
    hp: &HeaderProtection,
    pkt: &[u8],
    pn_offset: usize,
    long: bool,
) -> Result<Unprotected, QuicError> {
    let sample: &[u8; 16] =
        pkt.get(pn_offset + 4..pn_offset + 20).and_then(|s| s.try_into().ok()).ok_or(QuicError::TooShort)?;
    let mask = hp.mask(sample);
    let first = pkt[0] ^ (mask[0] & if long { 0x0f } else { 0x1f });
    let pn_len = usize::from(first & 0x03) + 1;
    // pkt.len() >= pn_offset + 20: the packet number and a 16-byte tag fit.
    let mut header = pkt[..pn_offset + pn_len].to_vec();
    header[0] = first;
    let mut truncated_pn = 0u64;
    for i in 0..pn_len {
        header[pn_offset + i] ^= mask[1 + i];
        truncated_pn = (truncated_pn << 8) | u64::from(header[pn_offset + i]);
    }
    Ok(Unprotected { header, truncated_pn, pn_len })
}

/// Protect a short header packet (for tests, fuzz seeds and synthetic captures).
pub fn protect_short(
    keys: &DirectionKeys,
    dcid: &[u8],
    pn: u64,
    pn_len: usize,
    key_phase: bool,
    payload: &[u8],
) -> Vec<u8> {
    assert!((1..=4).contains(&pn_len));
    let mut header = vec![0x40 | if key_phase { 0x04 } else { 0 } | (pn_len as u8 - 1)];
    header.extend_from_slice(dcid);
    header.extend_from_slice(&pn.to_be_bytes()[8 - pn_len..]);
    let mut pkt = header.clone();
    pkt.extend(keys.packet.seal(pn, &header, payload));
    let pn_offset = 1 + dcid.len();
    let sample: [u8; 16] = pkt[pn_offset + 4..pn_offset + 20].try_into().expect("payload of at least 4 bytes");
    let mask = keys.hp.mask(&sample);
    pkt[0] ^= mask[0] & 0x1f;
    for i in 0..pn_len {
        pkt[pn_offset + i] ^= mask[1 + i];
    }
    pkt
}

#[derive(Clone, Debug)]
struct AppKeys {
    current: DirectionKeys,
    phase: bool,
    previous: Option<DirectionKeys>,
    next: Option<DirectionKeys>,
    /// First packet number opened with the current generation.
    current_since: Option<u64>,
}

impl AppKeys {
    fn new(k: DirectionKeys) -> Self {
        AppKeys { current: k, phase: false, previous: None, next: None, current_since: None }
    }
}

/// Opens the Handshake and 1-RTT packets of one connection. Index 0 of each pair is the
/// client's direction.
#[derive(Clone, Debug)]
pub struct KeyedDecryptor {
    pub suite: CipherSuite,
    version: u32,
    handshake: [Option<DirectionKeys>; 2],
    app: [Option<AppKeys>; 2],
    /// Largest packet number opened, [space][direction].
    largest: [[Option<u64>; 2]; 2],
    /// Key updates seen per direction.
    pub key_updates: [u32; 2],
}

fn dir(from_client: bool) -> usize {
    usize::from(!from_client)
}

impl KeyedDecryptor {
    /// Keys for the secrets known; `None` if none of them fits the suite.
    pub fn new(version: u32, suite: CipherSuite, s: &ConnectionSecrets) -> Option<KeyedDecryptor> {
        let k = |secret: &Option<Vec<u8>>| secret.as_deref().and_then(|x| DirectionKeys::new(suite, version, x));
        let d = KeyedDecryptor {
            suite,
            version,
            handshake: [k(&s.client_handshake), k(&s.server_handshake)],
            app: [k(&s.client_application).map(AppKeys::new), k(&s.server_application).map(AppKeys::new)],
            largest: [[None; 2]; 2],
            key_updates: [0; 2],
        };
        let any = d.handshake.iter().any(Option::is_some) || d.app.iter().any(Option::is_some);
        any.then_some(d)
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// Whether 1-RTT keys are known for both directions.
    pub fn has_application_keys(&self) -> bool {
        self.app.iter().all(Option::is_some)
    }

    /// Open a Handshake packet (its bytes only: [`super::PacketHeader::bytes`]).
    pub fn open_handshake(&mut self, packet: &[u8], from_client: bool) -> Result<OpenedPacket, QuicError> {
        let h = LongHeader::new_checked(packet)?;
        if h.packet_type() != PacketType::Handshake || h.version() != self.version {
            return Err(QuicError::Malformed("not a Handshake packet of the connection's version"));
        }
        if h.truncated() {
            return Err(QuicError::Truncated("packet (its Length runs past the bytes given)"));
        }
        let pn_offset = h.pn_offset().ok_or(QuicError::Malformed("no packet number"))?;
        let d = dir(from_client);
        let keys = self.handshake[d].as_ref().ok_or(QuicError::DecryptFailed)?;
        let pkt = h.packet();
        let u = remove_header_protection(&keys.hp, pkt, pn_offset, true)?;
        let pn = decode_packet_number(self.largest[0][d], u.truncated_pn, 8 * u.pn_len as u32);
        let payload = keys.packet.open(pn, &u.header, &pkt[u.header.len()..]).ok_or(QuicError::DecryptFailed)?;
        self.note_largest(0, d, pn);
        Ok(OpenedPacket {
            space: Space::Handshake,
            packet_number: pn,
            pn_len: u.pn_len,
            key_phase: None,
            key_update: false,
            frames: parse_app_frames(&payload),
            payload,
        })
    }

    /// Open a 1-RTT packet: `packet` runs to the end of the datagram; `dcid_len` is the length
    /// of the connection ID the receiver chose.
    pub fn open_short(&mut self, packet: &[u8], dcid_len: usize, from_client: bool) -> Result<OpenedPacket, QuicError> {
        let h = ShortHeader::new_checked(packet, dcid_len)?;
        let d = dir(from_client);
        let largest = self.largest[1][d];
        let keys = self.app[d].as_mut().ok_or(QuicError::DecryptFailed)?;
        let pkt = h.packet();
        let u = remove_header_protection(&keys.current.hp, pkt, h.pn_offset(), false)?;
        let phase = u.header[0] & 0x04 != 0;
        let pn = decode_packet_number(largest, u.truncated_pn, 8 * u.pn_len as u32);
        let body = &pkt[u.header.len()..];
        let mut key_update = false;
        let payload = if phase == keys.phase {
            keys.current.packet.open(pn, &u.header, body)
        } else {
            let old_first = keys.previous.is_some() && keys.current_since.is_none_or(|f| pn < f);
            let try_prev = |k: &AppKeys| k.previous.as_ref().and_then(|p| p.packet.open(pn, &u.header, body));
            let mut got = if old_first { try_prev(keys) } else { None };
            if got.is_none() {
                if keys.next.is_none() {
                    keys.next = keys.current.next_generation();
                }
                got = keys.next.as_ref().and_then(|n| n.packet.open(pn, &u.header, body));
                if got.is_some() {
                    let next = keys.next.take().expect("just opened with it");
                    keys.previous = Some(std::mem::replace(&mut keys.current, next));
                    keys.phase = phase;
                    keys.current_since = Some(pn);
                    key_update = true;
                    self.key_updates[d] += 1;
                } else if !old_first {
                    got = try_prev(keys);
                }
            }
            got
        }
        .ok_or(QuicError::DecryptFailed)?;
        if keys.current_since.is_none() && phase == keys.phase {
            keys.current_since = Some(pn);
        }
        self.note_largest(1, d, pn);
        Ok(OpenedPacket {
            space: Space::Application,
            packet_number: pn,
            pn_len: u.pn_len,
            key_phase: Some(phase),
            key_update,
            frames: parse_app_frames(&payload),
            payload,
        })
    }

    fn note_largest(&mut self, space: usize, d: usize, pn: u64) {
        let l = &mut self.largest[space][d];
        *l = Some(l.map_or(pn, |x| x.max(pn)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    const A5_SECRET: &str = "9ac312a7f877468ebe69422748ad00a15443f18203a07d6060f688f30f21632b";

    /// RFC 9001 A.5: header protection removed, the packet number recovered, PING inside.
    #[test]
    fn rfc9001_a5_short_header() {
        let keys = DirectionKeys::new(CipherSuite::ChaCha20Poly1305Sha256, 1, &hex(A5_SECRET)).unwrap();
        let pkt = hex("4cfe4189655e5cd55c41f69080575d7999c25a5bfb");
        let u = remove_header_protection(&keys.hp, &pkt, 1, false).unwrap();
        assert_eq!(u.header, hex("4200bff4"));
        assert_eq!(u.pn_len, 3);
        let pn = decode_packet_number(Some(654_360_563), u.truncated_pn, 24);
        assert_eq!(pn, 654_360_564);
        assert_eq!(keys.packet.open(pn, &u.header, &pkt[4..]), Some(vec![0x01]));
        assert_eq!(protect_short(&keys, &[], pn, 3, false, &[0x01]), pkt);
    }

    fn secrets(len: usize) -> ConnectionSecrets {
        ConnectionSecrets {
            client_handshake: Some(vec![1; len]),
            server_handshake: Some(vec![2; len]),
            client_application: Some(vec![3; len]),
            server_application: Some(vec![4; len]),
        }
    }

    #[test]
    fn round_trip_every_suite_with_packet_numbers_and_key_updates() {
        let dcid = [9u8; 8];
        for (suite, len) in [
            (CipherSuite::Aes128GcmSha256, 32),
            (CipherSuite::Aes256GcmSha384, 48),
            (CipherSuite::ChaCha20Poly1305Sha256, 32),
        ] {
            for version in [1, super::super::version::V2] {
                let s = secrets(len);
                let gen0 = DirectionKeys::new(suite, version, s.server_application.as_deref().unwrap()).unwrap();
                let gen1 = gen0.next_generation().unwrap();
                let mut dec = KeyedDecryptor::new(version, suite, &s).unwrap();
                let frames = [0x01u8, 0x00, 0x00, 0x00];
                // 1-byte numbers across a wrap (250..=260), then a key update at 300 with a
                // packet of the old phase reordered behind it.
                let mut sent: Vec<(u64, bool, &DirectionKeys)> = (250..=260).map(|pn| (pn, false, &gen0)).collect();
                sent.extend([(300, true, &gen1), (299, false, &gen0), (301, true, &gen1)]);
                for (pn, phase, k) in sent {
                    let pkt = protect_short(k, &dcid, pn, 1, phase, &frames);
                    let o =
                        dec.open_short(&pkt, dcid.len(), false).unwrap_or_else(|e| panic!("{suite:?} pn {pn}: {e}"));
                    assert_eq!(o.packet_number, pn);
                    assert_eq!(o.key_update, pn == 300);
                    assert!(o.frames.ping && o.frames.ack_eliciting);
                }
                assert_eq!(dec.key_updates, [0, 1]);
                // The client's keys do not open the server's packets.
                let pkt = protect_short(&gen1, &dcid, 302, 2, true, &frames);
                assert!(dec.open_short(&pkt, dcid.len(), true).is_err());
            }
        }
    }

    #[test]
    fn no_keys_no_decryptor() {
        assert!(KeyedDecryptor::new(1, CipherSuite::Aes128GcmSha256, &ConnectionSecrets::default()).is_none());
        // A 48-byte secret does not fit a SHA-256 suite.
        assert!(KeyedDecryptor::new(1, CipherSuite::Aes128GcmSha256, &secrets(48)).is_none());
    }
}

//! QUIC on the wire: `parse_datagram` over a UDP payload, then what a flow does with it —
//! `InitialDecryptor::open` on every Initial, `verify_retry` / `on_retry` on a Retry, the CRYPTO
//! stream through `CryptoReassembler`, and `handshake_messages` / `parse_client_hello` on it.
//!
//! Random bytes almost never authenticate, so half the inputs are *sealed* first: the fuzzer
//! picks the version, connection ID, packet number and the plaintext frames, the target protects
//! them exactly as a client or server would (RFC 9001 §5), and the decryptor must open them
//! again. That reaches the frame parser, the reassembler and the ClientHello parser with
//! fuzzer-controlled plaintext, and checks decryption against an independent sealer.
//!
//! Input: byte 0 bit 7 selects the mode.
//!   raw:    [mode|dir|short_dcid_len, datagram...]
//!   sealed: [mode, version, dcid_len, pn_len|dir, pn(4), dcid..., plaintext...]
#![no_main]

use aes::cipher::BlockEncrypt;
use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce};
use libfuzzer_sys::fuzz_target;
use tailscope_parsers::quic::{
    self, initial_secrets, packet_key_material, verify_retry, CryptoReassembler, InitialDecryptor,
    PacketType,
};

/// Versions whose Initials the decryptor can open (one per salt and label set, plus a greased
/// version, which is opened with draft-29's or v1's keys).
const SEAL_VERSIONS: [u32; 9] = [
    0x0000_0001, // v1
    0x6b33_43cf, // v2
    0xff00_001d, // draft-29
    0xff00_0017, // draft-23
    0xff00_0016, // draft-22
    0xface_b002, // mvfst-draft-27
    0x5130_3530, // gQUIC Q050 (gQUIC frames)
    0x5430_3531, // gQUIC T051
    0x1a2a_3a4a, // grease
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    if mode & 0x80 == 0 {
        raw(rest, mode & 0x40 != 0, usize::from(mode & 0x3f) % 21);
    } else {
        sealed(rest);
    }
});

/// What a flow does with one datagram.
fn raw(payload: &[u8], from_client: bool, short_dcid_len: usize) {
    let dg = quic::parse_datagram(payload, short_dcid_len);
    // Every byte is in a packet or counted as trailing.
    let in_packets: usize = dg.packets.iter().map(|p| p.bytes.len()).sum();
    assert_eq!(in_packets + dg.trailing, payload.len(), "bytes lost: {dg:?}");
    assert_eq!(quic::packets(payload, short_dcid_len).filter_map(Result::ok).count(), dg.packets.len());
    let mut dec: Option<InitialDecryptor> = None;
    let mut streams = [CryptoReassembler::default(), CryptoReassembler::default()];
    for p in &dg.packets {
        let _ = p.version_kind().map(|v| v.label());
        let _ = p.supported_versions().count();
        match p.ty {
            PacketType::Initial => {
                if dec.as_ref().is_none_or(|d| d.version() != p.version) {
                    dec = InitialDecryptor::new(p.version, p.dcid).ok();
                }
                let Some(d) = dec.as_mut() else { continue };
                for dir in [from_client, !from_client] {
                    if let Ok(open) = d.open(p.bytes, dir) {
                        feed(&mut streams[usize::from(dir)], &open);
                    }
                }
            }
            PacketType::Retry => {
                let _ = verify_retry(p.bytes, p.dcid);
                if let Some(d) = dec.as_mut() {
                    let _ = verify_retry(p.bytes, d.current_dcid());
                    let _ = d.on_retry(p.scid);
                }
            }
            _ => {}
        }
    }
    // The same bytes as plaintext: frames, CRYPTO stream, ClientHello.
    let frames = quic::frames::parse_frames(payload);
    for c in &frames.crypto {
        assert!(c.start + c.len <= payload.len());
        streams[0].insert(c.offset, &payload[c.start..c.start + c.len]);
    }
    check_stream(&streams[0]);
    let _ = quic::parse_client_hello(payload);
    for m in quic::handshake_messages(payload) {
        let _ = quic::parse_client_hello(m.bytes);
    }
}

fn feed(stream: &mut CryptoReassembler, open: &quic::DecryptedInitial) {
    for (off, data) in open.crypto_data() {
        stream.insert(off, data);
    }
    check_stream(stream);
    for m in quic::handshake_messages(stream.contiguous()) {
        if m.msg_type == 1 {
            let _ = quic::parse_client_hello(m.bytes);
        }
    }
}

fn check_stream(s: &CryptoReassembler) {
    assert!(s.contiguous().len() <= quic::frames::DEFAULT_CRYPTO_LIMIT);
    assert!(s.pending_bytes() <= quic::frames::DEFAULT_CRYPTO_LIMIT);
}

/// Protect fuzzer-chosen frames as an Initial packet; the decryptor must open it.
fn sealed(data: &[u8]) {
    let [v, dcid_len, flags, pn @ ..] = data else { return };
    let Some((pn, rest)) = pn.split_first_chunk::<4>() else { return };
    let version = SEAL_VERSIONS[usize::from(*v) % SEAL_VERSIONS.len()];
    let dcid_len = usize::from(*dcid_len) % 21;
    let pn_len = usize::from(flags & 0x03) + 1;
    let from_client = flags & 0x04 != 0;
    let Some((dcid, plaintext)) = rest.split_at_checked(dcid_len) else { return };
    let mut plaintext = plaintext[..plaintext.len().min(4000)].to_vec();
    // The header protection sample needs 4 bytes after the packet number's start.
    plaintext.resize(plaintext.len().max(4), 0);
    let pn_bytes = &pn[4 - pn_len..];
    let pn_value = pn_bytes.iter().fold(0u64, |n, b| n << 8 | u64::from(*b));

    // A greased version's Initials are protected with draft-29's keys here (the decryptor also
    // tries v1's).
    let key_version = if version == 0x1a2a_3a4a { 0xff00_001d } else { version };
    let secrets = initial_secrets(key_version, dcid).expect("keys for a sealable version");
    let secret = if from_client { &secrets.client } else { &secrets.server };
    let km = packet_key_material(key_version, secret).expect("key material");

    let initial_type: u8 = if version == 0x6b33_43cf { 0b01 } else { 0b00 };
    let mut pkt = vec![0xc0 | initial_type << 4 | (pn_len as u8 - 1)];
    pkt.extend_from_slice(&version.to_be_bytes());
    pkt.push(dcid_len as u8);
    pkt.extend_from_slice(dcid);
    pkt.push(0); // SCID length
    pkt.push(0); // token length
    let length = pn_len + plaintext.len() + 16;
    pkt.extend_from_slice(&(0x4000 | length as u16).to_be_bytes());
    let pn_offset = pkt.len();
    pkt.extend_from_slice(pn_bytes);

    let aead = Aes128Gcm::new(&km.key.into());
    let mut nonce = km.iv;
    for (i, b) in pn_value.to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let mut body = plaintext.clone();
    let tag = aead
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), &pkt, &mut body)
        .expect("seal");
    pkt.extend_from_slice(&body);
    pkt.extend_from_slice(&tag);
    let mut block = [0u8; 16];
    block.copy_from_slice(&pkt[pn_offset + 4..pn_offset + 20]);
    let mut b = block.into();
    aes::Aes128::new(&km.hp.into()).encrypt_block(&mut b);
    let mask: [u8; 16] = b.into();
    pkt[0] ^= mask[0] & 0x0f;
    for i in 0..pn_len {
        pkt[pn_offset + i] ^= mask[1 + i];
    }

    let dg = quic::parse_datagram(&pkt, 0);
    assert_eq!(dg.packets.len(), 1, "sealed packet not parsed: {dg:?}");
    let p = &dg.packets[0];
    assert_eq!((p.ty, p.version, p.dcid), (PacketType::Initial, version, dcid));
    let mut dec = InitialDecryptor::new(version, dcid).expect("decryptor for a sealable version");
    let open = dec.open(p.bytes, from_client).expect("a correctly sealed Initial opens");
    assert_eq!(open.plaintext, plaintext);
    assert_eq!(open.packet_number, pn_value);
    assert_eq!(open.pn_len, pn_len);
    for c in &open.frames.crypto {
        assert!(c.start + c.len <= plaintext.len());
    }
    let mut stream = CryptoReassembler::default();
    feed(&mut stream, &open);
    // The other direction's keys must not open it.
    assert!(dec.open(p.bytes, !from_client).is_err());
}

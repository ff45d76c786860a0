//! QUIC flows seen passively: versions, connection IDs, SNI/ALPN from the decrypted Initials,
//! Initial retransmissions (the QUIC analog of SYN loss), handshake RTT and outcome, spin-bit
//! RTT, Retry and Version Negotiation. Definitions: docs/signatures.md#quic.

use tailscope_parsers::quic::{
    self, gquic, handshake_messages, parse_client_hello, verify_retry, CryptoReassembler, Form, InitialDecryptor,
    PacketType, RetryCheck, Version,
};

use crate::quic_queries::InferredQueries;
use crate::rtt::Samples;
use crate::tags;

/// Short-header packets needed before a spin bit that never flips is called disabled.
const SPIN_MIN_PACKETS: u64 = 10;
/// Copies of the server's first flight remembered (`QuicState::server_hellos`): the first and its
/// early repeats are what a client's first ACK can cover.
const MAX_HELLO_COPIES: usize = 8;

/// Is this UDP payload the start of a QUIC connection (a long header of a known version, or a
/// Google QUIC Q035–Q043 client packet naming its version)?
pub fn looks_like_quic(payload: &[u8]) -> bool {
    if payload.len() < 7 {
        return false;
    }
    if payload[0] & 0x80 == 0 {
        return gquic::parse_versioned(payload).is_some();
    }
    let v = u32::from_be_bytes([payload[1], payload[2], payload[3], payload[4]]);
    !matches!(Version::classify(v), Version::Unknown(_))
}

#[derive(Debug, Clone, Default)]
struct Spin {
    last: Option<bool>,
    last_edge_ns: Option<i64>,
    flips: u64,
    short_packets: u64,
}

#[derive(Debug, Clone, Default)]
pub struct QuicState {
    pub version: Option<u32>,
    pub ocid: Vec<u8>,
    /// SCIDs each side put in its long headers: the DCID length of packets sent to it.
    pub scid: [Vec<u8>; 2],
    dec: Option<InitialDecryptor>,
    client_crypto: CryptoReassembler,
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    /// A complete ClientHello was read (it may carry no SNI, e.g. DNS over QUIC).
    pub hello: bool,
    pub initial_packets: [u64; 2],
    pub handshake_packets: [u64; 2],
    pub one_rtt_packets: [u64; 2],
    pub zero_rtt_packets: u64,
    /// Initials re-sending CRYPTO data from offset 0 (the ClientHello / ServerHello again).
    pub initial_retx: [u32; 2],
    first_hello_ns: [Option<i64>; 2],
    last_hello_ns: [Option<i64>; 2],
    /// First ClientHello to its latest repeat while the server had not answered: it becomes
    /// `initial_loss_delay_ns` when the server answers (an attempt nobody answered - UDP
    /// blocked - is no Initial loss, it is `no_server_reply`).
    pending_loss_ns: Option<i64>,
    /// The server sent an Initial, Retry or Version Negotiation since the client's first flight.
    server_answered: bool,
    /// First ClientHello to the repeat the server answered (0 when none).
    pub initial_loss_delay_ns: i64,
    first_client_handshake_ns: Option<i64>,
    /// The server's first flight (Initials carrying its ServerHello: CRYPTO from offset 0), each
    /// copy's packet number and time (the first `MAX_HELLO_COPIES`).
    server_hellos: Vec<(u64, i64)>,
    /// What the client's first acknowledgement of the server's Initials covered of that first
    /// flight: the earliest copy's time, or None (none of them); unset until that ACK is read.
    hello_acked: Option<Option<i64>>,
    pub handshake_rtt_ns: Option<i64>,
    pub retry: bool,
    pub retry_valid: Option<bool>,
    pub version_negotiation: bool,
    vn_after: bool,
    spin: [Spin; 2],
    pub spin_rtt: Samples,
    pub migrations: u32,
    /// With a key log: Handshake and 1-RTT packets opened and analysed (crate::quic_keyed).
    pub keyed: Option<Box<crate::quic_keyed::KeyedQuic>>,
    /// Without keys for this connection: queries inferred from packet sizes and times.
    pub inferred: InferredQueries,
}

/// A long-header packet cut by the snaplen whose Length ends before the datagram does: another
/// packet follows it in the datagram, unseen (RFC 9000 §12.2 coalescing).
fn hides_a_coalesced_packet(p: &quic::PacketHeader<'_>, wire_len: u32) -> bool {
    let end = p.pn_offset.zip(p.length).and_then(|(pn, len)| usize::try_from(len).ok()?.checked_add(p.offset + pn));
    p.truncated && end.is_some_and(|e| e < wire_len as usize)
}

impl QuicState {
    /// One UDP datagram of this flow; `dir` 0 is client to server; `wire_len` its payload's
    /// length on the wire (`payload` may be cut by the snaplen). Returns packet tags.
    pub fn observe(&mut self, dir: usize, ts_ns: i64, payload: &[u8], wire_len: u32) -> u32 {
        let legacy = match self.version {
            Some(v) => gquic::is_legacy_version(v),
            None => gquic::parse_versioned(payload).is_some(),
        };
        if legacy {
            self.legacy_gquic(dir, payload);
            return 0;
        }
        let mut mask = 0;
        // Packets to a side carry the SCID that side chose as their DCID.
        let short_len = self.scid[1 - dir].len();
        // The packets one at a time, as `parse_datagram` would list them (it stops at the first
        // that does not parse), without its Vec: an allocation per datagram was ~1% of the mix
        // trace's native loop (a fifth of its packets are QUIC).
        for p in quic::packets(payload, short_len) {
            let Ok(p) = &p else { break };
            if p.form == Form::Long && p.ty != PacketType::VersionNegotiation {
                self.version.get_or_insert(p.version);
                if self.scid[dir].is_empty() && !p.scid.is_empty() {
                    self.scid[dir] = p.scid.to_vec();
                }
            }
            if dir == 1 && matches!(p.ty, PacketType::Initial | PacketType::Retry | PacketType::VersionNegotiation) {
                self.server_answer();
            }
            match p.ty {
                PacketType::Initial => {
                    self.inferred.long_header(dir, ts_ns, false);
                    if dir == 1 {
                        self.inferred.server_initial_datagram(ts_ns, wire_len);
                    }
                    self.initial_packets[dir] += 1;
                    if self.version_negotiation && dir == 0 {
                        self.vn_after = true;
                    }
                    mask |= self.initial(dir, ts_ns, p);
                    if dir == 0 && self.server_answered && hides_a_coalesced_packet(p, wire_len) {
                        // The client's answer to the server's flight: its Initial ACK, then its
                        // Handshake packet (the Finished) beyond the snaplen (quic-go pads the
                        // Initial: at snaplen 256 only its header shows). The Handshake packet is
                        // there, so the client has its keys now, not at its next 1-RTT packet a
                        // round trip later (two-stack lab stack0005_clean: 295 ms on a 145 ms path).
                        self.inferred.long_header(0, ts_ns, true);
                        self.inferred.finished_cut(ts_ns);
                        self.client_handshake(ts_ns);
                    }
                }
                PacketType::Handshake => {
                    self.inferred.long_header(dir, ts_ns, true);
                    self.handshake_packets[dir] += 1;
                    mask |= self.keyed_packet(dir, ts_ns, p, short_len);
                    if dir == 0 {
                        self.client_handshake(ts_ns);
                    }
                }
                PacketType::ZeroRtt => {
                    self.zero_rtt_packets += 1;
                    // 0-RTT carries requests too: its payload (Length) as if in a short header
                    if let (Some(len), 0) = (p.length, dir) {
                        self.infer(dir, ts_ns, (len as u32).saturating_add(1 + p.dcid.len() as u32), p.dcid.len());
                    }
                }
                PacketType::OneRtt => {
                    self.one_rtt_packets[dir] += 1;
                    self.infer(dir, ts_ns, wire_len.saturating_sub(p.offset as u32), short_len);
                    mask |= self.keyed_packet(dir, ts_ns, p, short_len);
                    if dir == 0 {
                        self.client_handshake(ts_ns);
                    }
                    if let Some(bit) = p.spin {
                        self.spin_bit(dir, ts_ns, bit);
                    }
                }
                PacketType::Retry => {
                    self.retry = true;
                    if let Some(dec) = self.dec.as_mut() {
                        let ok = matches!(verify_retry(p.bytes, dec.current_dcid()), Ok(RetryCheck::Valid));
                        self.retry_valid = Some(ok);
                        if ok && dec.on_retry(p.scid).is_ok() {
                            self.client_crypto = CryptoReassembler::default();
                        }
                    }
                }
                PacketType::VersionNegotiation => self.version_negotiation = true,
                PacketType::Unknown => {}
            }
        }
        mask
    }

    /// A 1-RTT (or 0-RTT) packet for the query inference, unless the key log opens this
    /// connection (its streams are then read: crate::quic_keyed).
    fn infer(&mut self, dir: usize, ts_ns: i64, len: u32, dcid_len: usize) {
        if self.decrypting().is_none() {
            let rtt = self.inferred.rtt_ns(self.handshake_rtt_ns);
            self.inferred.one_rtt(dir, ts_ns, len, dcid_len, rtt);
        }
    }

    /// The flow ended: its open inferred query is finished.
    pub fn finish(&mut self) {
        let rtt = self.inferred.rtt_ns(self.handshake_rtt_ns);
        self.inferred.close(rtt);
    }

    /// The datagram's outcome for its packets row and events: the keyed analysis', and a stall
    /// of an inferred response.
    pub fn take_outcome(&mut self) -> Option<crate::quic_keyed::Outcome> {
        let mut out = self.keyed.as_mut().map(|k| k.take_outcome());
        if let Some(s) = self.inferred.stall.take() {
            out.get_or_insert_with(Default::default).events.push(crate::quic_keyed::KeyedEvent {
                c2s: false,
                signature: "quic_pto_stall",
                cause: Some("inferred"),
                delay_ns: Some(s.delay_ns),
                pn: None,
            });
        }
        out
    }

    /// The queries this connection's inference finished (with a key log: none, see `infer`).
    pub fn inferred_queries(&self) -> &[crate::queries::Query] {
        &self.inferred.ready
    }

    /// A Google QUIC Q035–Q043 packet: none of the IETF header layouts applies (reading one as a
    /// short header would invent spin bits and 1-RTT packets); the version and the CHLO's SNI are
    /// what these versions show in the clear.
    fn legacy_gquic(&mut self, dir: usize, payload: &[u8]) {
        if dir != 0 {
            return;
        }
        if let Some(h) = gquic::parse_versioned(payload) {
            self.version.get_or_insert(h.version);
            if !self.hello {
                if let Some(sni) = gquic::client_hello_sni(payload) {
                    self.sni = Some(sni);
                    self.hello = true;
                }
            }
        }
    }

    /// The server answered the client's first flight: a ClientHello repeated before this was
    /// lost (or not answered) and its repeat got through - Initial loss, like SYN loss.
    fn server_answer(&mut self) {
        if !self.server_answered {
            self.server_answered = true;
            if let Some(d) = self.pending_loss_ns.take() {
                self.initial_loss_delay_ns = d;
            }
        }
    }

    fn initial(&mut self, dir: usize, ts_ns: i64, p: &quic::PacketHeader<'_>) -> u32 {
        if dir == 0 {
            let fresh = self.dec.as_ref().is_none_or(|d| d.version() != p.version);
            if fresh {
                if self.dec.is_some() {
                    // A new version (after Version Negotiation): the handshake starts again and
                    // this first flight is no retransmission of the old version's.
                    self.first_hello_ns[0] = None;
                    self.last_hello_ns[0] = None;
                    self.pending_loss_ns = None;
                    self.server_answered = false;
                }
                self.dec = InitialDecryptor::new(p.version, p.dcid).ok();
                self.client_crypto = CryptoReassembler::default();
                if self.ocid.is_empty() {
                    self.ocid = p.dcid.to_vec();
                }
            }
        }
        let Some(dec) = self.dec.as_mut() else { return 0 };
        let Ok(open) = dec.open(p.bytes, dir == 0) else { return 0 };
        if open.rekeyed && dir == 0 {
            self.client_crypto = CryptoReassembler::default();
        }
        let mut mask = 0;
        let hello = open.crypto_data().any(|(off, _)| off == 0);
        if hello && dir == 1 && self.server_hellos.len() < MAX_HELLO_COPIES {
            self.server_hellos.push((open.packet_number, ts_ns));
        }
        if dir == 0 && self.hello_acked.is_none() && !self.server_hellos.is_empty() {
            if let Some(ack) = open.frames.acks.first() {
                let covered = |pn: u64| ack.ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&pn));
                self.hello_acked = Some(self.server_hellos.iter().filter(|c| covered(c.0)).map(|c| c.1).min());
            }
        }
        if hello {
            match self.first_hello_ns[dir] {
                // The client's first flight with the keys a Retry asked for: the handshake
                // starts again (as after Version Negotiation, see above).
                Some(_) if open.rekeyed => {
                    if dir == 0 {
                        self.first_hello_ns[0] = Some(ts_ns);
                        self.pending_loss_ns = None;
                        self.server_answered = false;
                    }
                }
                // The first flight again: its first copy (or our answer to it) was lost.
                Some(first) => {
                    self.initial_retx[dir] += 1;
                    mask |= tags::QUIC_INITIAL_RETRANSMISSION;
                    if dir == 0 && !self.server_answered {
                        self.pending_loss_ns = Some(ts_ns - first);
                    }
                }
                None => self.first_hello_ns[dir] = Some(ts_ns),
            }
            self.last_hello_ns[dir] = Some(ts_ns);
        }
        if let Some(k) = self.keyed.as_mut() {
            k.on_initial(dir, ts_ns, p.version, &open);
        }
        if dir == 0 {
            for (off, data) in open.crypto_data() {
                self.client_crypto.insert(off, data);
            }
            if !self.hello {
                if let Some(h) = handshake_messages(self.client_crypto.contiguous())
                    .filter(|m| m.msg_type == 1 && m.complete)
                    .find_map(|m| parse_client_hello(m.bytes))
                {
                    self.hello = true;
                    self.sni = h.sni;
                    self.alpn = h.alpn;
                }
            }
        }
        mask
    }

    fn keyed_packet(&mut self, dir: usize, ts_ns: i64, p: &quic::PacketHeader<'_>, short_len: usize) -> u32 {
        self.keyed.as_mut().map_or(0, |k| k.on_packet(dir, ts_ns, p, short_len))
    }

    /// RFC 9312 §4.8.1 as a server-side capture sees it: the server's (last) Initial to the
    /// client's first Handshake (or 1-RTT) packet.
    /// The server's Initial is the copy of its first flight the client acknowledged first, when
    /// the Initials were read: a repeat the server's timer sent before that ACK could arrive
    /// (quic-go's first timeout is ~200 ms: on a 200 ms path it fires every time) is not what the
    /// client answered, and measuring from it gave ~0.5-25 ms (issue 32).
    fn client_handshake(&mut self, ts_ns: i64) {
        if self.first_client_handshake_ns.is_none() {
            self.first_client_handshake_ns = Some(ts_ns);
            let acked = self.hello_acked.flatten();
            if let Some(s) = acked.or(self.last_hello_ns[1]) {
                self.handshake_rtt_ns = Some(ts_ns - s);
            }
        }
    }

    /// The server re-sent its first flight and the client needed it: the client's first
    /// acknowledgement did not cover the first copy (or could not be read). A repeat sent before
    /// the client's ACK of the first copy arrived is the server's timer firing early (quic-go on a
    /// path of 200 ms and more), not a loss.
    pub fn server_initial_loss(&self) -> bool {
        let first_delivered = self.hello_acked.flatten().is_some_and(|t| Some(t) == self.first_hello_ns[1]);
        self.initial_retx[1] > 0 && !first_delivered
    }

    fn spin_bit(&mut self, dir: usize, ts_ns: i64, bit: bool) {
        let s = &mut self.spin[dir];
        s.short_packets += 1;
        if s.last.is_some_and(|b| b != bit) {
            s.flips += 1;
            if let Some(edge) = s.last_edge_ns {
                let sample = ts_ns - edge;
                // Edge filter: a flip sooner than half the handshake RTT is reordering or a
                // greased bit, not a round trip.
                if self.handshake_rtt_ns.is_none_or(|h| sample.saturating_mul(2) >= h) {
                    self.spin_rtt.add(sample);
                }
            }
            s.last_edge_ns = Some(ts_ns);
        }
        s.last = Some(bit);
    }

    pub fn version_label(&self) -> Option<String> {
        self.version.map(|v| Version::classify(v).label())
    }

    /// The spin bit's behaviour: `active` (it spins at about the RTT), `disabled` (never
    /// flips), `greased` (flips far more often than a round trip), `unknown` (too few packets).
    pub fn spin_state(&self) -> &'static str {
        let short: u64 = self.spin.iter().map(|s| s.short_packets).sum();
        let flips: u64 = self.spin.iter().map(|s| s.flips).sum();
        if short < SPIN_MIN_PACKETS {
            "unknown"
        } else if flips == 0 {
            "disabled"
        } else if flips * 2 > short && self.spin_rtt.count() < flips / 4 {
            "greased"
        } else {
            "active"
        }
    }

    /// How the handshake ended, as far as the capture shows.
    pub fn handshake_outcome(&self, server_packets: u64) -> &'static str {
        if self.first_client_handshake_ns.is_some() {
            "complete"
        } else if server_packets == 0 {
            "no_server_reply"
        } else if self.version_negotiation && !self.vn_after {
            "version_negotiation_failed"
        } else if self.initial_packets[1] + self.handshake_packets[1] > 0 {
            "no_client_handshake"
        } else {
            "incomplete"
        }
    }
}

/// SNI and ALPN of a TLS ClientHello at the start of a TCP stream (first segment only).
pub fn tls_client_hello(payload: &[u8]) -> Option<(Option<String>, Vec<String>)> {
    // Record header: content type 22 (handshake), version 3.x, length.
    if payload.len() < 9 || payload[0] != 0x16 || payload[1] != 0x03 {
        return None;
    }
    let h = handshake_messages(&payload[5..]).find(|m| m.msg_type == 1).and_then(|m| parse_client_hello(m.bytes))?;
    Some((h.sni, h.alpn))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tailscope_parsers::quic::{initial_secrets, packet_key_material};

    const V1: u32 = 1;
    const V2: u32 = 0x6b33_43cf;
    const MS: i64 = 1_000_000;

    /// A client Initial protected with `version`'s keys (RFC 9001 §5) carrying `frames`.
    fn client_initial(version: u32, dcid: &[u8], pn: u64, frames: &[u8]) -> Vec<u8> {
        use aes::cipher::{BlockEncrypt, KeyInit};
        use aes_gcm::aead::AeadInPlace;
        let s = initial_secrets(version, dcid).unwrap();
        let m = packet_key_material(version, &s.client).unwrap();
        let mut payload = frames.to_vec();
        payload.resize(1162, 0);
        let len = 4 + payload.len() + 16;
        // Initial's long-header type bits: 0b00 in v1, 0b01 in v2 (RFC 9369 §3.2).
        let ty = if version == V2 { 0x10 } else { 0x00 };
        let mut p = vec![0xc0u8 | ty | 3];
        p.extend(version.to_be_bytes());
        p.push(dcid.len() as u8);
        p.extend(dcid);
        p.extend([0, 0]); // SCID, token: empty
        p.extend((0x4000u16 | len as u16).to_be_bytes());
        let pn_offset = p.len();
        p.extend((pn as u32).to_be_bytes());
        let mut nonce = m.iv;
        for (i, b) in pn.to_be_bytes().iter().enumerate() {
            nonce[4 + i] ^= b;
        }
        let tag =
            aes_gcm::Aes128Gcm::new(&m.key.into()).encrypt_in_place_detached(&nonce.into(), &p, &mut payload).unwrap();
        p.extend(&payload);
        p.extend(tag.as_slice());
        let mut block = [0u8; 16];
        block.copy_from_slice(&p[pn_offset + 4..pn_offset + 20]);
        let mut block = block.into();
        aes::Aes128::new(&m.hp.into()).encrypt_block(&mut block);
        let mask: [u8; 16] = block.into();
        p[0] ^= mask[0] & 0x0f;
        for i in 0..4 {
            p[pn_offset + i] ^= mask[1 + i];
        }
        p
    }

    /// The ClientHello's CRYPTO frame (offset 0; its content does not matter here).
    fn hello(version: u32, dcid: &[u8], pn: u64) -> Vec<u8> {
        client_initial(version, dcid, pn, &[0x06, 0x00, 0x08, 1, 0, 0, 4, 3, 3, 0, 0])
    }

    /// A server Initial: the state reads its header only (it does not hold the server keys).
    fn server_initial(version: u32) -> Vec<u8> {
        client_initial(version, b"\x0a\x0b\x0c\x0d", 0, &[0x02, 0, 0, 0, 0])
    }

    fn version_negotiation(supported: u32) -> Vec<u8> {
        let mut p = vec![0x80u8, 0, 0, 0, 0, 4, 0x0a, 0x0b, 0x0c, 0x0d, 8];
        p.extend(b"\x83\x94\xc8\xf0\x3e\x51\x57\x08");
        p.extend(supported.to_be_bytes());
        p
    }

    const DCID: &[u8] = b"\x83\x94\xc8\xf0\x3e\x51\x57\x08";

    #[test]
    fn unanswered_attempt_is_no_initial_loss() {
        // UDP blocked beyond the capture: the client repeats its ClientHello, nobody answers.
        let mut q = QuicState::default();
        for (i, t) in [0, 1000, 3000].into_iter().enumerate() {
            q.observe(0, t * MS, &hello(V1, DCID, i as u64), 1200);
        }
        assert_eq!(q.initial_retx[0], 2);
        assert_eq!(q.initial_loss_delay_ns, 0);
        assert_eq!(q.handshake_outcome(0), "no_server_reply");
    }

    #[test]
    fn answered_repeat_is_initial_loss() {
        let mut q = QuicState::default();
        q.observe(0, 0, &hello(V1, DCID, 0), 1200);
        q.observe(0, 300 * MS, &hello(V1, DCID, 1), 1200);
        q.observe(0, 900 * MS, &hello(V1, DCID, 2), 1200);
        q.observe(1, 920 * MS, &server_initial(V1), 1200);
        // A repeat after the server's answer (the ServerHello was lost) changes nothing.
        q.observe(0, 1500 * MS, &hello(V1, DCID, 3), 1200);
        assert_eq!(q.initial_retx[0], 3);
        assert_eq!(q.initial_loss_delay_ns, 900 * MS);
    }

    #[test]
    fn version_negotiation_restarts_the_first_flight() {
        // v2 offered, server speaks v1 only: VN, then the client's v1 first flight.
        let mut q = QuicState::default();
        q.observe(0, 0, &hello(V2, DCID, 0), 1200);
        q.observe(1, 20 * MS, &version_negotiation(V1), 1200);
        q.observe(0, 45 * MS, &hello(V1, DCID, 0), 1200);
        q.observe(1, 65 * MS, &server_initial(V1), 1200);
        assert_eq!(q.initial_retx[0], 0);
        assert_eq!(q.initial_loss_delay_ns, 0);
        assert!(q.version_negotiation && q.vn_after);

        // The v1 ClientHello lost after the capture, its repeat answered: measured from the
        // v1 first flight, not from the v2 one.
        let mut q = QuicState::default();
        q.observe(0, 0, &hello(V2, DCID, 0), 1200);
        q.observe(1, 20 * MS, &version_negotiation(V1), 1200);
        q.observe(0, 45 * MS, &hello(V1, DCID, 0), 1200);
        q.observe(0, 345 * MS, &hello(V1, DCID, 1), 1200);
        q.observe(1, 365 * MS, &server_initial(V1), 1200);
        assert_eq!(q.initial_retx[0], 1);
        assert_eq!(q.initial_loss_delay_ns, 300 * MS);
    }
}

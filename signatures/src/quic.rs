//! QUIC flows seen passively: versions, connection IDs, SNI/ALPN from the decrypted Initials,
//! Initial retransmissions (the QUIC analog of SYN loss), handshake RTT and outcome, spin-bit
//! RTT, Retry and Version Negotiation. Definitions: docs/signatures.md#quic.

use tailscope_parsers::quic::{
    self, handshake_messages, parse_client_hello, verify_retry, CryptoReassembler, Form, InitialDecryptor, PacketType,
    RetryCheck, Version,
};

use crate::rtt::Samples;
use crate::tags;

/// Short-header packets needed before a spin bit that never flips is called disabled.
const SPIN_MIN_PACKETS: u64 = 10;

/// Is this UDP payload the start of a QUIC connection (a long header of a known version)?
pub fn looks_like_quic(payload: &[u8]) -> bool {
    if payload.len() < 7 || payload[0] & 0x80 == 0 {
        return false;
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
    pub initial_loss_delay_ns: i64,
    first_client_handshake_ns: Option<i64>,
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
}

impl QuicState {
    /// One UDP datagram of this flow; `dir` 0 is client to server. Returns packet tags.
    pub fn observe(&mut self, dir: usize, ts_ns: i64, payload: &[u8]) -> u32 {
        let mut mask = 0;
        // Packets to a side carry the SCID that side chose as their DCID.
        let short_len = self.scid[1 - dir].len();
        let dg = quic::parse_datagram(payload, short_len);
        for p in &dg.packets {
            if p.form == Form::Long && p.ty != PacketType::VersionNegotiation {
                self.version.get_or_insert(p.version);
                if self.scid[dir].is_empty() && !p.scid.is_empty() {
                    self.scid[dir] = p.scid.to_vec();
                }
            }
            match p.ty {
                PacketType::Initial => {
                    self.initial_packets[dir] += 1;
                    if self.version_negotiation && dir == 0 {
                        self.vn_after = true;
                    }
                    mask |= self.initial(dir, ts_ns, p);
                }
                PacketType::Handshake => {
                    self.handshake_packets[dir] += 1;
                    mask |= self.keyed_packet(dir, ts_ns, p, short_len);
                    if dir == 0 {
                        self.client_handshake(ts_ns);
                    }
                }
                PacketType::ZeroRtt => self.zero_rtt_packets += 1,
                PacketType::OneRtt => {
                    self.one_rtt_packets[dir] += 1;
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

    fn initial(&mut self, dir: usize, ts_ns: i64, p: &quic::PacketHeader<'_>) -> u32 {
        if dir == 0 {
            let fresh = self.dec.as_ref().is_none_or(|d| d.version() != p.version);
            if fresh {
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
        if hello {
            match self.first_hello_ns[dir] {
                // The first flight again: its first copy (or our answer to it) was lost.
                Some(first) if !open.rekeyed => {
                    self.initial_retx[dir] += 1;
                    mask |= tags::QUIC_INITIAL_RETRANSMISSION;
                    if dir == 0 && self.first_hello_ns[1].is_none() {
                        self.initial_loss_delay_ns = ts_ns - first;
                    }
                }
                Some(_) => {}
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
    fn client_handshake(&mut self, ts_ns: i64) {
        if self.first_client_handshake_ns.is_none() {
            self.first_client_handshake_ns = Some(ts_ns);
            if let Some(s) = self.last_hello_ns[1] {
                self.handshake_rtt_ns = Some(ts_ns - s);
            }
        }
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
                if self.handshake_rtt_ns.is_none_or(|h| sample * 2 >= h) {
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

//! QUIC flows analysed with a TLS key log: the connection is found in the log by its
//! ClientHello random, the cipher suite read from the server's ServerHello, and from then on its
//! Handshake and 1-RTT packets are opened; each direction's sender is replayed
//! ([`crate::quic_recovery`]) and each bidirectional client stream read as one query.
//!
//! Vantage point: the capture is at the server, so the server's sends and the ACKs it receives
//! carry its own times; the client's sends are seen about half an RTT after it sent them and its
//! ACKs half an RTT before they reach it, so the client's replay shifts both by half the
//! smoothed RTT (measured from the server's side: the path is the same).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tailscope_parsers::quic::{
    handshake_messages, parse_client_hello, parse_server_hello, AckFrame, AppFrames, CipherSuite, CryptoReassembler,
    DecryptedInitial, KeyLog, KeyedDecryptor, PacketHeader, PacketType,
};

use crate::queries::{Method, Query};
use crate::quic_recovery::{Finding, LossCause, Rtt, Sender};
use crate::rtt::Samples;
use crate::tags;

/// Connections of a session, by what the key log did for them (the run manifest's counts).
#[derive(Debug, Default)]
pub struct KeylogCounters {
    pub decrypted: AtomicU64,
    pub not_in_keylog: AtomicU64,
    pub unsupported_cipher: AtomicU64,
}

impl KeylogCounters {
    pub fn snapshot(&self) -> [(&'static str, u64); 3] {
        [
            ("decrypted", self.decrypted.load(Ordering::Relaxed)),
            ("not_in_keylog", self.not_in_keylog.load(Ordering::Relaxed)),
            ("unsupported_cipher", self.unsupported_cipher.load(Ordering::Relaxed)),
        ]
    }
}

/// A session's key log and the counts it keeps.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    pub log: Arc<KeyLog>,
    pub counters: Arc<KeylogCounters>,
}

/// An events row the keyed analysis asks for (the session adds the packet's file and frame).
#[derive(Debug, Clone)]
pub struct KeyedEvent {
    /// The direction of the packet the event is about (the lost packet's sender, say).
    pub c2s: bool,
    pub signature: &'static str,
    pub cause: Option<&'static str>,
    pub delay_ns: Option<i64>,
    /// The packet number concerned (lowest 32 bits; none for what is inferred without keys).
    pub pn: Option<u64>,
}

/// What one datagram gave, for its packets row.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub tags: u32,
    pub rtt_ns: Option<i64>,
    pub retx_delay_ns: Option<i64>,
    /// The first 1-RTT packet number of the datagram.
    pub pn: Option<u64>,
    pub events: Vec<KeyedEvent>,
}

#[derive(Debug, Clone, Default)]
pub struct KeyedStats {
    pub decrypted: [u64; 2],
    pub undecryptable: [u64; 2],
    pub lost: [u64; 2],
    /// Packet threshold, time threshold, PTO.
    pub lost_by: [u64; 3],
    pub retx: [u64; 2],
    pub retx_spurious: u64,
    pub out_of_order: [u64; 2],
    pub rtt: Samples,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    /// No complete ClientHello or ServerHello yet.
    Pending,
    Decrypting,
    NotInKeylog,
    UnsupportedCipher,
}

impl KeyStatus {
    pub fn name(self) -> &'static str {
        match self {
            KeyStatus::Pending => "no_handshake",
            KeyStatus::Decrypting => "decrypted",
            KeyStatus::NotInKeylog => "not_in_keylog",
            KeyStatus::UnsupportedCipher => "unsupported_cipher",
        }
    }
}

#[derive(Debug, Clone, Default)]
struct StreamQuery {
    query: usize,
    request_end: u64,
    response_end: u64,
    fin: bool,
    /// The latest server packet that carried this stream's data.
    last_response_pn: Option<u64>,
}

/// Per-flow state of the keyed analysis (boxed in [`crate::quic::QuicState::keyed`]).
#[derive(Debug, Clone)]
pub struct KeyedQuic {
    keys: Keys,
    /// Initial CRYPTO streams: the client's (ClientHello random) and the server's (ServerHello).
    crypto: [CryptoReassembler; 2],
    random: Option<[u8; 32]>,
    pub status: KeyStatus,
    dec: Option<KeyedDecryptor>,
    rtt: Rtt,
    senders: [Sender; 2],
    /// The server's Initial and Handshake packets (time, ack-eliciting), for RTT samples from
    /// the client's ACKs before 1-RTT.
    server_early: [BTreeMap<u64, (i64, bool)>; 2],
    pub stats: KeyedStats,
    streams: HashMap<u64, StreamQuery>,
    pub queries: Vec<Query>,
    out: Outcome,
}

impl KeyedQuic {
    pub fn new(keys: Keys) -> Self {
        KeyedQuic {
            keys,
            crypto: [CryptoReassembler::default(), CryptoReassembler::default()],
            random: None,
            status: KeyStatus::Pending,
            dec: None,
            rtt: Rtt::default(),
            senders: [Sender::default(), Sender::default()],
            server_early: [BTreeMap::new(), BTreeMap::new()],
            stats: KeyedStats::default(),
            streams: HashMap::new(),
            queries: Vec::new(),
            out: Outcome::default(),
        }
    }

    pub fn key_updates(&self) -> u32 {
        self.dec.as_ref().map_or(0, |d| d.key_updates.iter().sum())
    }

    /// The datagram's outcome, taken once per datagram by the session.
    pub fn take_outcome(&mut self) -> Outcome {
        std::mem::take(&mut self.out)
    }

    /// An opened Initial packet (`dir` 0: from the client).
    pub fn on_initial(&mut self, dir: usize, ts_ns: i64, version: u32, open: &DecryptedInitial) {
        if open.rekeyed && dir == 0 {
            self.crypto[0] = CryptoReassembler::default();
        }
        self.early_packet(
            0,
            dir,
            ts_ns,
            open.packet_number,
            &open.frames.acks,
            !open.frames.crypto.is_empty() || open.frames.ping,
        );
        if self.status != KeyStatus::Pending {
            return;
        }
        for (off, data) in open.crypto_data() {
            self.crypto[dir].insert(off, data);
        }
        if self.random.is_none() {
            self.random = handshake_messages(self.crypto[0].contiguous())
                .filter(|m| m.msg_type == 1 && m.complete)
                .find_map(|m| parse_client_hello(m.bytes))
                .map(|h| h.random);
        }
        let suite = handshake_messages(self.crypto[1].contiguous())
            .filter(|m| m.msg_type == 2 && m.complete)
            .filter_map(|m| parse_server_hello(m.bytes))
            .find(|h| !h.hello_retry_request)
            .map(|h| h.cipher_suite);
        let (Some(random), Some(suite)) = (self.random, suite) else { return };
        let c = &self.keys.counters;
        let Some(secrets) = self.keys.log.get(&random) else {
            self.status = KeyStatus::NotInKeylog;
            c.not_in_keylog.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match CipherSuite::from_tls(suite).and_then(|s| KeyedDecryptor::new(version, s, secrets)) {
            Some(d) => {
                self.dec = Some(d);
                self.status = KeyStatus::Decrypting;
                c.decrypted.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                self.status = KeyStatus::UnsupportedCipher;
                c.unsupported_cipher.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.crypto = [CryptoReassembler::new(0), CryptoReassembler::new(0)];
    }

    /// RTT samples from the client's ACKs of the server's Initial and Handshake packets
    /// (RFC 9002 §5.1: every space gives samples; the ACK delay does not apply before 1-RTT).
    fn early_packet(&mut self, space: usize, dir: usize, ts: i64, pn: u64, acks: &[AckFrame], ack_eliciting: bool) {
        if dir == 1 {
            if self.server_early[space].len() < 1024 {
                self.server_early[space].entry(pn).or_insert((ts, ack_eliciting));
            }
            return;
        }
        for a in acks {
            if let Some((sent, true)) = self.server_early[space].remove(&a.largest) {
                let s = self.rtt.update(ts - sent, 0);
                // Without the connection's keys the flow is analysed as if there were no key log.
                if self.status == KeyStatus::Decrypting {
                    self.stats.rtt.add(s);
                    self.out.rtt_ns = Some(s);
                }
            }
        }
    }

    /// A Handshake or 1-RTT packet of the flow. Returns the packet tags it earned.
    pub fn on_packet(&mut self, dir: usize, ts_ns: i64, p: &PacketHeader<'_>, short_dcid_len: usize) -> u32 {
        let Some(dec) = self.dec.as_mut() else { return 0 };
        let from_client = dir == 0;
        let opened = match p.ty {
            PacketType::Handshake => dec.open_handshake(p.bytes, from_client),
            PacketType::OneRtt => dec.open_short(p.bytes, short_dcid_len, from_client),
            _ => return 0,
        };
        let Ok(o) = opened else {
            self.stats.undecryptable[dir] += 1;
            return 0;
        };
        self.stats.decrypted[dir] += 1;
        if p.ty == PacketType::Handshake {
            self.early_packet(1, dir, ts_ns, o.packet_number, &o.frames.acks, o.frames.ack_eliciting);
            return 0;
        }
        self.out.pn.get_or_insert(o.packet_number);
        let before = self.out.tags;
        self.one_rtt(dir, ts_ns, o.packet_number, &o.frames);
        self.out.tags & !before
    }

    fn one_rtt(&mut self, dir: usize, ts: i64, pn: u64, frames: &AppFrames) {
        let half = self.rtt.smoothed_or_initial() / 2;
        // Client: sends seen late, ACKs seen early (module doc).
        let send_time = if dir == 0 { ts - half } else { ts };
        let peer = 1 - dir;
        let recv_time = if peer == 0 { ts + half } else { ts };
        let streams: Vec<(u64, u64, u64)> =
            frames.streams.iter().map(|s| (s.stream_id, s.offset, s.len as u64)).collect();
        let probing = frames.ack_eliciting && (streams.is_empty() || self.senders[dir].would_resend(&streams));
        let f = self.senders[dir].poll(send_time, &self.rtt, probing);
        self.findings(dir, f);
        let f = self.senders[dir].on_sent(send_time, pn, frames.ack_eliciting, &streams);
        self.findings(dir, f);
        self.stream_queries(dir, ts, pn, frames);
        for a in &frames.acks {
            let f = self.senders[peer].poll(recv_time, &self.rtt, false);
            self.findings(peer, f);
            let f = self.senders[peer].on_ack(recv_time, a, &mut self.rtt, peer == 1);
            self.findings(peer, f);
            if peer == 1 {
                self.responses_acked(ts, a);
            }
        }
    }

    fn findings(&mut self, sender: usize, found: Vec<Finding>) {
        let c2s = sender == 0;
        for f in found {
            match f {
                Finding::Lost { pn, cause, at_ns, sent_ns, .. } => {
                    self.out.tags |= tags::QUIC_LOSS_DETECTED;
                    self.stats.lost[sender] += 1;
                    self.stats.lost_by[cause as usize] += 1;
                    self.out.events.push(KeyedEvent {
                        c2s,
                        signature: "quic_packet_lost",
                        cause: Some(cause.name()),
                        delay_ns: Some(at_ns - sent_ns),
                        pn: Some(pn),
                    });
                }
                Finding::Retransmission { cause, delay_ns, .. } => {
                    self.stats.retx[sender] += 1;
                    self.out.tags |= tags::RETRANSMISSION
                        | match cause {
                            Some(LossCause::PacketThreshold) => tags::RETX_PACKET_THRESHOLD,
                            Some(LossCause::TimeThreshold) => tags::RETX_TIME_THRESHOLD,
                            Some(LossCause::Pto) => tags::RETX_PTO,
                            None => tags::RETX_UNKNOWN,
                        };
                    self.out.retx_delay_ns = delay_ns.or(self.out.retx_delay_ns);
                }
                Finding::Spurious { original, .. } => {
                    self.stats.retx_spurious += 1;
                    self.out.tags |= tags::QUIC_SPURIOUS_ACK;
                    self.out.events.push(KeyedEvent {
                        c2s,
                        signature: "quic_spurious_retransmission",
                        cause: None,
                        delay_ns: None,
                        pn: Some(original),
                    });
                }
                Finding::OutOfOrder { .. } => {
                    self.stats.out_of_order[sender] += 1;
                    self.out.tags |= tags::OUT_OF_ORDER;
                }
                Finding::RttSample(r) => {
                    self.stats.rtt.add(r);
                    self.out.rtt_ns = Some(r);
                }
            }
        }
    }

    /// Client-initiated bidirectional streams (id % 4 == 0): request, response, delivery.
    fn stream_queries(&mut self, dir: usize, ts: i64, pn: u64, frames: &AppFrames) {
        let retx = self.out.tags & tags::RETRANSMISSION != 0;
        for s in &frames.streams {
            if s.stream_id % 4 != 0 {
                continue;
            }
            let end = s.offset + s.len as u64;
            if !self.streams.contains_key(&s.stream_id) {
                if dir == 1 || self.queries.len() >= 65_536 {
                    continue; // a response to a request the capture missed
                }
                self.queries.push(Query::new(self.queries.len() as u32, ts, Method::QuicStreams));
                self.streams.insert(s.stream_id, StreamQuery { query: self.queries.len() - 1, ..Default::default() });
            }
            let st = self.streams.get_mut(&s.stream_id).expect("inserted above");
            let q = &mut self.queries[st.query];
            if dir == 0 {
                if end > st.request_end {
                    q.request_bytes += end - st.request_end;
                    st.request_end = end;
                    q.request_packets += 1;
                    q.request_last_ns = Some(ts);
                }
                continue;
            }
            q.first_byte_ns.get_or_insert(ts);
            if end > st.response_end {
                q.response_bytes += end - st.response_end;
                st.response_end = end;
                q.response_packets += 1;
                q.last_byte_ns = Some(ts);
            }
            st.fin |= s.fin;
            st.last_response_pn = Some(pn);
            q.acked_ns = None;
            if retx {
                q.retransmissions += 1;
                let sig = match self.out.tags {
                    t if t & tags::RETX_PACKET_THRESHOLD != 0 => "quic_packet_threshold",
                    t if t & tags::RETX_TIME_THRESHOLD != 0 => "quic_time_threshold",
                    t if t & tags::RETX_PTO != 0 => "quic_pto",
                    _ => "quic_retransmission",
                };
                q.charges.add_charge(sig, self.out.retx_delay_ns.unwrap_or(0), ts);
            }
        }
    }

    /// A client ACK covering the last packet of a finished response delivers it.
    fn responses_acked(&mut self, ts: i64, a: &AckFrame) {
        for st in self.streams.values() {
            let q = &mut self.queries[st.query];
            if q.acked_ns.is_some() || !st.fin {
                continue;
            }
            if let Some(pn) = st.last_response_pn {
                if a.ranges.iter().any(|&(lo, hi)| lo <= pn && pn <= hi) {
                    q.acked_ns = Some(ts);
                }
            }
        }
    }
}

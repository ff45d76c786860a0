//! Flow reconstruction: bidirectional flows keyed by the 5-tuple, client/server roles, port
//! reuse, idle timeout, and a bounded table with counted eviction.
//!
//! Rules (documented in docs/flows.md, which is the one place they are explained):
//! - Roles: the sender of a SYN (without ACK) is the client; the sender of a SYN-ACK is the
//!   server; otherwise a well-known or service port marks the server; otherwise the sender of
//!   the first packet seen is the client (as Zeek does).
//! - A TCP flow is split (port reuse) when a SYN without ACK carries another sequence number than
//!   the first one seen from that sender (Wireshark's rule). SYN retransmissions (same ISN) and
//!   SYN-ACKs with other sequence numbers stay in the flow.
//! - A flow idle for longer than its timeout ends; a later packet with the same key starts a
//!   new flow. Closed TCP flows linger for a shorter time so late retransmissions still join.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ahash::RandomState;
use std::net::IpAddr;

use tailscope_parsers::decode::{Packet, TCP_ACK, TCP_FIN, TCP_RST, TCP_SYN};

use crate::community_id::community_id_v1;
use crate::defaults;
use crate::quic::QuicState;
use crate::service::{self, Opening};
use crate::tcp::TcpState;

#[derive(Debug, Clone)]
pub struct FlowConfig {
    pub tcp_idle_timeout_ns: i64,
    pub udp_idle_timeout_ns: i64,
    /// How long a closed (FIN/FIN or RST) TCP flow keeps collecting late packets.
    pub tcp_closed_linger_ns: i64,
    /// Most flows held at once; past it the least recently active flow is ended as `evicted`.
    pub max_flows: usize,
    pub community_id_seed: u16,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            tcp_idle_timeout_ns: defaults::ns(defaults::TCP_IDLE_TIMEOUT_S),
            udp_idle_timeout_ns: defaults::ns(defaults::UDP_IDLE_TIMEOUT_S),
            tcp_closed_linger_ns: defaults::ns(defaults::TCP_CLOSED_LINGER_S),
            max_flows: defaults::MAX_FLOWS,
            community_id_seed: 0,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    C2S,
    S2C,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::C2S => "c2s",
            Direction::S2C => "s2c",
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
    pub fn other(self) -> Direction {
        match self {
            Direction::C2S => Direction::S2C,
            Direction::S2C => Direction::C2S,
        }
    }
}

/// How the client/server roles were decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleSource {
    Syn,
    SynAck,
    Port,
    FirstPacket,
}

impl RoleSource {
    pub fn name(self) -> &'static str {
        match self {
            RoleSource::Syn => "syn",
            RoleSource::SynAck => "syn-ack",
            RoleSource::Port => "port",
            RoleSource::FirstPacket => "first-packet",
        }
    }
}

/// Why a flow ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Fin,
    Rst,
    IdleTimeout,
    PortReuse,
    EndOfCapture,
    Evicted,
}

impl EndReason {
    pub fn name(self) -> &'static str {
        match self {
            EndReason::Fin => "fin",
            EndReason::Rst => "rst",
            EndReason::IdleTimeout => "idle_timeout",
            EndReason::PortReuse => "port_reuse",
            EndReason::EndOfCapture => "end_of_capture",
            EndReason::Evicted => "evicted",
        }
    }
}

/// Direction-independent key: the two endpoints in sorted order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowKey {
    pub proto: u8,
    pub lo: (IpAddr, u16),
    pub hi: (IpAddr, u16),
}

/// The flow table hashes a key per packet: three words, where the derived `Hash` made nine
/// writes (per address its variant, a length and the bytes, then each port and the protocol).
/// Equal keys give equal words, as `Hash` requires; the table's hasher is keyed at random per
/// process, so nothing written depends on the values.
impl std::hash::Hash for FlowKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let bits = |a: &IpAddr| match a {
            IpAddr::V4(v) => u128::from(u32::from(*v)),
            IpAddr::V6(v) => u128::from(*v),
        };
        h.write_u128(bits(&self.lo.0));
        h.write_u128(bits(&self.hi.0));
        h.write_u64(
            u64::from(self.proto)
                | u64::from(self.lo.1) << 8
                | u64::from(self.hi.1) << 24
                | u64::from(self.lo.0.is_ipv6()) << 40
                | u64::from(self.hi.0.is_ipv6()) << 41,
        );
    }
}

impl FlowKey {
    pub fn of(p: &Packet<'_>) -> FlowKey {
        let a = (p.src, p.sport);
        let b = (p.dst, p.dport);
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        FlowKey { proto: p.proto, lo, hi }
    }
}

/// Per-direction counters.
#[derive(Debug, Clone, Default)]
pub struct DirStats {
    pub packets: u64,
    pub wire_bytes: u64,
    pub ip_bytes: u64,
    pub payload_bytes: u64,
    pub syn: u32,
    pub fin: u32,
    pub rst: u32,
    /// First sequence number seen (the ISN when the SYN was seen).
    pub isn: Option<u32>,
    pub isn_from_syn: bool,
    pub wscale: Option<u8>,
    pub mss: Option<u16>,
    pub sack_permitted: bool,
    pub timestamps: bool,
}

/// The state of one flow, and its row in the flows table once it ends.
#[derive(Debug, Clone)]
pub struct Flow {
    pub flow_id: i64,
    pub key: FlowKey,
    pub proto: u8,
    pub client: (IpAddr, u16),
    pub server: (IpAddr, u16),
    pub role_source: RoleSource,
    pub start_ns: i64,
    pub end_ns: i64,
    pub dir: [DirStats; 2],
    pub end_reason: Option<EndReason>,
    pub first_file: u32,
    pub last_file: u32,
    pub encap: &'static str,
    /// TCP sequence analysis (None for UDP); boxed so UDP flows stay small.
    pub tcp: Option<Box<TcpState>>,
    /// QUIC analysis, once the flow's packets showed a QUIC long header.
    pub quic: Option<Box<QuicState>>,
    /// SNI and ALPN from the TLS ClientHello (TCP) or the decrypted QUIC Initials.
    pub sni: Option<String>,
    pub alpn: Vec<String>,
    pub tls_checked: bool,
    /// What each direction's stream began with (TCP), for `service` (service.rs).
    pub openings: [Opening; 2],
    /// Other 4-tuples this flow was seen on (QUIC migration), and its connection IDs.
    aliases: Vec<FlowKey>,
    cids: Vec<Vec<u8>>,
    generation: u32,
}

impl Flow {
    /// By the server's endpoint, so that a client that moved (QUIC migration, NAT rebinding)
    /// still sends client-to-server.
    pub fn direction_of(&self, p: &Packet<'_>) -> Direction {
        if (p.src, p.sport) == self.server && (p.dst, p.dport) != self.server {
            Direction::S2C
        } else {
            Direction::C2S
        }
    }

    /// The application protocol, as Zeek's conn.log names it (service.rs).
    pub fn service(&self) -> Option<&'static str> {
        match self.proto {
            6 => service::tcp_service(self.openings[0], self.openings[1], self.server.1),
            17 => service::udp_service(self.quic.is_some(), self.client.1, self.server.1),
            _ => None,
        }
    }

    pub fn community_id(&self, seed: u16) -> String {
        community_id_v1(seed, self.client.0, self.client.1, self.server.0, self.server.1, self.proto)
    }

    pub fn closed(&self) -> bool {
        let fins = self.dir[0].fin > 0 && self.dir[1].fin > 0;
        let rst = self.dir[0].rst > 0 || self.dir[1].rst > 0;
        fins || rst
    }

    /// What struck this flow at least once: its TCP or QUIC analysis' flow-level signatures.
    pub fn signatures(&self) -> Vec<&'static str> {
        match (self.quic.as_deref(), self.tcp.as_deref()) {
            (Some(q), _) => q.signatures(self.dir[1].packets),
            (None, Some(t)) => t.signatures(),
            (None, None) => Vec::new(),
        }
    }

    /// The queries this flow completed: TCP's; QUIC's per stream with a key log, else inferred
    /// (those not yet written while it lived).
    pub fn done_queries(&self) -> &[crate::queries::Query] {
        let quic = || self.quic.as_deref().map(|q| q.decrypting().map_or(q.inferred_queries(), |k| &k.queries[..]));
        self.tcp.as_deref().map(|t| &t.queries.done[..]).or_else(quic).unwrap_or(&[])
    }

    /// Scale factor for window fields in `dir` (never for SYNs themselves), once both SYNs were
    /// seen: the side's offer when both sides offered window scaling, else 0, for then neither
    /// side scales (RFC 7323 §2.2). Unknown (None) while a SYN is missing.
    pub fn window_shift(&self, dir: Direction) -> Option<u8> {
        if self.dir[0].syn == 0 || self.dir[1].syn == 0 {
            return None;
        }
        match (self.dir[0].wscale, self.dir[1].wscale) {
            (Some(c), Some(s)) => Some(if dir == Direction::C2S { c } else { s }.min(14)),
            _ => Some(0),
        }
    }
}

/// Ports that mark the server side when no SYN says which side that is.
fn is_service_port(port: u16) -> bool {
    port < 1024
        || matches!(
            port,
            1080 | 1194
                | 1433
                | 1521
                | 1883
                | 2049
                | 3128
                | 3306
                | 3389
                | 3544
                | 4433
                | 4789
                | 5060
                | 5061
                | 5222
                | 5228
                | 5432
                | 5671
                | 5672
                | 6379
                | 6443
                | 6667
                | 8000
                | 8008
                | 8080
                | 8081
                | 8443
                | 8883
                | 8888
                | 9000
                | 9090
                | 9092
                | 9200
                | 9443
                | 11211
                | 27017
        )
}

fn roles_for(p: &Packet<'_>) -> (RoleSource, bool) {
    // Returns (how, sender_is_client).
    if let Some(t) = p.tcp() {
        if t.has(TCP_SYN) && !t.has(TCP_ACK) {
            return (RoleSource::Syn, true);
        }
        if t.has(TCP_SYN) && t.has(TCP_ACK) {
            return (RoleSource::SynAck, false);
        }
    }
    match (is_service_port(p.sport), is_service_port(p.dport)) {
        (false, true) => (RoleSource::Port, true),
        (true, false) => (RoleSource::Port, false),
        // Both or neither look like services: the lower port is more likely the service, but only
        // when the ports differ clearly; otherwise trust the first packet (Zeek's default).
        _ => (RoleSource::FirstPacket, true),
    }
}

/// What the tracker did with a packet.
pub struct Assigned {
    pub slot: usize,
    pub direction: Direction,
    pub migrated: bool,
}

/// The flow table.
pub struct FlowTracker {
    pub config: FlowConfig,
    capture_id: String,
    slots: Vec<Option<Flow>>,
    free: Vec<usize>,
    index: HashMap<FlowKey, usize, RandomState>,
    /// QUIC connection IDs of live flows, and the lengths in use (short headers do not say).
    cid_index: HashMap<Vec<u8>, usize, RandomState>,
    cid_lens: Vec<usize>,
    pub migrations: u64,
    /// Lazy expiry queue: (deadline, slot, generation). Stale entries are skipped on pop.
    expiry: BinaryHeap<Reverse<(i64, usize, u32)>>,
    now_ns: i64,
    generation: u32,
    /// Flows that ended and wait to be written.
    pub finished: Vec<Flow>,
    pub evicted: u64,
    pub flows_started: u64,
    /// Flows held by every shard of a capture (session/shards.rs): `--max-flows` bounds the
    /// capture, not each shard. None in one pass, where the index's size is the count.
    shared_held: Option<Arc<AtomicUsize>>,
}

impl FlowTracker {
    pub fn new(config: FlowConfig, capture_id: &str) -> FlowTracker {
        FlowTracker {
            config,
            capture_id: capture_id.to_string(),
            slots: Vec::new(),
            free: Vec::new(),
            index: HashMap::default(),
            cid_index: HashMap::default(),
            cid_lens: Vec::new(),
            migrations: 0,
            expiry: BinaryHeap::new(),
            now_ns: i64::MIN,
            generation: 0,
            finished: Vec::new(),
            evicted: 0,
            flows_started: 0,
            shared_held: None,
        }
    }

    /// The latest packet time seen (the table's clock).
    pub fn now_ns(&self) -> i64 {
        self.now_ns
    }

    pub fn active(&self) -> usize {
        self.index.len()
    }

    /// Count this tracker's flows in `held`, shared with the other shards of the capture.
    pub fn share_flow_count(&mut self, held: Arc<AtomicUsize>) {
        self.shared_held = Some(held);
    }

    pub fn flow(&self, slot: usize) -> &Flow {
        self.slots[slot].as_ref().expect("live slot")
    }

    pub fn flow_mut(&mut self, slot: usize) -> &mut Flow {
        self.slots[slot].as_mut().expect("live slot")
    }

    fn timeout(&self, f: &Flow) -> i64 {
        if f.proto == 6 {
            if f.closed() {
                self.config.tcp_closed_linger_ns.min(self.config.tcp_idle_timeout_ns)
            } else {
                self.config.tcp_idle_timeout_ns
            }
        } else {
            self.config.udp_idle_timeout_ns
        }
    }

    fn flow_id(&self, key: &FlowKey, start_ns: i64) -> i64 {
        use xxhash_rust::xxh3::Xxh3;
        let mut h = Xxh3::new();
        h.update(self.capture_id.as_bytes());
        h.update(&[key.proto]);
        for (addr, port) in [key.lo, key.hi] {
            match addr {
                IpAddr::V4(a) => h.update(&a.octets()),
                IpAddr::V6(a) => h.update(&a.octets()),
            }
            h.update(&port.to_be_bytes());
        }
        h.update(&start_ns.to_le_bytes());
        h.digest() as i64
    }

    /// Find or start the flow for a packet, update its counters, and return where it is.
    pub fn assign(&mut self, p: &Packet<'_>, file_index: u32) -> Assigned {
        self.now_ns = self.now_ns.max(p.ts_ns);
        self.expire(self.now_ns);
        let key = FlowKey::of(p);
        let mut slot = self.index.get(&key).copied();
        let mut migrated = false;
        if slot.is_none() {
            if let Some(s) = self.by_connection_id(p) {
                // A known QUIC connection on a new path: same flow, new 4-tuple.
                self.index.insert(key, s);
                self.flow_mut(s).aliases.push(key);
                self.migrations += 1;
                slot = Some(s);
                migrated = true;
            }
        }
        if let Some(s) = slot {
            let f = self.flow(s);
            let idle = p.ts_ns.saturating_sub(f.end_ns) > self.timeout(f);
            let reuse = self.is_port_reuse(f, p);
            if idle || reuse {
                self.end(s, if reuse { EndReason::PortReuse } else { EndReason::IdleTimeout });
                slot = None;
            }
        }
        let slot = match slot {
            Some(s) => s,
            None => self.start(key, p, file_index),
        };
        let direction = self.flow(slot).direction_of(p);
        self.account(slot, direction, p, file_index);
        Assigned { slot, direction, migrated }
    }

    /// The live flow whose QUIC connection ID this short-header packet carries.
    fn by_connection_id(&self, p: &Packet<'_>) -> Option<usize> {
        if p.proto != 17 || self.cid_index.is_empty() || p.payload.first().is_none_or(|b| b & 0x80 != 0) {
            return None;
        }
        self.cid_lens.iter().find_map(|&len| p.payload.get(1..1 + len).and_then(|cid| self.cid_index.get(cid).copied()))
    }

    /// Remember a QUIC connection ID of a flow (its packets may later arrive on a new path).
    pub fn register_cid(&mut self, slot: usize, cid: &[u8]) {
        if cid.is_empty() || self.cid_index.contains_key(cid) {
            return;
        }
        self.cid_index.insert(cid.to_vec(), slot);
        if !self.cid_lens.contains(&cid.len()) {
            self.cid_lens.push(cid.len());
        }
        self.flow_mut(slot).cids.push(cid.to_vec());
    }

    /// Wireshark's rule: a SYN (without ACK) whose sequence number differs from the first one
    /// seen from that sender starts a new connection; the same ISN is a retransmission (or a
    /// retry of a reset handshake) and stays.
    fn is_port_reuse(&self, f: &Flow, p: &Packet<'_>) -> bool {
        let Some(t) = p.tcp() else { return false };
        if !t.has(TCP_SYN) || t.has(TCP_ACK) {
            return false;
        }
        let sender = &f.dir[f.direction_of(p).index()];
        sender.isn.is_some_and(|isn| isn != t.seq)
    }

    fn start(&mut self, key: FlowKey, p: &Packet<'_>, file_index: u32) -> usize {
        // Shards count the flow before they check, so two starting at once cannot both pass.
        let over = match &self.shared_held {
            Some(h) => h.fetch_add(1, Ordering::Relaxed) >= self.config.max_flows,
            None => self.index.len() >= self.config.max_flows,
        };
        if over {
            self.evict_one();
        }
        let (role_source, sender_is_client) = roles_for(p);
        let (me, peer) = ((p.src, p.sport), (p.dst, p.dport));
        let (client, server) = if sender_is_client { (me, peer) } else { (peer, me) };
        self.generation = self.generation.wrapping_add(1);
        let flow = Flow {
            flow_id: self.flow_id(&key, p.ts_ns),
            key,
            proto: p.proto,
            client,
            server,
            role_source,
            start_ns: p.ts_ns,
            end_ns: p.ts_ns,
            dir: [DirStats::default(), DirStats::default()],
            end_reason: None,
            first_file: file_index,
            last_file: file_index,
            encap: p.encap.name(),
            tcp: (p.proto == 6).then(Box::<TcpState>::default),
            quic: None,
            sni: None,
            openings: [Opening::Unseen; 2],
            alpn: Vec::new(),
            tls_checked: false,
            aliases: Vec::new(),
            cids: Vec::new(),
            generation: self.generation,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s] = Some(flow);
                s
            }
            None => {
                self.slots.push(Some(flow));
                self.slots.len() - 1
            }
        };
        self.index.insert(key, slot);
        self.flows_started += 1;
        self.schedule(slot);
        slot
    }

    fn schedule(&mut self, slot: usize) {
        let f = self.flow(slot);
        let deadline = f.end_ns.saturating_add(self.timeout(f));
        let generation = f.generation;
        self.expiry.push(Reverse((deadline, slot, generation)));
    }

    fn account(&mut self, slot: usize, dir: Direction, p: &Packet<'_>, file_index: u32) {
        let was_closed = self.flow(slot).closed();
        self.count(slot, dir, p, file_index);
        if !was_closed && self.flow(slot).closed() {
            // The shorter linger of a closed flow needs its own deadline in the queue, or the
            // flow would wait for the idle timeout's.
            self.schedule(slot);
        }
    }

    fn count(&mut self, slot: usize, dir: Direction, p: &Packet<'_>, file_index: u32) {
        let f = self.flow_mut(slot);
        f.end_ns = f.end_ns.max(p.ts_ns);
        f.last_file = file_index;
        let d = &mut f.dir[dir.index()];
        d.packets += 1;
        d.wire_bytes += u64::from(p.wire_len);
        d.ip_bytes += u64::from(p.ip_len);
        d.payload_bytes += u64::from(p.payload_len);
        if let Some(t) = p.tcp() {
            if t.has(TCP_SYN) {
                d.syn += 1;
                if !d.isn_from_syn {
                    d.isn = Some(t.seq);
                    d.isn_from_syn = true;
                }
                d.wscale = t.wscale.or(d.wscale);
                d.mss = t.mss.or(d.mss);
                d.sack_permitted |= t.sack_permitted;
                d.timestamps |= t.ts.is_some();
            } else if d.isn.is_none() {
                // No SYN seen: relative numbers start at the first byte seen, as in Wireshark.
                d.isn = Some(t.seq.wrapping_sub(1));
            }
            if t.has(TCP_FIN) {
                d.fin += 1;
            }
            if t.has(TCP_RST) {
                d.rst += 1;
            }
        }
    }

    /// End flows whose deadline passed. Deadlines are re-checked against the flow's real last
    /// activity, because the queue holds the deadline from when the entry was pushed.
    pub fn expire(&mut self, now_ns: i64) {
        while let Some(Reverse((deadline, slot, generation))) = self.expiry.peek().copied() {
            if deadline >= now_ns {
                break;
            }
            self.expiry.pop();
            let Some(f) = self.slots.get(slot).and_then(|s| s.as_ref()) else { continue };
            if f.generation != generation {
                continue;
            }
            let real_deadline = f.end_ns.saturating_add(self.timeout(f));
            if real_deadline < now_ns {
                self.end(slot, EndReason::IdleTimeout);
            } else {
                self.expiry.push(Reverse((real_deadline, slot, generation)));
            }
        }
    }

    fn evict_one(&mut self) {
        // The least recently active flow: pop deadlines until one is live and current.
        while let Some(Reverse((_, slot, generation))) = self.expiry.pop() {
            let live = self.slots.get(slot).and_then(|s| s.as_ref()).is_some_and(|f| f.generation == generation);
            if live {
                self.evicted += 1;
                self.end(slot, EndReason::Evicted);
                return;
            }
        }
    }

    fn end(&mut self, slot: usize, reason: EndReason) {
        if let Some(mut f) = self.slots[slot].take() {
            if let Some(h) = &self.shared_held {
                h.fetch_sub(1, Ordering::Relaxed);
            }
            self.index.remove(&f.key);
            for k in f.aliases.drain(..) {
                if self.index.get(&k) == Some(&slot) {
                    self.index.remove(&k);
                }
            }
            for c in f.cids.drain(..) {
                self.cid_index.remove(&c);
            }
            let end_ns = f.end_ns;
            if let Some(t) = f.tcp.as_mut() {
                t.finish(end_ns);
            }
            if let Some(q) = f.quic.as_mut() {
                q.finish();
            }
            // The flow row needs only the summaries from here on.
            // A flow that closed itself says so even if a timeout or the end of the capture is
            // what finally retired it; an eviction is always reported as one.
            f.end_reason = Some(match reason {
                EndReason::Evicted => reason,
                _ => Self::natural_end_of(&f).unwrap_or(reason),
            });
            self.free.push(slot);
            self.finished.push(f);
        }
    }

    fn natural_end_of(f: &Flow) -> Option<EndReason> {
        if f.dir[0].rst > 0 || f.dir[1].rst > 0 {
            Some(EndReason::Rst)
        } else if f.dir[0].fin > 0 && f.dir[1].fin > 0 {
            Some(EndReason::Fin)
        } else {
            None
        }
    }

    /// End every flow as the end of a capture whose last packet came at `horizon_ns` would
    /// (flows idle past their timeout by then end as timed out), then forget the clock so that
    /// an earlier packet can start the next, independent group of flows. The Spark engine
    /// replays a capture one group of flows at a time through this.
    pub fn finish_at(&mut self, horizon_ns: i64) {
        self.expire(horizon_ns);
        self.finish();
        self.now_ns = i64::MIN;
    }

    /// End every flow (end of the capture set).
    pub fn finish(&mut self) {
        let mut live: Vec<usize> = self.index.values().copied().collect();
        // Deterministic output order: by start time, then id.
        live.sort_by_key(|&s| (self.flow(s).start_ns, self.flow(s).flow_id));
        for s in live {
            self.end(s, EndReason::EndOfCapture);
        }
        self.expiry.clear();
    }
}

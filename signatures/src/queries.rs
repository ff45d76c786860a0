//! Queries without decryption: a TCP byte stream read as request/response exchanges — a client
//! data burst followed by a server data burst (works for HTTP/1, TLS and anything strictly
//! request/response). Each query carries the signatures that struck while it was open and the
//! delay each cost; the first query of a connection also carries the connection setup (over TLS
//! the TLS handshake: its exchanges are no queries, see `TlsPart`).
//! Limits (docs/queries.md): pipelined requests and HTTP/2 multiplexing merge into one query
//! per client burst; server pushes without a request are not queries.

use crate::seq_number::SeqNumber;
use crate::spare::ShrinkSpare;
use crate::tags;
use tailscope_parsers::tls_record::{
    SegmentRecords, ALERT, APPLICATION_DATA, CHANGE_CIPHER_SPEC, HANDSHAKE, HEADER_LEN,
};

/// One signature that struck inside a query and what it cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Charge {
    sig: &'static str,
    delay_ns: i64,
    /// When it struck (the resend's, the repeated SYN's time): with `delay_ns` before it, the
    /// wait it ended (crate::budget paints it).
    at_ns: i64,
    /// Whether `delay_ns` was spent waiting: not for a network's duplicate copy, or a charge
    /// that measures no wait (reordering, a zero window's mark, the queue of bufferbloat).
    waited: bool,
    /// The repair of a loss of the server's data (a policer's drop, if the flow was policed).
    server_loss: bool,
    /// The resend it was charged for (client's?, sequence number), so that a later proof that the
    /// resend was spurious (a D-SACK, an older echoed TSval) relabels it.
    resend: Option<(bool, u32)>,
}

/// What struck inside a query and what it cost, in the order it struck; one charge per occurrence.
#[derive(Debug, Clone, Default)]
pub struct Charges(Vec<Charge>);

impl Charges {
    /// (signature, delay) of each charge, in the order they struck.
    pub fn items(&self) -> impl Iterator<Item = (&'static str, i64)> + '_ {
        self.0.iter().map(|c| (c.sig, c.delay_ns))
    }
    /// The waits the charges ended: (signature, from, to), in the order they struck.
    pub fn waits(&self) -> impl Iterator<Item = (&'static str, i64, i64)> + '_ {
        self.0.iter().filter(|c| c.waited && c.delay_ns > 0).map(|c| (c.sig, c.at_ns - c.delay_ns, c.at_ns))
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// A mark that measures no wait of its own (reordering, a zero window, a queue).
    fn add(&mut self, sig: &'static str, delay: i64, at_ns: i64) {
        self.0.push(Charge { sig, delay_ns: delay, at_ns, waited: false, server_loss: false, resend: None });
    }
    /// A retransmission's charge; `server_loss` when it repaired a loss of the server's data,
    /// `waited` unless it was a network's duplicate.
    fn add_resend(
        &mut self,
        sig: &'static str,
        delay: i64,
        at_ns: i64,
        waited: bool,
        server_loss: bool,
        resend: (bool, u32),
    ) {
        self.0.push(Charge { sig, delay_ns: delay, at_ns, waited, server_loss, resend: Some(resend) });
    }
    /// The resend (client's?, sequence number) charged here was spurious: its charge says so
    /// now, and it repaired no loss. Returns whether this exchange held it.
    fn prove_spurious(&mut self, resend: (bool, u32)) -> bool {
        let Some(c) = self.0.iter_mut().rev().find(|c| c.resend == Some(resend)) else {
            return false;
        };
        *c = Charge { sig: "spurious_retransmission", server_loss: false, resend: None, ..*c };
        true
    }
    /// One charge per episode: repeats of a SYN or SYN-ACK each measure from the first copy, so
    /// the latest repeat's delay is the episode's whole cost.
    fn set_episode(&mut self, sig: &'static str, delay: i64, at_ns: i64) {
        match self.0.iter_mut().find(|c| c.sig == sig) {
            Some(c) if delay > c.delay_ns => (c.delay_ns, c.at_ns) = (delay, at_ns),
            Some(_) => {}
            None => self.0.push(Charge { sig, delay_ns: delay, at_ns, waited: true, server_loss: false, resend: None }),
        }
    }
    /// A wait charged from outside the TCP tracker (QUIC's resends and stalls), ended at `at_ns`.
    pub fn add_charge(&mut self, sig: &'static str, delay: i64, at_ns: i64) {
        self.0.push(Charge { sig, delay_ns: delay, at_ns, waited: true, server_loss: false, resend: None });
    }
    /// Another exchange's charges become this one's (a TLS handshake's, for the first request).
    fn absorb(&mut self, other: Charges) {
        self.0.extend(other.0);
    }
    /// A policed flow's repairs of lost server data were the policer's drops.
    fn blame_policer(&mut self) {
        for c in self.0.iter_mut().filter(|c| c.server_loss) {
            c.sig = "policing";
        }
    }
    fn any_server_loss(&self) -> bool {
        self.0.iter().any(|c| c.server_loss)
    }
}

/// Queueing above the path's minimum RTT smaller than this is not charged (docs/signatures.md's
/// bufferbloat excess), as a charge or as the time budget's queueing part.
pub(crate) const QUEUE_MIN_NS: i64 = 20_000_000;

/// How an exchange was found (the `method` column; docs/queries.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Method {
    /// A TCP byte stream's client and server bursts (this module).
    #[default]
    TcpBytes,
    /// A QUIC bidirectional stream read with a key log (crate::quic_keyed).
    QuicStreams,
    /// Encrypted QUIC packets' sizes and times (crate::quic_queries).
    QuicInferred,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::TcpBytes => "tcp_bytes",
            Method::QuicStreams => "quic_streams",
            Method::QuicInferred => "quic_inferred",
        }
    }
}

/// `confidence` of an inferred QUIC query whose boundaries are clear, and of one whose are not
/// (it opened while the previous response still streamed, or client data arrived during its
/// response: multiplexed requests may have merged). Measured in the QUIC queries lab
/// (tests/test_lab_quic_queries.py: the share of inferred queries matching one client request
/// with latency within one RTT; docs/queries.md#quic-without-keys).
pub const CONFIDENCE_INFERRED: f64 = 0.9;
pub const CONFIDENCE_AMBIGUOUS: f64 = 0.5;

#[derive(Debug, Clone, Default)]
pub struct Query {
    pub index: u32,
    pub method: Method,
    /// Inferred QUIC queries only: the exchange's boundaries are unsure (see `confidence`).
    pub ambiguous: bool,
    pub start_ns: i64,
    pub first_byte_ns: Option<i64>,
    pub last_byte_ns: Option<i64>,
    /// When the client acknowledged the last response byte.
    pub acked_ns: Option<i64>,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub request_packets: u64,
    pub response_packets: u64,
    /// Connection setup charged to the first query (first SYN to the first request byte).
    pub setup_ns: Option<i64>,
    /// The request's first bytes seen were a resend (the original was lost before the capture,
    /// or the capture missed it): `start` is the earliest copy seen.
    pub request_retransmitted: bool,
    pub retransmissions: u64,
    pub charges: Charges,
    /// The latest packet carrying request bytes (or the server's ACK showing them): the server's
    /// time begins after it.
    pub request_last_ns: Option<i64>,
    /// The first query: when the transport handshake was done (the client's first ACK after
    /// the SYN-ACK), and, over TLS, when its TLS handshake began (the ClientHello).
    pub handshake_done_ns: Option<i64>,
    pub tls_start_ns: Option<i64>,
    /// RTT samples towards the client while the response was delivered (each the smaller of it
    /// and the flow's sample before: one delayed ACK does not make a queue), summed and counted.
    pub response_rtt_sum_ns: i64,
    pub response_rtt_count: u32,
    /// The response's first sample, raw and as the rule above pairs it, until a second one
    /// comes: the sample before it timed an earlier exchange, so the pair is the next one.
    first_rtt: Option<(i64, i64)>,
    /// The flow's floor RTT towards the client and its handshake RTT, once the flow ended
    /// (`flow_verdicts`): the queueing part of the time budget is measured above the floor.
    pub base_rtt_ns: Option<i64>,
    pub handshake_rtt_ns: Option<i64>,
    /// When the server was held by the client's receive window (closed or full) while this query
    /// was open: (from, to), the last one open until the query ended when `to` is None.
    pub rwnd_limited: Vec<(i64, Option<i64>)>,
    response_end_seq: Option<u32>,
    /// The latest transmission of response bytes, resends included (TCP): the response was not
    /// delivered before it.
    last_tx_ns: Option<i64>,
    /// When the latest charge struck: an unanswered query lasts at least until then.
    last_charge_ns: Option<i64>,
    /// The first RTT sample towards the client after the response began: the queue it met.
    response_rtt_ns: Option<i64>,
    /// TLS over TCP: the client burst opening it carried handshake records only (see `TlsPart`).
    tls_handshake: bool,
    /// TLS over TCP: every client segment counted in its request so far was a control record
    /// (see `control_record`).
    control_only: bool,
    /// Every client segment in its request was a control record, whatever its timing (see
    /// `drop_parting_control`).
    control_records: bool,
    /// Where its request's first application bytes begin (sequence number; TLS handshake records
    /// excluded): server data whose ACK does not reach beyond it was sent before the server had
    /// read any of them (see `answers`).
    request_seq: Option<u32>,
    /// Where the response's bytes begin, its largest segment (at most the server's MSS: see
    /// `Seen::server_mss`), and the client's ACKs advancing through it before the one covering
    /// its end (see `delivered`).
    response_start_seq: Option<u32>,
    mss: u32,
    acks: AckPace,
}

/// The first and the latest client ACK advancing through a response: (time, ACK number).
#[derive(Debug, Clone, Copy, Default)]
struct AckPace {
    first: Option<(i64, u32)>,
    latest: Option<(i64, u32)>,
}

impl Query {
    /// An RTT sample while the response is delivered: `paired` the smaller of it and the flow's
    /// sample before (one delayed ACK does not make a queue), `raw` itself. The response's first
    /// is paired with its second instead: the flow's sample before it timed an earlier exchange,
    /// often before a queue built (unseen seed 246: a 367 ms response behind a 69 ms queue,
    /// charged 37 ms with its first sample paired with the handshake's).
    fn response_rtt(&mut self, paired: i64, raw: i64) {
        if self.response_rtt_count == 0 && self.first_rtt.is_none() {
            self.first_rtt = Some((raw, paired));
            return;
        }
        if let Some((first, _)) = self.first_rtt.take() {
            self.add_response_rtt(first.min(raw));
        }
        self.add_response_rtt(paired);
    }

    /// No more samples: a lone first one keeps its pairing with the sample before.
    fn response_rtt_done(&mut self) {
        if let Some((_, paired)) = self.first_rtt.take() {
            self.add_response_rtt(paired);
        }
    }

    fn add_response_rtt(&mut self, r: i64) {
        self.response_rtt_sum_ns += r;
        self.response_rtt_count += 1;
    }

    pub fn end_ns(&self) -> i64 {
        // Never before the start (a capture whose clock stepped back).
        self.acked_ns.unwrap_or_else(|| self.last_activity_ns().unwrap_or(self.start_ns)).max(self.start_ns)
    }
    /// The latest response byte, resend or charge. (`last_tx_ns` is never before `last_byte_ns`
    /// in the TCP tracker, but queries of QUIC streams read with a key log set only the latter.)
    fn last_activity_ns(&self) -> Option<i64> {
        self.last_tx_ns.max(self.last_byte_ns).max(self.last_charge_ns)
    }
    pub fn complete(&self) -> bool {
        self.first_byte_ns.is_some() && self.acked_ns.is_some()
    }
    /// A query found by `method`, its first request byte at `start_ns`.
    pub fn new(index: u32, start_ns: i64, method: Method) -> Query {
        Query { index, start_ns, method, ..Query::default() }
    }
    /// 1.0 where the exchange is read from the bytes or streams themselves (TCP, QUIC with a
    /// key log); lower where it is inferred from encrypted packets.
    pub fn confidence(&self) -> f64 {
        match (self.method, self.ambiguous) {
            (Method::TcpBytes | Method::QuicStreams, _) => 1.0,
            (Method::QuicInferred, false) => CONFIDENCE_INFERRED,
            (Method::QuicInferred, true) => CONFIDENCE_AMBIGUOUS,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueryTracker {
    current: Option<Query>,
    /// Finished queries whose row the flow-level verdicts may still change: held until the flow
    /// ends (see `settled`).
    pub done: Vec<Query>,
    /// Finished queries whose row is final, for the session to take while the flow lives.
    pub ready: Vec<Query>,
    /// Held queries written before the flow ended because more than `MAX_HELD_QUERIES` waited:
    /// their rows lack the flow-level verdicts' charges (counted in the run manifest).
    pub written_unsettled: u64,
    next_index: u32,
    first_syn_ns: Option<i64>,
    /// Setup costs seen before the first request (SYN and SYN-ACK loss, what struck the TLS
    /// handshake), and the handshake's retransmissions.
    pending_setup: Charges,
    pending_retransmissions: u64,
    /// The client's first data segment began with a TLS record header (None: no data yet). With
    /// the SYN seen, only the segment holding the stream's first byte decides (the first copy of
    /// a two-segment ClientHello's first part may be lost before the capture, which then shows
    /// its second part, then the resend).
    tls: Option<bool>,
    /// The client's first byte (sequence number), once its SYN was seen.
    stream_start: Option<u32>,
    /// Per direction (client's, server's): the record whose header a segment showed running on
    /// beyond it - that segment's sequence number, where the record ends, its type - so the next
    /// segments, which start inside it, are read as its body (see `records`).
    spill: [Option<(u32, u32, u8)>; 2],
    synack_sent: bool,
    /// Where the client's bytes counted as requests end (sequence number): a resend beyond it
    /// carries request bytes no query has seen.
    request_end: Option<u32>,
    /// The latest client bytes counted from the server's ACK (the capture missed them): their
    /// original, if written to the capture later, is no new request.
    acked_unseen: Option<(u32, u32)>,
    syn_seen: bool,
    /// The TLS handshake's start (its ClientHello), and the client's first ACK after the
    /// SYN-ACK, for the first query.
    pending_tls_start: Option<i64>,
    handshake_done: Option<i64>,
    /// A request whose bytes only a resend brought showed first as a hole at this time: its
    /// query starts there.
    request_since: Option<i64>,
    /// The flow's latest RTT sample towards the client.
    last_rtt_ns: Option<i64>,
    /// The smaller of its latest two: the round trip the path takes now, queue included.
    recent_rtt_ns: Option<i64>,
    /// The latest client packet: when, and whether its ACK covered all the server had sent.
    last_client: Option<(i64, bool)>,
    /// The server's highest ACK so far.
    server_acked: Option<u32>,
}

/// The shortest retransmission timeout (Linux's TCP_RTO_MIN; RFC 6298 says a second, Windows
/// 300 ms): a resend never comes sooner after its original.
const RTO_MIN_NS: i64 = 200_000_000;

/// The most a client segment carries (an Ethernet MSS): a hole of this many bytes below a
/// request was at least one segment lost before the capture (`lost_request_since`).
const HOLE_SEGMENT_BYTES: u32 = 1460;

/// The most client bytes a server's ACK may cover unseen and still count as a request.
const MAX_UNSEEN_REQUEST: u32 = 1 << 20;

/// One packet as the query tracker needs it.
pub struct Seen {
    pub c2s: bool,
    pub ts_ns: i64,
    /// The segment's sequence number and payload length (retransmissions included), and
    /// whether it is a SYN or carries a FIN (each takes a sequence number; not on a RST).
    pub seq: u32,
    pub seglen: u32,
    pub syn: bool,
    pub fin: bool,
    /// A RST without payload (its sequence number says nothing: `Segment::is_bare_rst`).
    pub bare_rst: bool,
    pub new_data: u32,
    pub ack: Option<u32>,
    /// The server's highest sequence sent so far (after this packet).
    pub server_next_seq: u32,
    pub tags: u32,
    pub retx_delay_ns: Option<i64>,
    /// The packet is the server's SYN-ACK.
    pub synack: bool,
    /// RTT sample towards the client this (client) packet gave, and the flow's minimum so far.
    pub rtt_ns: Option<i64>,
    pub rtt_min_ns: Option<i64>,
    /// A retransmission inside a recovery episode that began with a tail loss.
    pub tail_episode: bool,
    /// A reordered segment: how long the hole it filled was open.
    pub reorder_ns: Option<i64>,
    /// A resend filling a hole the capture had seen skipped (its bytes' first copy never reached
    /// it, so no query counted them): when the hole opened, and how many bytes it filled.
    pub hole: Option<(i64, u32)>,
    /// The TLS records the segment's payload starts with (None: no payload, no record header,
    /// or not read: `QueryTracker::reads_tls`).
    pub tls: Option<SegmentRecords>,
    /// After this packet the server is held by the client's receive window (closed, or too
    /// full for another segment: crate::pathology's rule, evaluated on the server's sends).
    pub rwnd_limited: bool,
    /// The server's segment size so far (`TcpState::server_mss`): its largest segment, never
    /// above the MSS the client's SYN offered, so a TSO/GSO super-segment of a capture taken
    /// above the NIC (up to 64 kB) is no MSS.
    pub server_mss: u32,
    /// Client packets sent just before this one that never reached the capture, by the client's
    /// IPv4 IDs (counted one by one per connection, as Linux does), with the client's
    /// retransmission timeout (RFC 6298) and tail loss probe timeout (2 SRTT) as the round trips
    /// through the capture estimate them; None when the IDs tell nothing.
    pub unseen_before: Option<(u16, i64, i64)>,
}

/// What a segment of a TLS connection carries, read from the record headers it starts with
/// (no decryption; docs/queries.md#tls-over-tcp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsPart {
    /// Handshake records: a ClientHello, a TLS 1.2 flight (ClientKeyExchange, ChangeCipherSpec,
    /// Finished; the server's certificate flight), TLS 1.3's ChangeCipherSpec and the encrypted
    /// Finished right behind it (RFC 8446 §D.4's middlebox compatibility mode).
    Handshake,
    /// One alert record and nothing else: 21, or in TLS 1.3 an application-data record of 19
    /// bytes - a 2-byte alert, its inner content type and a 16-byte AEAD tag (close_notify).
    Alert,
    /// Application data, or bytes that are no record start (the middle of a record).
    Other,
}

/// RFC 8446 §5.2: an encrypted alert's record body (alert 2 + content type 1 + AEAD tag 16).
const TLS13_ALERT_LEN: usize = 19;

/// The largest application-data record, on the wire, read as an HTTP/2 control record
/// (docs/queries.md#http2-control-records); a client segment of such records only, whole, is
/// control records (Go's client sends two WINDOW_UPDATE pairs in one 96-byte segment when its
/// reader falls behind the data: two-stack lab stack0015_clean, where a whole-segment limit
/// took that segment for the next request, 51 ms early). Go's HTTP/2 client, measured on
/// signatures/testdata/go-h2-window.pcap (TLS 1.3: a record is its frames + 22 bytes): SETTINGS
/// ACK 26-byte records, one WINDOW_UPDATE 30, the pair (stream + connection) 43 while a response
/// streams; PING would be 39. But requests whose headers HPACK indexes are as small: 32, 43 and
/// 46-byte records for GETs repeating a path or host. So size alone decides nothing: a control
/// record is a small segment that either comes while the server's data is unacknowledged (a
/// client sends requests after the response it waits for, unless it multiplexes - merged then
/// anyway, docs/queries.md#limits), or opened an exchange the server answered with nothing for
/// longer than a round trip (`restarts`).
const CONTROL_MAX: usize = 64;

/// How soon after the client's ACK completing a response a control record is its reaction to
/// that response (Go's client sends the connection's WINDOW_UPDATE ~0.1 ms after it, at the
/// server): beyond the path's minimum RTT plus this, a small record is the client's own next
/// message. Without it a TLS 1.2 request split 1/n-1 (a 31-byte record, the rest held by Nagle
/// until the server's delayed ACK 135 ms later: the corpus' tls1.2.pcap) lost its start.
const CONTROL_REACTION_NS: i64 = 10_000_000;

/// The segment is only whole small application-data records, as HTTP/2's WINDOW_UPDATE,
/// SETTINGS ACK, PING and RST_STREAM frames are (`CONTROL_MAX`), as far as the capture shows
/// them: Go's client sent ten 43-byte WINDOW_UPDATE records in one 480-byte segment, of which
/// snaplen 256 keeps four (two-stack lab stack0020_clean).
fn control_record(s: &Seen) -> bool {
    s.tls.is_some_and(|r| {
        !r.continued && r.only_application_data && r.read_to_end_or_snap && r.max_length + HEADER_LEN <= CONTROL_MAX
    })
}

/// A client burst restarts the open exchange when its request so far was control records
/// only, sent as the client read the previous response, unanswered, and the burst comes more
/// than the path's round trip after them (a request's
/// segments go out back to back; a control record sent as a response ended - Go's client sends
/// the connection's WINDOW_UPDATE once it read the body - is followed by the next request only
/// after the client's pause). A next request within one round trip keeps the earlier start: an
/// error below one RTT. A resend of bytes below the exchange's first (the last control record,
/// lost before the capture, its hole shown by the request that restarted the exchange) came
/// before that request, not after: two-stack lab stack0006_loss, where it restarted the request
/// 60 ms late a second time - 146 ms against the client's 395.
fn restarts(q: &Query, s: &Seen) -> bool {
    s.c2s
        && q.control_only
        && q.first_byte_ns.is_none()
        && q.request_seq.is_none_or(|r| SeqNumber(s.seq).at_or_after(r))
}

/// A whole request lost before the capture, its first copy sent at `first_left`, repaired by
/// the client's timer when the copy seen at `ts_ns` left: a tail loss.
fn lost_before_capture(q: &mut Query, first_left: i64, ts_ns: i64) {
    q.request_retransmitted = true;
    q.charges.add_charge("tail_loss", ts_ns - first_left, ts_ns);
}

/// The client sent this burst before the open exchange's answer could have reached it: it came
/// sooner after the server's first response byte than half the capture-to-client round trip
/// (`rtt_min_ns`: at a server-side capture the path's RTT, at a client-side one almost nothing,
/// so there this never holds). It is more of the same request, not a reaction to the answer:
/// HTTP/2's connection preface and SETTINGS, which the server answers with its own SETTINGS
/// while the client's first request is on its way (go-h2-preface: a query of its own, and the
/// request lost its connection setup), or requests pipelined behind the first.
/// (Not after the TLS handshake's own exchange: TLS 1.3 servers send their session tickets as
/// the client's Finished arrives, and the request follows the Finished at once.)
fn unseen_answer(q: &Query, s: &Seen) -> bool {
    s.c2s
        && !q.tls_handshake
        && q.first_byte_ns
            .zip(s.rtt_min_ns)
            .is_some_and(|(first, rtt)| rtt >= UNSEEN_MIN_RTT_NS && s.ts_ns - first < rtt / 2)
}

/// Server data can answer the open exchange only once the server has read some of its request:
/// its ACK reaches beyond the request's first byte. Data it sent before (its ACK still at or
/// below that byte: a hole in the client's stream held the request in its receive queue) answers
/// what came before - an HTTP/2 server's SETTINGS or TLS 1.3 session tickets, sent as the
/// client's Finished arrived. Two-stack lab (CI of e5fb1b1, stack0006_loss): a client's HTTP/2
/// preface was lost behind its Finished, its request and SETTINGS ACK arrived over the hole; the
/// server's SETTINGS (61 bytes, acknowledging the Finished only) was taken for the response and
/// the SETTINGS ACK for the next request - 202 ms against the client's 382, and an extra query.
/// An ACK behind the server's highest (`acked`: damaged, or a copy the network held) tells
/// nothing (the corpus' reasm_crash_anon: one 18 kB behind merged two requests).
fn answers(q: &Query, s: &Seen, acked: Option<u32>) -> bool {
    let unread = s
        .ack
        .zip(q.request_seq)
        .is_some_and(|(a, r)| SeqNumber(a).at_or_before(r) && acked.is_none_or(|m| SeqNumber(a).at_or_after(m)));
    q.first_byte_ns.is_some() || !unread
}

/// Below this capture-to-client round trip (a client-side capture, a LAN) `unseen_answer` decides
/// nothing: a client's reaction time is of the same order.
const UNSEEN_MIN_RTT_NS: i64 = 2_000_000;

fn tls_part(r: Option<&SegmentRecords>) -> TlsPart {
    let Some(r) = r else { return TlsPart::Other };
    let t = r.types();
    match t {
        [ALERT] if r.complete => TlsPart::Alert,
        [APPLICATION_DATA] if r.complete && r.first_length == TLS13_ALERT_LEN => TlsPart::Alert,
        // A flight's later records may lie beyond the captured bytes: a TLS 1.2 client's
        // application data sent in the same segment as its Finished (False Start) is missed.
        [HANDSHAKE, rest @ ..] if !rest.contains(&APPLICATION_DATA) => TlsPart::Handshake,
        // Only TLS 1.3's Finished may follow: a second application-data record is a request.
        [CHANGE_CIPHER_SPEC, rest @ ..]
            if r.complete
                && rest.iter().filter(|&&x| x == APPLICATION_DATA).count() <= 1
                && rest.iter().all(|&x| x == APPLICATION_DATA || x == HANDSHAKE) =>
        {
            TlsPart::Handshake
        }
        _ => TlsPart::Other,
    }
}

impl QueryTracker {
    /// Spare capacity back when worth a reallocation (`spare.rs`; called after every packet of a
    /// closed flow, whose `ready` empties and refills).
    pub fn shrink_to_fit(&mut self) {
        self.done.shrink_spare();
        self.ready.shrink_spare();
    }
    pub fn syn(&mut self, ts_ns: i64) {
        self.first_syn_ns.get_or_insert(ts_ns);
    }

    /// The resend (client's?, sequence number) was spurious (a D-SACK, an older echoed TSval):
    /// relabel its charge in the exchange that holds it, open or finished but not yet taken.
    pub fn prove_spurious(&mut self, c2s: bool, seq: u32) {
        let held = self.current.iter_mut().chain(self.done.iter_mut().rev()).chain(self.ready.iter_mut().rev());
        for q in held {
            if q.charges.prove_spurious((c2s, seq)) {
                return;
            }
        }
    }

    /// The TLS records a segment holds, as far as its captured bytes show them: from its first
    /// byte; or, when it starts inside a record whose header an earlier segment showed running on
    /// beyond that segment (a ~1.5 kB ClientHello with a post-quantum key share over two
    /// segments), as the rest of that record and what follows it.
    pub fn records(&mut self, c2s: bool, seq: u32, captured: &[u8], seglen: u32) -> Option<SegmentRecords> {
        let d = usize::from(!c2s);
        let inside = self.spill[d].filter(|&(from, end, _)| SeqNumber(seq).after(from) && SeqNumber(seq).before(end));
        let r = match inside {
            Some((_, end, ty)) => {
                Some(SegmentRecords::continuing(ty, end.wrapping_sub(seq) as usize, captured, seglen as usize))
            }
            None => SegmentRecords::walk(captured, seglen as usize),
        };
        if let Some((ty, end)) = r.as_ref().and_then(|r| r.spill(seglen as usize)) {
            self.spill[d] = Some((seq, seq.wrapping_add(end as u32), ty));
        }
        r
    }

    pub fn observe(&mut self, s: &Seen) {
        let lost_since = self.lost_request_since(s);
        let acked = self.server_acked;
        if let (false, Some(a)) = (s.c2s, s.ack) {
            if acked.is_none_or(|m| SeqNumber(a).after(m)) {
                self.server_acked = Some(a);
            }
        }
        if s.c2s {
            let all_acked = s.ack.is_some_and(|a| SeqNumber(a).at_or_after(s.server_next_seq));
            self.last_client = Some((s.ts_ns, all_acked));
        }
        if s.c2s && self.synack_sent && s.ack.is_some() && !s.syn {
            self.handshake_done.get_or_insert(s.ts_ns);
        }
        if s.c2s && s.syn {
            self.stream_start.get_or_insert(s.seq.wrapping_add(1));
        }
        let (mut request_bytes, resent_request) = self.request_bytes(s);
        // One delayed ACK inflates one sample: a queue shows in two in a row.
        let rtt = s.rtt_ns.map(|r| self.last_rtt_ns.map_or(r, |p| p.min(r)));
        self.last_rtt_ns = s.rtt_ns.or(self.last_rtt_ns);
        self.recent_rtt_ns = rtt.or(self.recent_rtt_ns);
        let decides =
            s.c2s && s.seglen > 0 && self.tls.is_none() && self.stream_start.map_or(s.new_data > 0, |b| b == s.seq);
        if decides {
            self.tls = Some(s.tls.is_some());
        }
        let part = if self.tls == Some(true) && s.seglen > 0 { tls_part(s.tls.as_ref()) } else { TlsPart::Other };
        if decides {
            // Data before the stream's first byte (the rest of a ClientHello whose first part
            // was lost before the capture) opened an exchange: the first byte says what it is.
            if let Some(q) = self.current.as_mut().filter(|q| q.first_byte_ns.is_none()) {
                q.tls_handshake = part == TlsPart::Handshake;
            }
        }
        // A client control record while the server's data is unacknowledged is no request
        // (see `control_record`).
        let control = s.c2s && part == TlsPart::Other && control_record(s);
        if control && s.ack.is_some_and(|a| SeqNumber(a).before(s.server_next_seq)) {
            request_bytes = 0;
        }
        // An alert (close_notify) asks nothing and answers nothing.
        if part == TlsPart::Alert {
            if s.c2s {
                request_bytes = 0;
            } else if request_bytes == 0 {
                return;
            }
        }
        // A request whose copies were lost before the capture starts when the first left (a
        // resend the capture can tell dates its request by its hole, `request_since`).
        let dated = lost_since.filter(|_| !resent_request);
        // A client burst after a response (or at the start) opens a new query.
        if request_bytes > 0 {
            let responded = self.current.as_ref().is_some_and(|q| q.first_byte_ns.is_some() && !unseen_answer(q, s));
            if self.current.is_none() || responded {
                let mut delivered = None;
                if let Some(q) = self.take_unless_handshake() {
                    let mut q = q;
                    late_ack(&mut q, s, control, self.recent_rtt_ns);
                    delivered = q.acked_ns;
                    if settled(&q) {
                        self.ready.push(q);
                    } else {
                        self.done.push(q);
                        if self.done.len() > MAX_HELD_QUERIES {
                            // Memory must not grow with one connection's exchanges: the oldest
                            // held query goes out as it is, without the verdicts' charges.
                            self.ready.push(self.done.remove(0));
                            self.written_unsettled += 1;
                        }
                    }
                }
                let since = self.request_since.take().or(dated);
                let mut q = Query {
                    index: self.next_index,
                    start_ns: since.map_or(s.ts_ns, |t| t.min(s.ts_ns)),
                    request_retransmitted: resent_request,
                    tls_handshake: part == TlsPart::Handshake,
                    ..Query::default()
                };
                self.next_index += 1;
                if q.index == 0 {
                    q.setup_ns = self.first_syn_ns.map(|t| (q.start_ns - t).max(0));
                    q.tls_start_ns = self.pending_tls_start.take();
                    q.handshake_done_ns = self.handshake_done;
                }
                q.charges = std::mem::take(&mut self.pending_setup);
                q.retransmissions = std::mem::take(&mut self.pending_retransmissions);
                if let Some(t) = dated {
                    lost_before_capture(&mut q, t, s.ts_ns);
                }
                // Only a control record the client sent as it read the previous response (its
                // ACK completing it just before) may be replaced (`restarts`).
                q.control_only = control
                    && delivered.is_some_and(|t| s.ts_ns - t <= s.rtt_min_ns.unwrap_or(0) + CONTROL_REACTION_NS);
                q.control_records = control;
                self.current = Some(q);
            } else if let Some(q) = self.current.as_mut().filter(|q| restarts(q, s)) {
                // Its request so far was control records the server answered with nothing for
                // longer than a round trip: this burst is the request (see `control_record`), and
                // may be one lost before the capture (two-stack lab stack0001_loss: an HTTP/2
                // request behind the WINDOW_UPDATE of the response before it, lost once, 145 ms
                // against the client's 489).
                q.start_ns = dated.map_or(s.ts_ns, |t| t.min(s.ts_ns));
                if let Some(t) = dated {
                    lost_before_capture(q, t, s.ts_ns);
                }
                (q.request_bytes, q.request_packets, q.request_seq) = (0, 0, None);
                if q.index == 0 {
                    q.setup_ns = self.first_syn_ns.map(|t| (q.start_ns - t).max(0));
                }
                q.control_only = control;
                q.control_records = control;
            } else if let Some(q) = self.current.as_mut() {
                q.control_only &= control;
                q.control_records &= control;
            }
        }
        if s.c2s && (part == TlsPart::Alert || s.fin) {
            self.drop_parting_control(s.ts_ns);
        }
        self.request_since = None;
        let Some(q) = self.current.as_mut() else {
            self.charge_setup(s);
            return;
        };
        if request_bytes > 0 {
            // Application data in the burst: a request went with the handshake's last flight.
            if q.first_byte_ns.is_none() && part == TlsPart::Other && s.new_data > 0 {
                q.tls_handshake = false;
            }
            q.request_bytes += u64::from(request_bytes);
            q.request_packets += u64::from(s.c2s);
            if s.c2s && part != TlsPart::Handshake {
                q.request_seq.get_or_insert(s.seq.wrapping_add(s.seglen).wrapping_sub(request_bytes));
            }
            q.request_last_ns = Some(s.ts_ns);
            // Some of its bytes came only as a resend, whichever packet opened it.
            q.request_retransmitted |= resent_request;
        }
        if s.c2s {
            // The first ACK covering the response's end delivers it; later ones (the ACK of the
            // server's FIN, window updates) say nothing more about this response.
            let unacked = q.acked_ns.is_none();
            if let (Some(r), Some(raw), Some(_), true) = (rtt, s.rtt_ns, q.first_byte_ns, unacked) {
                q.response_rtt(r, raw);
            }
            if let (Some(ack), Some(end), Some(begin), true) =
                (s.ack, q.response_end_seq, q.response_start_seq, unacked)
            {
                // A zero window acknowledging all sent so far holds the rest of the response
                // (a slow reader): it delivers nothing yet, and is charged.
                if SeqNumber(ack).at_or_after(end) && s.tags & tags::ZERO_WINDOW == 0 {
                    q.acked_ns = Some(delivered(q, s.ts_ns, end, s.rtt_min_ns));
                    q.response_rtt_done();
                } else if SeqNumber(ack).after(begin) && q.acks.latest.is_none_or(|(_, a)| SeqNumber(ack).after(a)) {
                    q.acks.first.get_or_insert((s.ts_ns, ack));
                    q.acks.latest = Some((s.ts_ns, ack));
                }
            }
            if q.first_byte_ns.is_some() && q.response_rtt_ns.is_none() {
                q.response_rtt_ns = s.rtt_ns;
            }
        } else if s.new_data > 0 && answers(q, s, acked) {
            q.first_byte_ns.get_or_insert(s.ts_ns);
            q.last_byte_ns = Some(s.ts_ns);
            q.response_bytes += u64::from(s.new_data);
            q.response_packets += 1;
            q.response_end_seq = Some(s.server_next_seq);
            q.response_start_seq.get_or_insert(s.seq);
            q.mss = q.mss.max(s.seglen.min(s.server_mss));
            q.acked_ns = None;
        }
        if !s.c2s && s.seglen > 0 && q.first_byte_ns.is_some() {
            q.last_tx_ns = Some(s.ts_ns);
        }
        window_held(q, s);
        // Once its response is delivered, what strikes (a late duplicate, a spurious resend) is
        // outside the query: charges stay inside [start, end].
        if q.acked_ns.is_none() {
            charge(q, s);
        }
    }

    /// The client's request bytes this packet shows: its new data; or bytes no query has
    /// counted whose first copy the capture did not see (lost before it, or missed by it): the
    /// part of a client resend beyond every byte counted, or client bytes the server's ACK
    /// covers. Those are flagged: the query's `start` is the earliest sign of them.
    fn request_bytes(&mut self, s: &Seen) -> (u32, bool) {
        if s.tags & tags::BAD_SEQ != 0 {
            return (0, false);
        }
        if !s.c2s {
            // The server acknowledges client bytes beyond all the capture showed: once the
            // handshake it answers was seen (a stale ACK before it is no evidence), and no more
            // than a plausible request (a larger jump is a damaged or foreign ACK number).
            let handshake = !self.syn_seen || self.synack_sent;
            return match (s.ack, self.request_end) {
                (Some(ack), Some(e))
                    if handshake && SeqNumber(ack).after(e) && ack.wrapping_sub(e) <= MAX_UNSEEN_REQUEST =>
                {
                    self.request_end = Some(ack);
                    self.acked_unseen = Some((e, ack));
                    (ack.wrapping_sub(e), true)
                }
                _ => (0, false),
            };
        }
        if s.bare_rst {
            return (0, false);
        }
        self.syn_seen |= s.syn;
        let data_end = s.seq.wrapping_add(s.seglen);
        let prev = self.request_end;
        // Where the client's sequence space now ends (a FIN takes one number; the SYN's is
        // below the first byte).
        let seq_end = if s.syn { s.seq.wrapping_add(1) } else { data_end.wrapping_add(u32::from(s.fin)) };
        if prev.is_none_or(|e| SeqNumber(seq_end).after(e)) {
            self.request_end = Some(seq_end);
        }
        if s.new_data > 0 {
            // New data, less what the server's ACK already counted (an original written to
            // the capture after that ACK).
            let counted = self.acked_unseen.map_or(0, |(a, b)| overlap((s.seq, data_end), (a, b)));
            return (s.new_data.saturating_sub(counted), false);
        }
        // A resend filling a hole in the request the capture saw skipped: those bytes' first copy
        // was lost before it, so none was counted (lab scenario request_resent: a 5 kB request
        // missing one segment counted 3,552 bytes). Into a query still waiting for its response
        // (the server answers once all of the request arrived) whose request skipped them (the
        // hole opened since it started); or, when the hole opened before any request or after
        // the last response began, a request of its own, lost whole before the capture (the
        // first held-out set: a 34-byte first request after a lost SYN-ACK, its hole shown by the
        // client's next ACK, resent 2.7 s later) - its query starts when the hole showed. Less
        // what the server's ACK already counted.
        if let (Some((opened, n)), Some(_)) = (s.hole, s.retx_delay_ns) {
            let since = match self.current.as_ref() {
                None => Some(i64::MIN),
                Some(q) if q.first_byte_ns.is_none() => Some(q.start_ns),
                Some(q) => q.first_byte_ns,
            };
            let hole = (s.seq, s.seq.wrapping_add(n));
            let counted = self.acked_unseen.map_or(0, |(a, b)| overlap(hole, (a, b)));
            if since.is_some_and(|t| opened >= t) && n > counted {
                if self.current.as_ref().is_none_or(|q| q.first_byte_ns.is_some()) {
                    self.request_since = Some(opened);
                }
                return (n - counted, true);
            }
        }
        // A resend (keep-alives and probes carry no retransmission delay): the part beyond every
        // byte counted so far.
        let from = prev.filter(|&e| SeqNumber(e).after(s.seq)).unwrap_or(s.seq);
        if s.retx_delay_ns.is_some() && SeqNumber(data_end).after(from) {
            (data_end.wrapping_sub(from), true)
        } else {
            (0, false)
        }
    }

    /// When a request first seen as new data was first sent, if its earlier copies were lost
    /// before the capture: the client's IPv4 IDs skipped packets just before it
    /// (`Seen::unseen_before`), its previous packet had acknowledged all the server sent (so
    /// the missing packets were no ACKs of the server's data), and it came at least the
    /// shortest retransmission timeout after that packet. Its copies went out a timeout apart,
    /// each doubling the last (RFC 6298 §5.5): the first that long before it, but not before
    /// the packet the client numbered before them. (Two-stack lab stack0006_loss: an HTTP/2
    /// request lost twice, 592 ms before its third copy reached the server; the query said
    /// 60 ms against the client's 652.)
    ///
    /// Bytes missing below it (a hole it shows) were segments of their own, lost before the
    /// capture too: they account for skipped IDs that are no copies of the request, and with
    /// them outstanding the client's first resend was Linux's tail loss probe of its last
    /// segment, two round trips after it (`tcp_schedule_loss_probe`: 2 SRTT with more than one
    /// packet out), not a timeout. (Another stack0006_loss run: a WINDOW_UPDATE and the request
    /// behind it lost, two IDs skipped; the request's probe came 189 ms after it on a 59 ms
    /// path, and dating it as two timeouts back put it at the packet before, 50 ms early.)
    fn lost_request_since(&self, s: &Seen) -> Option<i64> {
        let (skipped, rto, pto) = s.unseen_before?;
        let (prev_ns, all_acked) = self.last_client?;
        if !s.c2s || s.new_data == 0 || !all_acked {
            return None;
        }
        let hole = self
            .request_end
            .filter(|&e| SeqNumber(s.seq).after(e))
            .map_or(0, |e| s.seq.wrapping_sub(e).min(MAX_UNSEEN_REQUEST));
        let hole_segments = u16::try_from(hole.div_ceil(HOLE_SEGMENT_BYTES)).unwrap_or(u16::MAX);
        let copies = skipped.saturating_sub(hole_segments);
        let quiet = if hole > 0 { pto * 3 / 4 } else { RTO_MIN_NS };
        if copies == 0 || s.ts_ns - prev_ns < quiet {
            return None;
        }
        // Timeouts double (RFC 6298 §5.5); a probe does not, and the timer re-armed after it
        // starts from the RTO.
        let timeouts = |n: u16| rto.saturating_mul((1i64 << n.min(16)) - 1);
        let backoff = if hole > 0 { pto.saturating_add(timeouts(copies - 1)) } else { timeouts(copies) };
        Some(s.ts_ns.saturating_sub(backoff).max(prev_ns))
    }

    /// SYN and SYN-ACK loss before any request: the first query pays for them. A SYN repeated
    /// after our SYN-ACK went out is the client missing that SYN-ACK: the SYN-ACK's own repeat
    /// carries that cost, so it is not charged twice.
    fn charge_setup(&mut self, s: &Seen) {
        if s.tags & tags::SYN_RETRANSMISSION != 0 && !self.synack_sent {
            self.pending_setup.set_episode("syn_loss", s.retx_delay_ns.unwrap_or(0), s.ts_ns);
        } else if s.tags & tags::SYNACK_RETRANSMISSION != 0 {
            self.pending_setup.set_episode("synack_loss", s.retx_delay_ns.unwrap_or(0), s.ts_ns);
        }
        if s.synack {
            self.synack_sent = true;
        }
    }

    /// A TLS handshake exchange is the connection's setup, not a query: its index goes to the
    /// next query and, when that is the first (whose `setup_ns` runs from the SYN to it), so does
    /// what struck the handshake. (A later one - a TLS 1.2 renegotiation - is inside no query.)
    /// The current query taken out, unless it was one.
    fn take_unless_handshake(&mut self) -> Option<Query> {
        let mut q = self.current.take()?;
        q.response_rtt_done();
        if !q.tls_handshake {
            return Some(q);
        }
        self.next_index -= 1;
        if self.next_index == 0 {
            self.pending_tls_start.get_or_insert(q.tls_start_ns.unwrap_or(q.start_ns));
            self.pending_setup.absorb(q.charges);
            self.pending_retransmissions += q.retransmissions;
        }
        None
    }

    /// Whether this connection's segments are read for TLS record headers (`Seen::tls`): until
    /// its first client data segment shows whether it is TLS, and then if it is.
    pub fn reads_tls(&self) -> bool {
        self.tls != Some(false)
    }

    /// A client closing the connection (close_notify or FIN) after control records the server
    /// never answered asked nothing, when those records were its reaction to the previous
    /// response (`control_only`: HTTP/2's WINDOW_UPDATE once it read the body, then the
    /// connection closed idle) or its parting words (a GOAWAY just before the close). The
    /// two-stack lab: one extra query on nearly every HTTP/2 connection. A small request left
    /// unanswered is neither: the client waits for its answer before it closes.
    fn drop_parting_control(&mut self, ts_ns: i64) {
        let parting = self.current.as_ref().is_some_and(|q| {
            q.index > 0
                && q.first_byte_ns.is_none()
                && q.control_records
                && (q.control_only || q.request_last_ns.is_some_and(|t| ts_ns - t <= CONTROL_REACTION_NS))
        });
        if parting {
            self.current = None;
            self.next_index -= 1;
        }
    }

    /// The flow ended: every query it still holds is written with it, in index order.
    pub fn close(&mut self) {
        if let Some(q) = self.take_unless_handshake() {
            self.done.push(q);
        }
        if !self.ready.is_empty() {
            self.done.append(&mut self.ready);
            self.done.sort_by_key(|q| q.index);
        }
    }

    /// Flow-level verdicts, once the flow ended (after `close`): a policed flow's losses of server
    /// data were the policer's; a bloated flow's queries are charged the queue they met (their
    /// response's first RTT sample above the path's minimum; the first query also its handshake's).
    pub fn flow_verdicts(
        &mut self,
        policed: bool,
        bufferbloat: bool,
        base_rtt_ns: Option<i64>,
        handshake_rtt_ns: Option<i64>,
    ) {
        for q in self.done.iter_mut() {
            q.base_rtt_ns = base_rtt_ns;
            if q.index == 0 {
                q.handshake_rtt_ns = handshake_rtt_ns;
            }
            if policed {
                q.charges.blame_policer();
            }
            if let (true, Some(base)) = (bufferbloat, base_rtt_ns) {
                let setup = if q.index == 0 { handshake_rtt_ns } else { None };
                for rtt in [setup, q.response_rtt_ns].into_iter().flatten() {
                    if rtt - base >= QUEUE_MIN_NS {
                        q.charges.add("bufferbloat", rtt - base, q.start_ns);
                    }
                }
            }
        }
    }
}

/// Bytes two sequence ranges [start, end) share.
fn overlap(x: (u32, u32), y: (u32, u32)) -> u32 {
    let lo = if SeqNumber(x.0).after(y.0) { x.0 } else { y.0 };
    let hi = if SeqNumber(x.1).before(y.1) { x.1 } else { y.1 };
    if SeqNumber(hi).after(lo) {
        hi.wrapping_sub(lo)
    } else {
        0
    }
}

/// At most this many finished queries of one live flow wait for its verdicts (~400 bytes each).
/// A connection with more unsettled exchanges than this (thousands of requests on a slow or
/// lossy path) writes its oldest without the policing/bufferbloat charges decided at its end.
pub const MAX_HELD_QUERIES: usize = 1024;

/// A finished query whose row `flow_verdicts` cannot change, so it may be written before its
/// flow ends. Policing renames the charges for losses of server data; bufferbloat adds a charge
/// when an RTT sample of the query exceeds the flow's final minimum RTT by `QUEUE_MIN_NS`. That
/// minimum is unknown until the end, but never negative (samples below zero are dropped), so a
/// sample under `QUEUE_MIN_NS` can never be charged. The first query is always held: its setup
/// is charged against the handshake RTT, which may not be known yet.
fn settled(q: &Query) -> bool {
    let queue_free =
        q.response_rtt_count == 0 || q.response_rtt_sum_ns / i64::from(q.response_rtt_count) < QUEUE_MIN_NS;
    q.index != 0 && !q.charges.any_server_loss() && q.response_rtt_ns.is_none_or(|r| r < QUEUE_MIN_NS) && queue_free
}

/// The receive window's hold on the server while the response is under way: from a client's
/// zero window or a server send the window limits, to the server's first send it does not
/// limit (the state is judged on the server's sends; the budget clips it to the response).
fn window_held(q: &mut Query, s: &Seen) {
    if q.first_byte_ns.is_none() {
        return;
    }
    let open = q.rwnd_limited.last().is_some_and(|(_, to)| to.is_none());
    let closes = s.c2s && s.tags & tags::ZERO_WINDOW != 0;
    if !open && (closes || (!s.c2s && s.rwnd_limited)) {
        q.rwnd_limited.push((s.ts_ns, None));
    } else if open && !s.c2s && !s.rwnd_limited {
        if let Some(last) = q.rwnd_limited.last_mut() {
            last.1 = Some(s.ts_ns);
        }
    }
}

/// The client's next request acknowledges the previous response: its own ACK was lost (or
/// delayed into the request). It was delivered about a round trip after its last byte left: the
/// round trip the path took then (`recent_rtt`, the smaller of the latest two samples), not its
/// minimum - a bulk response's last segments wait longest in a queue it built (unseen pool seed
/// 222, BBR behind a 155 ms queue: a 265 kB response's ACK went with the next request, and the
/// minimum RTT ended the response 160 ms before its last segment could have arrived).
/// A control record (`control_record`) is no next request but the client's reaction to reading
/// the response (HTTP/2's WINDOW_UPDATE): its ACK is as timely as a bare one. Estimated instead,
/// the delivery missed the queue the response met (two-stack lab stack0029_queue: 345 ms against
/// the client's 463), and the WINDOW_UPDATE, now "long after" it, opened the next exchange in
/// place of the request 50 ms later.
fn late_ack(q: &mut Query, s: &Seen, control: bool, recent_rtt: Option<i64>) {
    if !s.c2s || q.acked_ns.is_some() || q.first_byte_ns.is_none() {
        return;
    }
    if let (Some(ack), Some(end)) = (s.ack, q.response_end_seq) {
        if SeqNumber(ack).at_or_after(end) {
            q.acked_ns = Some(if control {
                delivered(q, s.ts_ns, end, s.rtt_min_ns)
            } else {
                match (q.last_activity_ns(), recent_rtt.or(s.rtt_min_ns)) {
                    (Some(last), Some(rtt)) => (last + rtt).min(s.ts_ns),
                    _ => s.ts_ns,
                }
            });
        }
    }
}

/// A client ACK held this long or longer beyond when its last segment arrived is a delayed ACK
/// (Linux's minimum delayed-ACK time is 40 ms, TCP_DELACK_MIN; RFC 1122 §4.2.3.2 allows 500 ms).
const DELAYED_ACK_MIN_NS: i64 = 30_000_000;

/// When the response was delivered, given the client's ACK covering its end at `ack_ts`. That
/// ACK, when it covers a lone last segment (less than two full ones: a receiver acknowledges
/// every second full segment at once, RFC 9293 §3.8.6.3), may have waited for the client's
/// delayed-ACK timer: the lab's TLS clients held it 40-47 ms (QUIC vs TCP lab: 7 of 48 requests
/// ended that much after the client's own last byte). The last segment reached the client when
/// the ACKs before it pace it to - the latest ACK plus its bytes at the rate the earlier ACKs
/// covered the response - and no sooner than a minimum RTT after it left; an ACK that came
/// `DELAYED_ACK_MIN_NS` or more after that estimate is taken for a delayed one and the estimate is
/// the delivery. (A last segment the network itself held back as long looks the same: its
/// delivery is then early by the hold.)
fn delivered(q: &Query, ack_ts: i64, end: u32, rtt_min: Option<i64>) -> i64 {
    let (Some((t0, a0)), Some((t1, a1))) = (q.acks.first, q.acks.latest) else { return ack_ts };
    let last = end.wrapping_sub(a1);
    if last >= 2 * q.mss.max(1) {
        return ack_ts;
    }
    let paced = a1.wrapping_sub(a0);
    let rest = if t1 > t0 && paced > 0 { i64::from(last) * (t1 - t0) / i64::from(paced) } else { 0 };
    let floor = q.last_tx_ns.zip(rtt_min).map_or(t1, |(tx, r)| tx + r);
    let estimate = (t1 + rest).max(floor);
    if ack_ts - estimate >= DELAYED_ACK_MIN_NS {
        estimate
    } else {
        ack_ts
    }
}

fn charge(q: &mut Query, s: &Seen) {
    let delay = s.retx_delay_ns.unwrap_or(0);
    let charges = q.charges.len();
    if s.retx_delay_ns.is_some() && s.tags & (tags::SYN_RETRANSMISSION | tags::SYNACK_RETRANSMISSION) == 0 {
        let copy = s.tags & tags::RETX_NETWORK_DUPLICATE != 0;
        // a copy the network made is no resend: charged (as no repair) but not counted
        if !copy {
            q.retransmissions += 1;
        }
        let sig = if s.tags & tags::TAIL_LOSS != 0 || s.tail_episode {
            "tail_loss"
        } else if s.tags & tags::RETX_RTO != 0 {
            "rto"
        } else if s.tags & tags::RETX_FAST != 0 {
            "fast_retransmit"
        } else if s.tags & tags::RETX_TLP != 0 {
            "tlp"
        } else if s.tags & tags::RETX_SPURIOUS != 0 {
            "spurious_retransmission"
        } else {
            "retransmission"
        };
        let repair = !matches!(sig, "spurious_retransmission") && !copy;
        q.charges.add_resend(sig, delay, s.ts_ns, !copy, !s.c2s && repair, (s.c2s, s.seq));
    }
    if s.tags & tags::REORDERED != 0 {
        q.charges.add("reordering", s.reorder_ns.unwrap_or(0), s.ts_ns);
    }
    if s.tags & tags::ZERO_WINDOW != 0 {
        q.charges.add("zero_window", 0, s.ts_ns);
    }
    if q.charges.len() > charges {
        q.last_charge_ns = Some(s.ts_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A packet as the tracker sees it: client (c2s) or server, at `ms`, with a sequence range,
    /// the new bytes it carries and its ACK.
    fn seen(c2s: bool, ms: i64, seq: u32, len: u32, new: bool, ack: u32) -> Seen {
        Seen {
            c2s,
            ts_ns: ms * MS,
            seq,
            seglen: len,
            syn: false,
            fin: false,
            bare_rst: false,
            new_data: if new { len } else { 0 },
            ack: Some(ack),
            server_next_seq: if c2s { 0 } else { seq.wrapping_add(len) },
            tags: if new || len == 0 { 0 } else { tags::RETRANSMISSION | tags::RETX_RTO },
            retx_delay_ns: (!new && len > 0).then_some(200 * MS),
            synack: false,
            rtt_ns: None,
            rtt_min_ns: Some(40 * MS),
            tail_episode: false,
            reorder_ns: None,
            hole: None,
            tls: None,
            rwnd_limited: false,
            server_mss: u32::MAX,
            unseen_before: None,
        }
    }

    fn handshake(t: &mut QueryTracker) {
        t.syn(0);
        t.observe(&Seen { syn: true, ack: None, ..seen(true, 0, 99, 0, false, 0) });
        t.observe(&Seen { synack: true, ..seen(false, 20, 499, 0, false, 100) });
        t.observe(&seen(true, 40, 100, 0, false, 500));
    }

    /// The handshake, a 300-byte request at 40 ms and ten full segments of its response at 41 ms.
    fn request_and_ten_segments(t: &mut QueryTracker) {
        handshake(t);
        ten_segment_exchange(t);
    }

    /// A 300-byte request at 40 ms and ten full segments of its response at 41 ms.
    fn ten_segment_exchange(t: &mut QueryTracker) {
        t.observe(&seen(true, 40, 100, 300, true, 500));
        for i in 0..10 {
            t.observe(&Seen {
                server_next_seq: 500 + (i + 1) * 1448,
                ..seen(false, 41, 500 + i * 1448, 1448, true, 400)
            });
        }
    }

    /// A response of 10 full segments and a lone 720-byte last one, sent at 41 ms; the client
    /// ACKs every second segment as they arrive (80-82 ms), then the lone last one after
    /// `last_ack_ms` (its delayed-ACK timer, or at once).
    fn response_with_last_ack(last_ack_ms: i64) -> Query {
        let mut t = QueryTracker::default();
        request_and_ten_segments(&mut t);
        t.observe(&seen(false, 41, 500 + 10 * 1448, 720, true, 400));
        for i in 1..=5 {
            t.observe(&seen(true, 80 + i * 2 / 5, 400, 0, false, 500 + i as u32 * 2 * 1448));
        }
        t.observe(&seen(true, last_ack_ms, 400, 0, false, 500 + 10 * 1448 + 720));
        t.close();
        t.done.remove(0)
    }

    #[test]
    fn a_delayed_ack_of_the_last_segment_is_not_the_delivery() {
        let q = response_with_last_ack(122); // Linux's 40 ms delayed-ACK timer
        assert!((82 * MS..=83 * MS).contains(&q.end_ns()), "{}", q.end_ns());
        let q = response_with_last_ack(90); // 8 ms later: no delayed ACK to undo
        assert_eq!(q.end_ns(), 90 * MS);
    }

    /// Unseen pool seed 222 (BBR behind a 155 ms queue): the client's ACK of a response's end went
    /// with its next request. The response was delivered a round trip after its last segment
    /// left - the round trip its RTT samples showed then (200 ms, queue included), not the
    /// path's minimum (40 ms), which ended it before its last segment could have arrived.
    #[test]
    fn an_ack_delayed_into_the_next_request_ends_the_response_a_current_round_trip_after_it() {
        let mut t = QueryTracker::default();
        request_and_ten_segments(&mut t);
        for i in 1..=4 {
            let ack = seen(true, 240 + i64::from(i), 400, 0, false, 500 + i * 2 * 1448);
            t.observe(&Seen { rtt_ns: Some(200 * MS), ..ack });
        }
        t.observe(&seen(true, 1_000, 400, 300, true, 500 + 10 * 1448));
        t.close();
        assert_eq!(t.done.remove(0).end_ns(), 241 * MS);
    }

    /// Unseen pool seed 246 (a 69 ms queue on a 333 ms path): a response's first RTT sample
    /// was paired with the flow's sample before it, the handshake's, taken before the queue built,
    /// and half its queueing went uncharged. It is paired with the response's next sample; a lone
    /// one keeps the sample before (a delayed ACK of a short response is no queue).
    #[test]
    fn a_responses_first_rtt_sample_pairs_with_its_next() {
        let queued = |acks: u32| {
            let mut t = QueryTracker::default();
            handshake(&mut t);
            t.observe(&Seen { rtt_ns: Some(40 * MS), ..seen(true, 40, 100, 0, false, 500) });
            ten_segment_exchange(&mut t);
            for i in 1..=acks {
                let ack = seen(true, 183 + i64::from(i), 400, 0, false, 500 + i * 10 / acks * 1448);
                t.observe(&Seen { rtt_ns: Some(140 * MS), ..ack });
            }
            t.close();
            let q = t.done.remove(0);
            q.response_rtt_sum_ns / i64::from(q.response_rtt_count)
        };
        assert_eq!(queued(3), 140 * MS);
        assert_eq!(queued(1), 40 * MS);
    }

    /// A capture above TSO/GSO: the response leaves as three 20,000-byte super-segments (the
    /// client's SYN offered 1,448). The client's last ACK covers 20,000 bytes at once, 40 ms
    /// after the one before: a receiver ACKs every second full-size segment at once, so that is
    /// no delayed ACK of a lone last segment, and the query ends at it. Taking the largest
    /// segment for the MSS, it was undone as one (the query ended 40 ms early).
    #[test]
    fn a_super_segment_is_no_mss_for_the_delayed_ack_rule() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 40, 100, 300, true, 500));
        for i in 0..3 {
            t.observe(&Seen { server_mss: 1448, ..seen(false, 41, 500 + i * 20_000, 20_000, true, 400) });
        }
        t.observe(&seen(true, 80, 400, 0, false, 20_500));
        t.observe(&seen(true, 81, 400, 0, false, 40_500));
        t.observe(&seen(true, 121, 400, 0, false, 60_500));
        t.close();
        assert_eq!(t.done.remove(0).end_ns(), 121 * MS);
    }

    /// A segment of `len` bytes starting with TLS records of these (type, body length).
    fn tls(c2s: bool, ms: i64, seq: u32, len: u32, ack: u32, records: &[(u8, usize)]) -> Seen {
        let mut bytes = Vec::new();
        for &(ty, n) in records {
            bytes.extend([ty, 3, 3, (n >> 8) as u8, n as u8]);
            bytes.resize(bytes.len() + n, if ty == HANDSHAKE { 1 } else { 0 });
        }
        let shown = &bytes[..bytes.len().min(62)]; // a 128-byte snaplen
        Seen { tls: SegmentRecords::walk(shown, len as usize), ..seen(c2s, ms, seq, len, true, ack) }
    }

    /// TLS 1.3 with middlebox compatibility (the lab's Python client, curl, browsers): ClientHello,
    /// the server's flight, ChangeCipherSpec + Finished, the server's session tickets, then the
    /// requests; close_notify both ways at the end.
    #[test]
    fn a_tls_handshake_is_the_first_requests_setup() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&tls(true, 41, 100, 517, 500, &[(HANDSHAKE, 512)]));
        t.observe(&tls(
            false,
            43,
            500,
            754,
            617,
            &[(HANDSHAKE, 122), (CHANGE_CIPHER_SPEC, 1), (APPLICATION_DATA, 600)],
        ));
        t.observe(&tls(true, 84, 617, 80, 1254, &[(CHANGE_CIPHER_SPEC, 1), (APPLICATION_DATA, 69)]));
        t.observe(&tls(false, 85, 1254, 542, 697, &[(APPLICATION_DATA, 266), (APPLICATION_DATA, 266)]));
        t.observe(&tls(true, 90, 697, 300, 1796, &[(APPLICATION_DATA, 295)]));
        t.observe(&tls(false, 95, 1796, 1000, 997, &[(APPLICATION_DATA, 995)]));
        t.observe(&seen(true, 135, 997, 0, false, 2796));
        t.observe(&tls(true, 200, 997, 300, 2796, &[(APPLICATION_DATA, 295)]));
        t.observe(&tls(false, 205, 2796, 1000, 1297, &[(APPLICATION_DATA, 995)]));
        t.observe(&seen(true, 245, 1297, 0, false, 3796));
        t.observe(&tls(true, 300, 1297, 24, 3796, &[(APPLICATION_DATA, 19)])); // close_notify
        t.observe(&tls(false, 301, 3796, 24, 1321, &[(APPLICATION_DATA, 19)]));
        t.close();
        let qs = &t.done;
        assert_eq!(qs.len(), 2, "two requests: the handshake's two exchanges and the alerts are none");
        assert_eq!((qs[0].index, qs[0].start_ns, qs[0].setup_ns), (0, 90 * MS, Some(90 * MS)));
        assert_eq!((qs[0].handshake_done_ns, qs[0].tls_start_ns), (Some(40 * MS), Some(41 * MS)));
        assert_eq!((qs[0].request_bytes, qs[0].response_bytes, qs[0].end_ns()), (300, 1000, 135 * MS));
        assert_eq!((qs[1].index, qs[1].response_bytes, qs[1].end_ns()), (1, 1000, 245 * MS));
    }

    #[test]
    fn a_request_sent_with_the_finished_flight_is_a_query() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&tls(true, 41, 100, 517, 500, &[(HANDSHAKE, 512)]));
        t.observe(&tls(false, 43, 500, 754, 617, &[(HANDSHAKE, 749)]));
        // Finished, then the request right behind it (its own segment, or the same one)
        t.observe(&tls(true, 84, 617, 80, 1254, &[(CHANGE_CIPHER_SPEC, 1), (APPLICATION_DATA, 69)]));
        t.observe(&tls(true, 84, 697, 300, 1254, &[(APPLICATION_DATA, 295)]));
        t.observe(&tls(false, 130, 1254, 1000, 997, &[(APPLICATION_DATA, 995)]));
        t.observe(&tls(
            true,
            300,
            997,
            380,
            2254,
            &[(CHANGE_CIPHER_SPEC, 1), (APPLICATION_DATA, 69), (APPLICATION_DATA, 295)],
        ));
        t.observe(&tls(false, 330, 2254, 1000, 1377, &[(APPLICATION_DATA, 995)]));
        t.close();
        let qs = &t.done;
        assert_eq!(qs.len(), 2);
        assert_eq!((qs[0].index, qs[0].start_ns, qs[0].request_bytes), (0, 84 * MS, 380));
        assert_eq!((qs[0].setup_ns, qs[1].request_bytes), (Some(84 * MS), 380));
    }

    /// Two-stack lab (CI of e5fb1b1, stack0006_loss): the client's HTTP/2 preface was lost
    /// behind its Finished; its request and then its SETTINGS ACK arrived over the hole. The
    /// server's SETTINGS, sent as the Finished arrived (its ACK no further), answers none of the
    /// request: the request is one query from the Finished to the response after the resend.
    #[test]
    fn a_servers_message_sent_before_it_read_the_request_answers_none_of_it() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&tls(true, 41, 100, 517, 500, &[(HANDSHAKE, 512)]));
        t.observe(&tls(false, 43, 500, 754, 617, &[(HANDSHAKE, 749)]));
        t.observe(&tls(true, 84, 617, 80, 1254, &[(CHANGE_CIPHER_SPEC, 1), (APPLICATION_DATA, 69)]));
        // 697..789 (the preface) lost before the capture; the request over the hole
        t.observe(&tls(true, 84, 789, 79, 1254, &[(APPLICATION_DATA, 74)]));
        t.observe(&tls(false, 84, 1254, 61, 697, &[(APPLICATION_DATA, 56)])); // SETTINGS
        t.observe(&tls(true, 125, 868, 31, 1315, &[(APPLICATION_DATA, 26)])); // SETTINGS ACK
        t.observe(&Seen { hole: Some((84 * MS, 92)), ..seen(true, 150, 697, 92, false, 1315) });
        t.observe(&tls(false, 151, 1315, 1000, 899, &[(APPLICATION_DATA, 995)]));
        t.observe(&seen(true, 192, 899, 0, false, 2315));
        t.close();
        let qs = &t.done;
        assert_eq!(qs.len(), 1, "{qs:?}");
        assert_eq!((qs[0].start_ns, qs[0].first_byte_ns, qs[0].end_ns()), (84 * MS, Some(151 * MS), 192 * MS));
        assert_eq!((qs[0].request_bytes, qs[0].response_bytes, qs[0].request_retransmitted), (282, 1000, true));
    }

    /// The corpus' reasm_crash_anon: a response whose ACK number is damaged (18 kB behind the
    /// server's ACKs before) still answers its request.
    #[test]
    fn a_damaged_ack_behind_the_servers_says_nothing_of_what_it_read() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 100, 100, 13, true, 500));
        t.observe(&seen(false, 101, 500, 54, true, 113));
        t.observe(&seen(true, 141, 113, 0, false, 554));
        t.observe(&seen(true, 200, 113, 13, true, 554));
        t.observe(&seen(false, 201, 554, 54, true, 113u32.wrapping_sub(18_000)));
        t.observe(&seen(true, 241, 126, 0, false, 608));
        t.close();
        let lat: Vec<i64> = t.done.iter().map(|q| (q.end_ns() - q.start_ns) / MS).collect();
        assert_eq!(lat, vec![41, 41]);
    }

    #[test]
    fn a_request_first_seen_as_its_resend_opens_its_query() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        // The request (100..300) was lost before the capture; the server sees its resend (judged
        // one: the server had acknowledged none of it, and our mark says so), then answers.
        t.observe(&seen(true, 300, 100, 200, false, 500));
        t.observe(&seen(false, 310, 500, 1000, true, 300));
        t.observe(&seen(true, 350, 300, 0, false, 1500));
        t.close();
        let q = &t.done[0];
        assert_eq!((q.index, q.request_bytes, q.response_bytes), (0, 200, 1000));
        assert!(q.request_retransmitted && q.complete());
        assert_eq!((q.start_ns, q.end_ns()), (300 * MS, 350 * MS));
        assert_eq!(q.charges.items().collect::<Vec<_>>(), vec![("rto", 200 * MS)]);
    }

    /// The server's tail resend (charged as tail loss when it left) is proved spurious by the
    /// client's D-SACK after the exchange ended: its charge becomes spurious, and it repaired no
    /// loss of the server's data. Without the relabel the queries table kept "tail_loss" while
    /// the events and packets tables said spurious.
    #[test]
    fn a_resend_proved_spurious_later_is_relabelled_in_its_query() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 100, 1, 200, true, 1));
        t.observe(&seen(false, 120, 1, 1000, true, 201));
        let mut resend = seen(false, 400, 1, 1000, false, 201);
        resend.tags |= tags::TAIL_LOSS;
        t.observe(&resend);
        t.observe(&seen(true, 450, 201, 0, false, 1001));
        t.prove_spurious(false, 1);
        t.observe(&seen(true, 600, 201, 100, true, 1001));
        t.close();
        let q = &t.done[0];
        assert_eq!(q.charges.items().collect::<Vec<_>>(), vec![("spurious_retransmission", 200 * MS)]);
        assert!(!q.charges.any_server_loss());
    }

    /// Lab scenario request_resent: a request's first segment is lost before the capture, the
    /// rest arrives and opens the query, and the client's resend fills the hole. The hole's
    /// bytes were never counted: they are the request's too, and it is flagged.
    #[test]
    fn a_resend_filling_a_hole_in_the_request_counts_its_bytes() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 50, 150, 150, true, 500)); // 100..150 lost before the capture
        t.observe(&Seen { hole: Some((50 * MS, 50)), ..seen(true, 90, 100, 50, false, 500) });
        t.observe(&seen(false, 91, 500, 1000, true, 300));
        t.observe(&seen(true, 131, 300, 0, false, 1500));
        // The next request; a resend into a hole opened before it began (an older request's,
        // or a damaged sequence number's) is not its bytes.
        t.observe(&seen(true, 200, 300, 100, true, 1500));
        t.observe(&Seen { hole: Some((90 * MS, 30)), ..seen(true, 210, 120, 30, false, 1500) });
        t.observe(&seen(false, 211, 1500, 500, true, 400));
        t.observe(&seen(true, 251, 400, 0, false, 2000));
        t.close();
        assert_eq!(t.done.len(), 2);
        let q = &t.done[0];
        assert_eq!((q.request_bytes, q.response_bytes, q.request_retransmitted), (200, 1000, true));
        assert_eq!((q.start_ns, q.end_ns()), (50 * MS, 131 * MS), "from the earliest copy seen");
        let q = &t.done[1];
        assert_eq!((q.index, q.request_bytes, q.request_retransmitted), (1, 100, false));
    }

    #[test]
    fn client_bytes_the_server_acknowledges_unseen_are_a_request() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        // The capture missed the request; the server's ACK covers it, then its response; the
        // original, written to the file late, adds nothing.
        t.observe(&seen(false, 60, 500, 0, false, 115));
        t.observe(&seen(false, 61, 500, 88, true, 115));
        t.observe(&seen(true, 59, 100, 15, true, 500));
        t.observe(&seen(true, 80, 115, 0, false, 588));
        t.close();
        assert_eq!(t.done.len(), 1);
        let q = &t.done[0];
        assert_eq!((q.request_bytes, q.response_bytes, q.request_retransmitted), (15, 88, true));
    }

    #[test]
    fn a_query_does_not_end_before_its_response_was_repaired() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 50, 100, 100, true, 500));
        t.observe(&seen(false, 60, 500, 1000, true, 200));
        t.observe(&seen(false, 61, 1500, 1000, true, 200));
        // The tail was lost; its resend leaves at 400 ms, and the client's ACK of it is lost:
        // the next request acknowledges the response.
        t.observe(&seen(false, 400, 1500, 1000, false, 200));
        t.observe(&seen(true, 900, 200, 100, true, 2500));
        t.close();
        let q = &t.done[0];
        assert_eq!(q.end_ns(), 440 * MS, "the resend + the minimum RTT, not the last new byte's");
        assert_eq!(t.done[1].index, 1);
    }

    /// A slow reader: its zero window acknowledges everything sent so far, the server waits
    /// until the window opens and sends the rest. The query was held by the window, not over.
    #[test]
    fn a_zero_window_holds_the_response_it_acknowledges() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 50, 100, 100, true, 500));
        t.observe(&seen(false, 60, 500, 1000, true, 200));
        let zero = Seen { tags: tags::ZERO_WINDOW, ..seen(true, 100, 200, 0, false, 1500) };
        t.observe(&zero);
        let probe = seen(false, 400, 1499, 1, false, 200);
        t.observe(&Seen { rwnd_limited: true, tags: tags::ZERO_WINDOW_PROBE, retx_delay_ns: None, ..probe });
        t.observe(&seen(true, 5_000, 200, 0, false, 1500)); // the window opens
        t.observe(&seen(false, 5_001, 1500, 1000, true, 200));
        t.observe(&seen(true, 5_041, 200, 0, false, 2500));
        t.close();
        assert_eq!(t.done.len(), 1);
        let q = &t.done[0];
        assert_eq!((q.response_bytes, q.end_ns()), (2000, 5_041 * MS));
        assert!(q.charges.items().any(|(sig, _)| sig == "zero_window"));
        let b = crate::budget::budget(q);
        assert_eq!(b.get(crate::budget::Part::RwndLimited), 4_901 * MS, "from the zero window to the next send");
    }

    /// ssh-dups.pcap (a SPAN port that copies every packet): a query's response copied by the
    /// network has one retransmission, the sender's resend, not the copies (issue 30 item 8).
    #[test]
    fn network_copies_are_no_retransmissions_of_the_query() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 50, 100, 100, true, 500));
        t.observe(&seen(false, 60, 500, 1000, true, 200));
        let copy = seen(false, 60, 500, 1000, false, 200);
        t.observe(&Seen { tags: tags::RETRANSMISSION | tags::RETX_NETWORK_DUPLICATE, retx_delay_ns: Some(0), ..copy });
        t.observe(&seen(false, 300, 500, 1000, false, 200)); // the RTO resend
        t.observe(&seen(true, 340, 200, 0, false, 1500));
        t.close();
        assert_eq!(t.done.len(), 1);
        assert_eq!(t.done[0].retransmissions, 1);
    }

    #[test]
    fn an_unanswered_request_lasts_until_what_it_was_charged() {
        let mut t = QueryTracker::default();
        handshake(&mut t);
        t.observe(&seen(true, 50, 100, 18, true, 500));
        t.observe(&seen(true, 300_050, 100, 18, false, 500));
        t.close();
        let q = &t.done[0];
        assert_eq!(q.end_ns(), 300_050 * MS);
        assert_eq!(q.retransmissions, 1);
    }

    /// A segment of one TLS application-data record, `len` bytes with its header.
    fn app_data(len: u32) -> Option<SegmentRecords> {
        let body = len as usize - HEADER_LEN;
        let mut b = vec![APPLICATION_DATA, 3, 3, (body >> 8) as u8, body as u8];
        b.resize(len as usize, 0);
        SegmentRecords::walk(&b, len as usize)
    }

    /// The handshake, a 300-byte request at 40 ms, its 1,000-byte response at 41 ms, the client's
    /// ACK of it at 81 ms and a 48-byte HTTP/2 WINDOW_UPDATE record at 82 ms (client bytes to 448).
    fn exchange_then_window_update(t: &mut QueryTracker) {
        handshake(t);
        t.observe(&Seen { tls: app_data(300), ..seen(true, 40, 100, 300, true, 500) });
        t.observe(&Seen { tls: app_data(1000), ..seen(false, 41, 500, 1000, true, 400) });
        t.observe(&seen(true, 81, 400, 0, false, 1500));
        t.observe(&Seen { tls: app_data(48), ..seen(true, 82, 400, 48, true, 1500) });
    }

    /// Every query of the flow once it ended, in index order (`QueryTracker::close`).
    fn closed_queries(mut t: QueryTracker) -> Vec<Query> {
        t.close();
        t.done
    }

    /// Two-stack lab stack0001_loss: an HTTP/2 client's WINDOW_UPDATE (a 48-byte record) as it
    /// read a response opened an exchange; its next request, sent 350 ms later, was lost before
    /// the capture and its copy came a retransmission timeout after (the client's IPv4 IDs skipped
    /// one, `unseen_before`). The request replaces the control record's exchange and starts when
    /// its first copy left, charged as tail loss; the query said 145 ms against the client's 489.
    #[test]
    fn a_request_lost_before_the_capture_after_a_control_record_starts_when_it_left() {
        let run = |unseen_before: Option<(u16, i64, i64)>| {
            let mut t = QueryTracker::default();
            exchange_then_window_update(&mut t);
            t.observe(&seen(false, 122, 1500, 0, false, 448));
            let request = Seen { tls: app_data(52), unseen_before, ..seen(true, 1000, 448, 52, true, 1500) };
            t.observe(&request);
            t.observe(&Seen { tls: app_data(1000), ..seen(false, 1001, 1500, 1000, true, 500) });
            t.observe(&seen(true, 1041, 500, 0, false, 2500));
            let mut all = closed_queries(t);
            assert_eq!(all.len(), 2, "the control record is no query of its own");
            let q = all.remove(1);
            let tail: i64 = q.charges.items().filter(|c| c.0 == "tail_loss").map(|c| c.1).sum();
            (q.start_ns / MS, q.request_bytes, q.request_retransmitted, tail / MS)
        };
        assert_eq!(run(None), (1_000, 52, false, 0));
        assert_eq!(run(Some((1, 240 * MS, 100 * MS))), (760, 52, true, 240));
    }

    /// Two-stack lab stack0006_loss: the client's last WINDOW_UPDATE after a response and its
    /// next request 50 ms later (49 bytes, as small as a control record) were both lost before
    /// the capture; the request's copy came first, the tail loss probe 190 ms after it (the IDs
    /// skipped two: one of them the WINDOW_UPDATE whose hole it shows), then the control
    /// record's, filling that hole. The control record's resend repeats bytes sent before the
    /// request: the query keeps the request's start (it had restarted at that resend, 60 ms
    /// late: 146 ms against the client's 395), dated one probe back (two timeouts back, it was
    /// the packet before: 50 ms early).
    #[test]
    fn a_control_record_resent_after_the_request_is_no_later_request() {
        let mut t = QueryTracker::default();
        exchange_then_window_update(&mut t);
        let request = Seen {
            tls: app_data(49),
            unseen_before: Some((2, 300 * MS, 190 * MS)),
            ..seen(true, 322, 496, 49, true, 1500)
        };
        t.observe(&request);
        let fill = Seen {
            tls: app_data(48),
            hole: Some((322 * MS, 48)),
            retx_delay_ns: Some(60 * MS),
            ..seen(true, 382, 448, 48, false, 1500)
        };
        t.observe(&fill);
        t.observe(&Seen { tls: app_data(1000), ..seen(false, 383, 1500, 1000, true, 545) });
        t.observe(&seen(true, 423, 545, 0, false, 2500));
        let all = closed_queries(t);
        assert_eq!(all.len(), 2, "the control records are no query of their own");
        let q = &all[1];
        assert_eq!((q.start_ns / MS, q.request_bytes, q.request_retransmitted), (132, 97, true));
        assert_eq!(q.response_bytes, 1000);
    }
}

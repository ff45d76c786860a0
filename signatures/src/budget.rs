//! A query's time budget: its latency split into disjoint parts that add up to it exactly, each
//! instant of it charged to one cause (docs/queries.md#time-budget). The idea is T-RAT's
//! rate-limiting factors (Zhang, Breslau, Paxson, Shenker, SIGCOMM 2002) and critical-path
//! analysis (WProf, Wang et al., NSDI 2013): what the user waited for at each moment, not the
//! sum of every delay that struck, so overlapping waits count once and shares never pass 100 %.
//!
//! The span is the latency users see: from the connection's first SYN (QUIC: first Initial) for
//! a connection's first query, else from the first request byte, to the query's end. It is cut
//! into phases, each with a default part: the transport handshake, the client's pause after it
//! (other), the TLS handshake, the
//! request's upload (transfer), the server's time (last request byte to first response byte at
//! the vantage), the response's delivery (transfer). Over those, the waits the query was charged
//! (a resend's time since its bytes were first sent; a repeated SYN's since the first) and the
//! receive window's holds are painted, the most binding first (`WAIT_RANK`). Last, the share of
//! the response's delivery and of the handshake spent above the flow's floor RTT moves from
//! transfer/handshake to queueing.

use crate::queries::{Query, QUEUE_MIN_NS};

/// The parts of a query's latency, in the order of the `budget_*_ns` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The transport handshake: first SYN (QUIC: first Initial) to the TLS ClientHello, or to
    /// the first request byte without a separate TLS exchange (QUIC's TLS is inside it).
    Handshake,
    /// TLS over TCP: the ClientHello to the first request byte.
    TlsHandshake,
    SynLoss,
    SynackLoss,
    /// The last request byte seen to the first response byte: the server's time at the vantage.
    Server,
    /// The request's upload and the response's delivery at the path's floor RTT.
    Transfer,
    /// RTT above the flow's floor while the response was delivered (or the handshake ran).
    Queueing,
    Rto,
    Tlp,
    FastRetransmit,
    TailLoss,
    SpuriousRetransmission,
    /// A resend of undetermined cause.
    Retransmission,
    /// A policed flow's drops, waiting for their repair.
    Policing,
    /// The client's receive window closed or full: the server could not send.
    RwndLimited,
    /// What no phase explains: an unanswered request's wait; the client's pause between its
    /// handshake and its first request (or ClientHello).
    Other,
}

use Part::*;

pub const PARTS: [Part; 16] = [
    Handshake,
    TlsHandshake,
    SynLoss,
    SynackLoss,
    Server,
    Transfer,
    Queueing,
    Rto,
    Tlp,
    FastRetransmit,
    TailLoss,
    SpuriousRetransmission,
    Retransmission,
    Policing,
    RwndLimited,
    Other,
];

impl Part {
    pub fn name(self) -> &'static str {
        match self {
            Handshake => "handshake",
            TlsHandshake => "tls_handshake",
            SynLoss => "syn_loss",
            SynackLoss => "synack_loss",
            Server => "server",
            Transfer => "transfer",
            Queueing => "queueing",
            Rto => "rto",
            Tlp => "tlp",
            FastRetransmit => "fast_retransmit",
            TailLoss => "tail_loss",
            SpuriousRetransmission => "spurious_retransmission",
            Retransmission => "retransmission",
            Policing => "policing",
            RwndLimited => "rwnd_limited",
            Other => "other",
        }
    }

    /// The wait a charged signature stands for. QUIC's recovery maps onto TCP's: its
    /// packet- and time-threshold losses are its fast retransmit, its probe timeout its timer.
    fn of_wait(sig: &str) -> Option<Part> {
        Some(match sig {
            "syn_loss" => SynLoss,
            "synack_loss" => SynackLoss,
            "tail_loss" => TailLoss,
            "rto" | "quic_pto" | "quic_pto_stall" => Rto,
            "tlp" => Tlp,
            "fast_retransmit" | "quic_packet_threshold" | "quic_time_threshold" => FastRetransmit,
            "spurious_retransmission" => SpuriousRetransmission,
            "retransmission" | "quic_retransmission" => Retransmission,
            "policing" => Policing,
            _ => return None,
        })
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Where waits overlap, the instant goes to the first of these that covers it: a lost SYN
/// holds everything behind it; a timeout outlasts the faster repairs beside it; a spurious
/// resend and the receive window's hold only explain time no loss does.
const WAIT_RANK: [Part; 10] = [
    SynLoss,
    SynackLoss,
    TailLoss,
    Rto,
    Policing,
    Tlp,
    FastRetransmit,
    Retransmission,
    SpuriousRetransmission,
    RwndLimited,
];

/// Nanoseconds per part, indexed as `PARTS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Budget(pub [i64; PARTS.len()]);

impl Budget {
    pub fn get(&self, p: Part) -> i64 {
        self.0[p.index()]
    }
    pub fn total(&self) -> i64 {
        self.0.iter().sum()
    }
    /// Move up to `ns` from one part to another (never below zero).
    fn shift(&mut self, from: Part, to: Part, ns: i64) {
        let n = ns.clamp(0, self.0[from.index()]);
        self.0[from.index()] -= n;
        self.0[to.index()] += n;
    }
}

/// The budget of one query: parts >= 0 summing to `end - start + setup` (its `latency_ns` plus
/// its `setup_ns`, the latency `query_facts` reports).
pub fn budget(q: &Query) -> Budget {
    budget_in(q, &mut Scratch::default())
}

/// The sweep's work lists, kept from one query to the next (`budget_in`): a queries batch then
/// allocates nothing per query. Two short-lived allocations per query, interleaved with the
/// batch's Arrow buffers, fragmented the heap of a long-lived chatty connection's run (peak RSS
/// grew with its exchanges: tests/test_bounded_memory.py).
#[derive(Debug, Default)]
pub struct Scratch {
    waits: Vec<(i64, i64, usize)>,
    bounds: Vec<i64>,
    edges: Vec<(i64, i32, usize)>,
}

/// `budget`, with the work lists of `scratch` (whatever they hold is discarded).
pub fn budget_in(q: &Query, scratch: &mut Scratch) -> Budget {
    let Scratch { waits, bounds, edges } = scratch;
    waits.clear();
    bounds.clear();
    edges.clear();
    let start = q.start_ns;
    let end = q.end_ns().max(start);
    let t0 = start - q.setup_ns.unwrap_or(0).max(0);
    let tls = q.tls_start_ns.map_or(start, |t| t.clamp(t0, start));
    let shaken = q.handshake_done_ns.map_or(tls, |t| t.clamp(t0, tls));
    let answered = q.first_byte_ns.map(|t| t.clamp(start, end));
    let request_done = q.request_last_ns.unwrap_or(start).clamp(start, answered.unwrap_or(end));
    let waiting = answered.unwrap_or(end);
    let phases = [
        (shaken, Handshake),
        (tls, Other),
        (start, TlsHandshake),
        (request_done, Transfer),
        (waiting, if answered.is_some() { Server } else { Other }),
        (end, Transfer),
    ];
    // Waits as (from, to, rank), clipped to the span; the window's holds only while the
    // response was under way (it cannot hold a response not yet begun).
    let rank = |p: Part| WAIT_RANK.iter().position(|&w| w == p).expect("every wait part is ranked");
    for (sig, from, to) in q.charges.waits() {
        if let Some(p) = Part::of_wait(sig) {
            waits.push((from.max(t0), to.min(end), rank(p)));
        }
    }
    if let Some(fb) = answered {
        for &(from, to) in &q.rwnd_limited {
            waits.push((from.max(fb), to.unwrap_or(end).min(end), rank(RwndLimited)));
        }
    }
    waits.retain(|w| w.1 > w.0);

    let mut b = Budget::default();
    let mut response_transfer = 0;
    bounds.extend(phases.iter().map(|p| p.0));
    bounds.extend(waits.iter().flat_map(|w| [w.0, w.1]));
    bounds.push(t0);
    bounds.sort_unstable();
    bounds.dedup();
    // Sweep the elementary intervals between consecutive bounds; `covering[r]` counts the waits
    // of rank r open over the current one.
    edges.extend(waits.iter().flat_map(|w| [(w.0, 1, w.2), (w.1, -1, w.2)]));
    edges.sort_unstable();
    let mut covering = [0i32; WAIT_RANK.len()];
    let (mut e, mut phase) = (0, 0);
    for pair in bounds.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        while e < edges.len() && edges[e].0 <= from {
            covering[edges[e].2] += edges[e].1;
            e += 1;
        }
        while phase + 1 < phases.len() && phases[phase].0 <= from {
            phase += 1;
        }
        let part = match covering.iter().position(|&c| c > 0) {
            Some(r) => WAIT_RANK[r],
            None => {
                if phase == phases.len() - 1 && answered.is_some() {
                    response_transfer += to - from;
                }
                phases[phase].1
            }
        };
        b.0[part.index()] += to - from;
    }
    // The queue: its share of each round trip of the response's delivery, and of the handshake's.
    if let Some(base) = q.base_rtt_ns.filter(|&r| r > 0) {
        if q.response_rtt_count > 0 {
            let rtt = q.response_rtt_sum_ns / i64::from(q.response_rtt_count);
            if rtt - base >= QUEUE_MIN_NS {
                let queued = i128::from(response_transfer) * i128::from(rtt - base) / i128::from(rtt);
                b.shift(Transfer, Queueing, queued as i64);
            }
        }
        if let Some(h) = q.handshake_rtt_ns.filter(|&h| h - base >= QUEUE_MIN_NS) {
            b.shift(Handshake, Queueing, h - base);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::Method;

    const MS: i64 = 1_000_000;

    /// A connection's first query: SYN at 0, request 40-41 ms, response from 60 ms, delivered
    /// (acknowledged) at `end_ms`.
    fn first_query(end_ms: i64) -> Query {
        let mut q = Query::new(0, 40 * MS, Method::TcpBytes);
        q.setup_ns = Some(40 * MS);
        q.request_last_ns = Some(41 * MS);
        q.first_byte_ns = Some(60 * MS);
        q.last_byte_ns = Some(61 * MS);
        q.acked_ns = Some(end_ms * MS);
        q
    }

    fn parts(b: &Budget) -> Vec<(&'static str, i64)> {
        PARTS.iter().map(|&p| (p.name(), b.get(p) / MS)).filter(|&(_, v)| v != 0).collect()
    }

    #[test]
    fn a_clean_exchange_is_handshake_upload_server_and_delivery() {
        let b = budget(&first_query(100));
        assert_eq!(parts(&b), vec![("handshake", 40), ("server", 19), ("transfer", 41)]);
        assert_eq!(b.total(), 100 * MS);
    }

    #[test]
    fn overlapping_resends_of_one_tail_count_once() {
        let mut q = first_query(440);
        // Two tail segments first sent at 60 and 61 ms, both resent at 400 ms (timer).
        q.charges.add_charge("tail_loss", 340 * MS, 400 * MS);
        q.charges.add_charge("tail_loss", 339 * MS, 400 * MS);
        let b = budget(&q);
        assert_eq!(parts(&b), vec![("handshake", 40), ("server", 19), ("transfer", 41), ("tail_loss", 340)]);
        assert_eq!(b.total(), 440 * MS, "the old charged delay summed 679 ms");
    }

    #[test]
    fn where_waits_overlap_the_timeout_takes_the_instant() {
        let mut q = first_query(600);
        q.charges.add_charge("fast_retransmit", 100 * MS, 200 * MS); // 100-200
        q.charges.add_charge("rto", 400 * MS, 500 * MS); // 100-500
        let b = budget(&q);
        assert_eq!((b.get(Rto), b.get(FastRetransmit)), (400 * MS, 0));
        assert_eq!(b.total(), 600 * MS);
    }

    #[test]
    fn a_lost_syn_and_a_tls_handshake_are_setup() {
        let mut q = first_query(1200);
        // SYN at 0 and again at 1 s; handshake done at 1030 (the client's ACK), its ClientHello at
        // 1040, its request at 1100.
        q.start_ns = 1100 * MS;
        q.handshake_done_ns = Some(1030 * MS);
        q.setup_ns = Some(1100 * MS);
        q.tls_start_ns = Some(1040 * MS);
        q.request_last_ns = Some(1100 * MS);
        q.first_byte_ns = Some(1150 * MS);
        q.charges.add_charge("syn_loss", 1000 * MS, 1000 * MS);
        let b = budget(&q);
        assert_eq!(
            parts(&b),
            vec![
                ("handshake", 30),
                ("tls_handshake", 60),
                ("syn_loss", 1000),
                ("server", 50),
                ("transfer", 50),
                ("other", 10)
            ]
        );
    }

    #[test]
    fn the_queue_is_the_rtt_above_the_floor_while_the_response_was_delivered() {
        let mut q = first_query(200);
        q.base_rtt_ns = Some(40 * MS);
        q.response_rtt_sum_ns = 2 * 140 * MS;
        q.response_rtt_count = 2;
        let b = budget(&q);
        // 140 ms of delivery at a 140 ms RTT over a 40 ms floor: 100 ms queued.
        assert_eq!((b.get(Transfer), b.get(Queueing)), (41 * MS, 100 * MS), "1 ms of it the upload");
        // Under 20 ms above the floor is no queue.
        q.response_rtt_sum_ns = 2 * 55 * MS;
        assert_eq!(budget(&q).get(Queueing), 0);
    }

    #[test]
    fn the_window_holds_only_the_response() {
        let mut q = first_query(900);
        q.rwnd_limited = vec![(30 * MS, Some(50 * MS)), (200 * MS, Some(700 * MS)), (850 * MS, None)];
        let b = budget(&q);
        assert_eq!(b.get(RwndLimited), 550 * MS);
        assert_eq!(b.total(), 900 * MS);
    }

    #[test]
    fn an_unanswered_request_waits_as_other() {
        let mut q = Query::new(3, 0, Method::TcpBytes);
        q.request_last_ns = Some(MS);
        q.acked_ns = Some(300 * MS);
        q.charges.add_charge("rto", 250 * MS, 250 * MS);
        let b = budget(&q);
        assert_eq!(parts(&b), vec![("rto", 250), ("other", 50)], "the resend waited from the first copy");
    }

    /// Parts are never negative and always add up, whatever the (even inconsistent) inputs.
    #[test]
    fn parts_add_up_on_arbitrary_queries() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |m: i64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % m as u64) as i64
        };
        let sigs =
            ["rto", "tlp", "tail_loss", "policing", "spurious_retransmission", "syn_loss", "reordering", "quic_pto"];
        for _ in 0..20_000 {
            let index = next(3) as u32;
            let mut q = Query::new(index, next(1000) * MS, Method::TcpBytes);
            q.setup_ns = (index == 0).then(|| next(2000) * MS - 100 * MS);
            q.tls_start_ns = (next(2) == 0).then(|| next(3000) * MS);
            q.handshake_done_ns = (next(2) == 0).then(|| next(3000) * MS);
            q.request_last_ns = (next(2) == 0).then(|| next(3000) * MS);
            q.first_byte_ns = (next(3) != 0).then(|| next(3000) * MS);
            q.acked_ns = (next(3) != 0).then(|| next(4000) * MS);
            for _ in 0..next(6) {
                let sig = sigs[next(sigs.len() as i64) as usize];
                q.charges.add_charge(sig, next(3000) * MS, next(5000) * MS);
            }
            for _ in 0..next(3) {
                let from = next(4000) * MS;
                q.rwnd_limited.push((from, (next(2) == 0).then(|| from + next(500) * MS)));
            }
            q.base_rtt_ns = (next(2) == 0).then(|| next(200) * MS);
            q.handshake_rtt_ns = (next(2) == 0).then(|| next(600) * MS);
            q.response_rtt_count = next(3) as u32;
            q.response_rtt_sum_ns = i64::from(q.response_rtt_count) * next(800) * MS;
            let b = budget(&q);
            assert!(b.0.iter().all(|&v| v >= 0), "{q:?} {b:?}");
            assert_eq!(b.total(), q.end_ns() - q.start_ns + q.setup_ns.unwrap_or(0).max(0), "{q:?}");
        }
    }
}

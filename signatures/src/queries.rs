//! Queries without decryption: a TCP byte stream read as request/response exchanges — a client
//! data burst followed by a server data burst (works for HTTP/1, TLS and anything strictly
//! request/response). Each query carries the signatures that struck while it was open and the
//! delay each cost; the first query of a connection also carries the connection setup.
//! Limits (docs/queries.md): pipelined requests and HTTP/2 multiplexing merge into one query
//! per client burst; server pushes without a request are not queries.

use crate::tags;

/// What struck inside a query and what it cost.
#[derive(Debug, Clone, Default)]
pub struct Charges {
    /// (signature, delay) in the order they struck; one entry per occurrence.
    pub items: Vec<(&'static str, i64)>,
}

impl Charges {
    fn add(&mut self, sig: &'static str, delay: i64) {
        self.items.push((sig, delay));
    }
}

#[derive(Debug, Clone, Default)]
pub struct Query {
    pub index: u32,
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
    pub retransmissions: u64,
    pub charges: Charges,
    response_end_seq: Option<u32>,
}

impl Query {
    pub fn end_ns(&self) -> i64 {
        self.acked_ns.or(self.last_byte_ns).unwrap_or(self.start_ns)
    }
    pub fn complete(&self) -> bool {
        self.first_byte_ns.is_some() && self.acked_ns.is_some()
    }
}

#[derive(Debug, Clone, Default)]
pub struct QueryTracker {
    current: Option<Query>,
    pub done: Vec<Query>,
    next_index: u32,
    first_syn_ns: Option<i64>,
    /// Setup costs seen before the first request (SYN and SYN-ACK loss).
    pending_setup: Charges,
    synack_sent: bool,
}

/// One packet as the query tracker needs it.
pub struct Seen {
    pub c2s: bool,
    pub ts_ns: i64,
    pub new_data: u32,
    pub ack: Option<u32>,
    /// The server's highest sequence sent so far (after this packet).
    pub server_next_seq: u32,
    pub tags: u32,
    pub retx_delay_ns: Option<i64>,
    /// The packet is the server's SYN-ACK.
    pub synack: bool,
}

impl QueryTracker {
    pub fn syn(&mut self, ts_ns: i64) {
        self.first_syn_ns.get_or_insert(ts_ns);
    }

    pub fn observe(&mut self, s: &Seen) {
        // A client burst after a response (or at the start) opens a new query.
        if s.c2s && s.new_data > 0 {
            let responded = self.current.as_ref().is_some_and(|q| q.first_byte_ns.is_some());
            if self.current.is_none() || responded {
                self.close();
                let mut q = Query { index: self.next_index, start_ns: s.ts_ns, ..Query::default() };
                self.next_index += 1;
                if q.index == 0 {
                    q.setup_ns = self.first_syn_ns.map(|t| s.ts_ns - t);
                    q.charges = std::mem::take(&mut self.pending_setup);
                }
                self.current = Some(q);
            }
        }
        let Some(q) = self.current.as_mut() else {
            self.charge_setup(s);
            return;
        };
        if s.c2s {
            if s.new_data > 0 {
                q.request_bytes += u64::from(s.new_data);
                q.request_packets += 1;
            }
            if let (Some(ack), Some(end)) = (s.ack, q.response_end_seq) {
                if (ack.wrapping_sub(end) as i32) >= 0 {
                    q.acked_ns = Some(s.ts_ns);
                }
            }
        } else if s.new_data > 0 {
            q.first_byte_ns.get_or_insert(s.ts_ns);
            q.last_byte_ns = Some(s.ts_ns);
            q.response_bytes += u64::from(s.new_data);
            q.response_packets += 1;
            q.response_end_seq = Some(s.server_next_seq);
            q.acked_ns = None;
        }
        charge(q, s);
    }

    /// SYN and SYN-ACK loss before any request: the first query pays for them. A SYN repeated
    /// after our SYN-ACK went out is the client missing that SYN-ACK: the SYN-ACK's own repeat
    /// carries that cost, so it is not charged twice.
    fn charge_setup(&mut self, s: &Seen) {
        if s.tags & tags::SYN_RETRANSMISSION != 0 && !self.synack_sent {
            self.pending_setup.add("syn_loss", s.retx_delay_ns.unwrap_or(0));
        } else if s.tags & tags::SYNACK_RETRANSMISSION != 0 {
            self.pending_setup.add("synack_loss", s.retx_delay_ns.unwrap_or(0));
        }
        if s.synack {
            self.synack_sent = true;
        }
    }

    pub fn close(&mut self) {
        if let Some(q) = self.current.take() {
            self.done.push(q);
        }
    }
}

fn charge(q: &mut Query, s: &Seen) {
    let delay = s.retx_delay_ns.unwrap_or(0);
    if s.retx_delay_ns.is_some() && s.tags & (tags::SYN_RETRANSMISSION | tags::SYNACK_RETRANSMISSION) == 0 {
        q.retransmissions += 1;
        let sig = if s.tags & tags::TAIL_LOSS != 0 {
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
        q.charges.add(sig, delay);
    }
    if s.tags & tags::REORDERED != 0 {
        q.charges.add("reordering", 0);
    }
    if s.tags & tags::ZERO_WINDOW != 0 {
        q.charges.add("zero_window", 0);
    }
}

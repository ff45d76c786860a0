//! What a TCP flow's analysis concludes, for its row in the flows table: the counters and
//! verdicts as one plain struct (the table names the columns, `tables::flows`), and the flow's
//! signatures — the rule for which behaviours struck a flow at least once.

use super::TcpState;

/// A TCP flow's figures, named as the flows table's columns. The path to the client is what a
/// server-side capture measures: its RTT figures are server data acked by the client.
#[derive(Debug, Clone, Default)]
pub struct TcpSummary {
    pub vantage: &'static str,
    pub handshake_rtt_ns: Option<i64>,
    pub syn_synack_ns: Option<i64>,
    pub rtt_samples: i64,
    pub rtt_min_ns: Option<i64>,
    pub rtt_p50_ns: Option<i64>,
    pub rtt_p95_ns: Option<i64>,
    pub rtt_max_ns: Option<i64>,
    pub retx_packets: [i64; 2],
    pub retx_bytes: [i64; 2],
    pub retx_rto: i64,
    pub retx_fast: i64,
    pub retx_tlp: i64,
    pub retx_spurious: i64,
    pub retx_network_duplicate: i64,
    pub network_duplicates: [i64; 2],
    pub retx_unknown: i64,
    pub retx_delay_p50_ns: Option<i64>,
    pub retx_delay_max_ns: Option<i64>,
    pub max_retx_per_segment: i64,
    pub recovery_ns: i64,
    pub out_of_order: [i64; 2],
    pub reordered: [i64; 2],
    pub reorder_extent_max_ns: i64,
    pub lost_segments: [i64; 2],
    pub dup_acks: [i64; 2],
    pub zero_windows: [i64; 2],
    pub syn_retx: i64,
    pub synack_retx: i64,
    pub syn_loss_delay_ns: i64,
    pub synack_loss_delay_ns: i64,
    pub tail_losses: i64,
    pub tail_loss_delay_ns: i64,
    pub rtt_inflation_ns: Option<i64>,
    pub policing_burst_bytes: Option<i64>,
    pub rwnd_limited_ns: i64,
    pub app_limited_ns: i64,
    pub rtt_inflight_corr: Option<f64>,
    pub policing_rate_bps: Option<f64>,
}

impl TcpState {
    pub fn summary(&self) -> TcpSummary {
        let s = &self.stats;
        let to_client = &self.dir[1].rtt;
        let n = |v: u64| v as i64;
        let pair = |v: [u64; 2]| [v[0] as i64, v[1] as i64];
        TcpSummary {
            vantage: self.vantage.name(),
            handshake_rtt_ns: s.handshake_rtt_ns,
            syn_synack_ns: s.syn_synack_ns,
            rtt_samples: n(to_client.count()),
            rtt_min_ns: to_client.min,
            rtt_p50_ns: to_client.percentile(50.0),
            rtt_p95_ns: to_client.percentile(95.0),
            rtt_max_ns: to_client.max,
            retx_packets: pair(s.retx_packets),
            retx_bytes: pair(s.retx_bytes),
            retx_rto: n(s.retx_rto),
            retx_fast: n(s.retx_fast),
            retx_tlp: n(s.retx_tlp),
            retx_spurious: n(s.retx_spurious),
            retx_network_duplicate: n(s.retx_network_duplicate),
            network_duplicates: pair(s.network_duplicates),
            retx_unknown: n(s.retx_unknown),
            retx_delay_p50_ns: s.retx_delays_ns.percentile(50.0),
            retx_delay_max_ns: s.retx_delays_ns.max,
            max_retx_per_segment: i64::from(s.max_retx_per_segment),
            recovery_ns: s.recovery_ns,
            out_of_order: pair(s.out_of_order),
            reordered: pair(s.reordered),
            reorder_extent_max_ns: s.reorder_extent_max_ns,
            lost_segments: pair(s.lost_segments),
            dup_acks: pair(s.dup_acks),
            zero_windows: pair(s.zero_windows),
            syn_retx: i64::from(s.syn_retx),
            synack_retx: i64::from(s.synack_retx),
            syn_loss_delay_ns: s.syn_loss_delay_ns,
            synack_loss_delay_ns: s.synack_loss_delay_ns,
            tail_losses: n(s.tail_losses),
            tail_loss_delay_ns: s.tail_loss_delay_ns,
            rtt_inflation_ns: self.verdicts.rtt_inflation_ns,
            policing_burst_bytes: self.verdicts.policing_burst_bytes,
            rwnd_limited_ns: self.path.rwnd_limited_ns,
            app_limited_ns: self.path.app_limited_ns,
            rtt_inflight_corr: self.verdicts.rtt_inflight_corr,
            policing_rate_bps: self.verdicts.policing_rate_bps,
        }
    }

    /// The flow-level signatures: what struck this flow at least once (docs/signatures.md).
    pub fn signatures(&self) -> Vec<&'static str> {
        let s = &self.stats;
        // A SYN repeated before any SYN-ACK went out; a SYN-ACK lost later in the same handshake
        // is its own signature, not a reason to drop this one.
        let syn_loss = s.syn_retx > 0 && s.syn_loss_delay_ns > 0;
        [
            (syn_loss, "syn_loss"),
            (s.synack_retx > 0, "synack_loss"),
            (s.tail_losses > 0, "tail_loss"),
            (s.retx_rto > 0, "rto"),
            (s.retx_fast > 0, "fast_retransmit"),
            (s.retx_tlp > 0, "tlp"),
            (s.retx_spurious > 0, "spurious_retransmission"),
            (s.reordered[0] + s.reordered[1] > 0, "reordering"),
            (s.zero_windows[0] + s.zero_windows[1] > 0, "zero_window"),
            (self.verdicts.bufferbloat, "bufferbloat"),
            (self.verdicts.policed, "policing"),
        ]
        .into_iter()
        .filter_map(|(hit, name)| hit.then_some(name))
        .collect()
    }
}

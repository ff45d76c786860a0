//! What a QUIC flow's analysis concludes, for its row in the flows table: plain structs named as
//! the table's columns (`tables::flows` names them), and the flow's signatures — the rule for
//! which behaviours struck a QUIC flow at least once. Mirrors `tcp::summary`.

use crate::quic::QuicState;
use crate::quic_keyed::{KeyStatus, KeyedQuic};

/// A QUIC flow's figures without keys (from the Initials and the unprotected header bits).
#[derive(Debug, Clone, Default)]
pub struct QuicSummary {
    pub version: Option<String>,
    /// The client's original destination connection ID, in hex.
    pub ocid: Option<String>,
    pub handshake: &'static str,
    pub spin: &'static str,
    pub handshake_rtt_ns: Option<i64>,
    pub initial_retx: i64,
    pub server_initial_retx: i64,
    pub initial_loss_delay_ns: i64,
    pub spin_rtt_p50_ns: Option<i64>,
    pub spin_samples: i64,
    pub migrations: i64,
    pub retry: bool,
    pub version_negotiation: bool,
    /// What the key log did for this connection, when the run had one.
    pub keys: Option<&'static str>,
    /// The keyed analysis' figures, when the key log opened the connection.
    pub keyed: Option<KeyedSummary>,
}

/// A QUIC flow's figures from its decrypted packets (crate::quic_keyed).
#[derive(Debug, Clone, Default)]
pub struct KeyedSummary {
    pub decrypted_packets: i64,
    pub undecryptable_packets: i64,
    pub lost: [i64; 2],
    pub lost_packet_threshold: i64,
    pub lost_time_threshold: i64,
    pub lost_pto: i64,
    pub retx: [i64; 2],
    pub retx_spurious: i64,
    pub out_of_order: [i64; 2],
    pub rtt_samples: i64,
    pub rtt_min_ns: Option<i64>,
    pub rtt_p50_ns: Option<i64>,
    pub key_updates: i64,
}

impl QuicState {
    /// `server_packets`: the flow's packets from the server (a handshake nobody answered).
    pub fn summary(&self, server_packets: u64) -> QuicSummary {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        QuicSummary {
            version: self.version_label(),
            ocid: (!self.ocid.is_empty()).then(|| hex(&self.ocid)),
            handshake: self.handshake_outcome(server_packets),
            spin: self.spin_state(),
            handshake_rtt_ns: self.handshake_rtt_ns.or_else(|| self.inferred.header_handshake_rtt_ns()),
            initial_retx: i64::from(self.initial_retx[0]),
            server_initial_retx: i64::from(self.initial_retx[1]),
            initial_loss_delay_ns: self.initial_loss_delay_ns,
            spin_rtt_p50_ns: self.spin_rtt.percentile(50.0),
            spin_samples: self.spin_rtt.count() as i64,
            migrations: i64::from(self.migrations),
            retry: self.retry,
            version_negotiation: self.version_negotiation,
            keys: self.keyed.as_deref().map(|k| k.status.name()),
            keyed: self.decrypting().map(KeyedQuic::summary),
        }
    }

    /// The keyed analysis, when the key log opened this connection.
    pub fn decrypting(&self) -> Option<&KeyedQuic> {
        self.keyed.as_deref().filter(|k| k.status == KeyStatus::Decrypting)
    }

    /// The flow-level signatures: what struck this flow at least once (docs/signatures.md).
    pub fn signatures(&self, server_packets: u64) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.initial_retx[0] > 0 && self.initial_loss_delay_ns > 0 {
            out.push("quic_initial_loss");
        }
        if self.server_initial_loss() {
            out.push("quic_server_initial_loss");
        }
        match self.handshake_outcome(server_packets) {
            "no_server_reply" => out.push("quic_no_server_reply"),
            "no_client_handshake" => out.push("quic_no_client_handshake"),
            "version_negotiation_failed" => out.push("quic_version_negotiation_failed"),
            _ => {}
        }
        if self.migrations > 0 {
            out.push("quic_migration");
        }
        if self.inferred.stalls > 0 {
            out.push("quic_pto_stall");
        }
        if let Some(k) = self.decrypting() {
            let s = &k.stats;
            for (hit, name) in [
                (s.lost[0] + s.lost[1] > 0, "quic_loss"),
                (s.lost_by[2] > 0, "quic_pto"),
                (s.retx_spurious > 0, "quic_spurious_retransmission"),
                (s.out_of_order[0] + s.out_of_order[1] > 0, "quic_reordering"),
            ] {
                if hit {
                    out.push(name);
                }
            }
        }
        out
    }
}

impl KeyedQuic {
    pub fn summary(&self) -> KeyedSummary {
        let s = &self.stats;
        let pair = |v: [u64; 2]| [v[0] as i64, v[1] as i64];
        KeyedSummary {
            decrypted_packets: (s.decrypted[0] + s.decrypted[1]) as i64,
            undecryptable_packets: (s.undecryptable[0] + s.undecryptable[1]) as i64,
            lost: pair(s.lost),
            lost_packet_threshold: s.lost_by[0] as i64,
            lost_time_threshold: s.lost_by[1] as i64,
            lost_pto: s.lost_by[2] as i64,
            retx: pair(s.retx),
            retx_spurious: s.retx_spurious as i64,
            out_of_order: pair(s.out_of_order),
            rtt_samples: s.rtt.count() as i64,
            rtt_min_ns: s.rtt.min,
            rtt_p50_ns: s.rtt.percentile(50.0),
            key_updates: i64::from(self.key_updates()),
        }
    }
}

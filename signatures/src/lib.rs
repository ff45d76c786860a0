//! tailscope-signatures: flow reconstruction and behavioral signatures over decoded packets,
//! emitted as Arrow record batches.

pub mod budget;
pub mod community_id;
pub mod defaults;
pub mod enrichment;
pub mod files_table;
pub mod flow;
pub mod pathology;
pub mod pseudonym;
pub mod queries;
pub mod quic;
pub mod quic_keyed;
pub mod quic_queries;
pub mod quic_recovery;
pub mod quic_summary;
pub mod rtt;
pub mod seq_number;
pub mod service;
pub mod session;
mod spare;
pub mod store;
pub mod tables;
pub mod tags;
pub mod tcp;

pub use session::{FileCursor, FileStats, Session, SessionConfig};

/// A panic's message, for the error that replaces it (the bindings and the writer thread report
/// a bug of ours as an error naming what it was doing, never as a crash).
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

//! tailscope-signatures: flow reconstruction and behavioral signatures over decoded packets,
//! emitted as Arrow record batches.

pub mod community_id;
pub mod defaults;
pub mod flow;
pub mod pathology;
pub mod pseudonym;
pub mod queries;
pub mod quic;
pub mod quic_keyed;
pub mod quic_recovery;
pub mod rtt;
pub mod seq_number;
pub mod session;
pub mod tables;
pub mod tags;
pub mod tcp;

pub use session::{FileCursor, FileStats, Session, SessionConfig};

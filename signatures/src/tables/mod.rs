//! The output tables as Arrow record batches, one file per table: its schema (documented in
//! docs/schemas.md), its row and how its batch is built. The values come from the types that
//! own them (the decoded packet and its flow; `tcp::TcpSummary`, `quic_summary`); `columns`
//! holds the hand-built Arrow columns the tables share.

use arrow_schema::{DataType, TimeUnit};

mod columns;
pub mod events;
pub mod flows;
pub mod packets;
pub mod queries;

pub use events::{event_schema, events_batch, EventRow};
pub use flows::{flow_schema, flows_batch};
pub use packets::{packet_schema, packets_batch, PacketColumns, PacketRow};
pub use queries::{queries_batch, queries_of_flows, query_flows_batch, query_flows_schema, query_schema, QueryFlow};

/// Bumped on every deliberate change of a table's columns or their meaning.
pub const SCHEMA_VERSION: u32 = 7;

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

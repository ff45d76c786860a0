//! The events table: one row per signature occurrence on a packet. The rows are made here, from
//! the packet's tags (`tags::ALL`), and nowhere else.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::packets::PacketRow;
use super::ts_type;
use crate::quic_keyed::KeyedEvent;
use crate::tags;

/// One row of the events table.
#[derive(Debug, Clone)]
pub struct EventRow {
    pub file_index: u32,
    pub frame: u64,
    pub ts_ns: i64,
    pub flow_id: i64,
    pub c2s: bool,
    pub signature: &'static str,
    pub cause: Option<&'static str>,
    pub delay_ns: Option<i64>,
    pub seq: Option<u32>,
    pub len: u32,
}

impl EventRow {
    /// An event on this packet's row.
    fn on(row: &PacketRow, signature: &'static str, cause: Option<&'static str>, delay_ns: Option<i64>) -> EventRow {
        EventRow {
            file_index: row.file_index,
            frame: row.frame,
            ts_ns: row.ts_ns,
            flow_id: row.flow_id,
            c2s: row.c2s,
            signature,
            cause,
            delay_ns,
            seq: None,
            len: row.payload_len,
        }
    }
}

/// The events of one packet's row, appended to `out`: a `retransmission` row for every packet
/// tailscope judges a retransmission (it has a cause), then one row per event tag
/// (`tags::EVENTS`), named as the tag; loss episodes a retransmission revealed (tail loss, a
/// repeated SYN or SYN-ACK) carry its cause and delay. Then the rows the keyed QUIC analysis
/// asked for (about this datagram, a lost packet's sender say). `seq` is the TCP sequence number
/// or the first 1-RTT packet number.
pub fn note(row: &PacketRow, seq: Option<u32>, keyed: &[KeyedEvent], out: &mut Vec<EventRow>) {
    let mask = row.tags;
    if mask != 0 {
        let cause = tags::cause_name(mask);
        let delay = row.retx_delay_ns;
        let mut push =
            |signature, cause, delay_ns| out.push(EventRow { seq, ..EventRow::on(row, signature, cause, delay_ns) });
        if cause.is_some() {
            push("retransmission", cause, delay);
        }
        for (bit, name) in tags::ALL.iter().filter(|(bit, _)| mask & tags::EVENTS & bit != 0) {
            if bit & tags::LOSS_EPISODES != 0 {
                push(name, cause, delay);
            } else {
                push(name, None, None);
            }
        }
    }
    out.extend(keyed.iter().map(|e| EventRow {
        c2s: e.c2s,
        seq: e.pn.map(|n| n as u32),
        ..EventRow::on(row, e.signature, e.cause, e.delay_ns)
    }));
}

/// A D-SACK proved the retransmission on this flow's `frame` spurious while its events are still
/// held (session/resends.rs): it was no tail loss, and the rows that carry its cause
/// (`retransmission`, a repeated SYN's) now say `spurious`; the packet's other events
/// (out-of-order, ...) have no cause to change.
pub fn relabel_spurious(events: &mut VecDeque<EventRow>, flow_id: i64, frame: u64) {
    let ours = |e: &EventRow| e.flow_id == flow_id && e.frame == frame;
    events.retain(|e| !(ours(e) && e.signature == "tail_loss"));
    for e in events.iter_mut().rev().filter(|e| ours(e) && e.cause.is_some()) {
        e.cause = Some("spurious");
    }
}

pub fn event_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("ts", ts_type(), false),
        Field::new("file", DataType::Utf8, false),
        Field::new("frame", DataType::UInt64, false),
        Field::new("direction", DataType::Utf8, false),
        Field::new("signature", DataType::Utf8, false),
        Field::new("cause", DataType::Utf8, true),
        Field::new("delay_ns", DataType::Int64, true),
        Field::new("seq", DataType::UInt32, true),
        Field::new("len", DataType::UInt32, false),
    ]))
}

pub fn events_batch(rows: &[EventRow], capture_id: &str, files: &[String]) -> RecordBatch {
    let n = rows.len();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.flow_id))),
        Arc::new(TimestampNanosecondArray::from_iter_values(rows.iter().map(|r| r.ts_ns)).with_timezone("UTC")),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| files[r.file_index as usize].as_str()))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.frame))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| if r.c2s { "c2s" } else { "s2c" }))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.signature))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| r.cause))),
        Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.delay_ns))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.seq))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.len))),
    ];
    RecordBatch::try_new(event_schema(), columns).expect("event columns match the schema")
}

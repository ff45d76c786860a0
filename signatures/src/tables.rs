//! The output tables as Arrow record batches: schemas (one place; documented in
//! docs/schemas.md) and the plain row structs they are built from.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StructBuilder, UInt32Builder};
use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray,
    UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::flow::Flow;

/// Bumped on every deliberate change of a table's columns or their meaning.
pub const SCHEMA_VERSION: u32 = 1;

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn sack_fields() -> Fields {
    Fields::from(vec![
        Field::new("left", DataType::UInt32, false),
        Field::new("right", DataType::UInt32, false),
    ])
}

pub fn packet_schema() -> SchemaRef {
    let sack_item = Field::new("item", DataType::Struct(sack_fields()), false);
    Arc::new(Schema::new(vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("file", DataType::Utf8, false),
        Field::new("frame", DataType::UInt64, false),
        Field::new("ts", ts_type(), false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("direction", DataType::Utf8, false),
        Field::new("ip_proto", DataType::UInt8, false),
        Field::new("seq", DataType::UInt32, true),
        Field::new("ack", DataType::UInt32, true),
        Field::new("rel_seq", DataType::UInt32, true),
        Field::new("rel_ack", DataType::UInt32, true),
        Field::new("payload_len", DataType::UInt32, false),
        Field::new("flags", DataType::UInt16, true),
        Field::new("window", DataType::UInt32, true),
        Field::new("window_scaled", DataType::Boolean, true),
        Field::new("tsval", DataType::UInt32, true),
        Field::new("tsecr", DataType::UInt32, true),
        Field::new("sack", DataType::List(Arc::new(sack_item)), true),
        Field::new("ip_id", DataType::UInt32, true),
        Field::new("ttl", DataType::UInt8, false),
        Field::new("wire_len", DataType::UInt32, false),
        Field::new("encap", DataType::Utf8, true),
    ]))
}

pub fn flow_schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("community_id", DataType::Utf8, false),
        Field::new("protocol", DataType::Utf8, false),
        Field::new("ip_proto", DataType::UInt8, false),
        Field::new("client_ip", DataType::Utf8, false),
        Field::new("client_port", DataType::UInt16, false),
        Field::new("server_ip", DataType::Utf8, false),
        Field::new("server_port", DataType::UInt16, false),
        Field::new("role_source", DataType::Utf8, false),
        Field::new("start", ts_type(), false),
        Field::new("end", ts_type(), false),
        Field::new("end_reason", DataType::Utf8, false),
    ];
    for d in ["c2s", "s2c"] {
        for (name, ty) in [
            ("packets", DataType::UInt64),
            ("bytes", DataType::UInt64),
            ("ip_bytes", DataType::UInt64),
            ("payload_bytes", DataType::UInt64),
            ("syn", DataType::UInt32),
            ("fin", DataType::UInt32),
            ("rst", DataType::UInt32),
        ] {
            fields.push(Field::new(format!("{d}_{name}"), ty, false));
        }
        fields.push(Field::new(format!("{d}_mss"), DataType::UInt16, true));
        fields.push(Field::new(format!("{d}_wscale"), DataType::UInt8, true));
    }
    fields.extend([
        Field::new("first_file", DataType::Utf8, false),
        Field::new("last_file", DataType::Utf8, false),
        Field::new("encap", DataType::Utf8, true),
    ]);
    Arc::new(Schema::new(fields))
}

/// One row of the packets table.
#[derive(Debug, Clone, Default)]
pub struct PacketRow {
    pub file_index: u32,
    pub frame: u64,
    pub ts_ns: i64,
    pub flow_id: i64,
    pub c2s: bool,
    pub ip_proto: u8,
    pub seq: Option<u32>,
    pub ack: Option<u32>,
    pub rel_seq: Option<u32>,
    pub rel_ack: Option<u32>,
    pub payload_len: u32,
    pub flags: Option<u16>,
    pub window: Option<u32>,
    pub window_scaled: Option<bool>,
    pub ts: Option<(u32, u32)>,
    pub sack: [(u32, u32); 4],
    pub sack_count: u8,
    pub is_tcp: bool,
    pub ip_id: Option<u32>,
    pub ttl: u8,
    pub wire_len: u32,
    pub encap: &'static str,
}

fn opt_str(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

pub fn packets_batch(rows: &[PacketRow], capture_id: &str, files: &[String]) -> RecordBatch {
    let n = rows.len();
    let mut sack = ListBuilder::new(StructBuilder::from_fields(sack_fields(), n))
        .with_field(Arc::new(Field::new("item", DataType::Struct(sack_fields()), false)));
    for r in rows {
        if !r.is_tcp {
            sack.append(false);
            continue;
        }
        let blocks = &r.sack[..usize::from(r.sack_count)];
        let values = sack.values();
        for &(left, right) in blocks {
            values.field_builder::<UInt32Builder>(0).unwrap().append_value(left);
            values.field_builder::<UInt32Builder>(1).unwrap().append_value(right);
            values.append(true);
        }
        sack.append(true);
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| files[r.file_index as usize].as_str()))),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.frame))),
        Arc::new(TimestampNanosecondArray::from_iter_values(rows.iter().map(|r| r.ts_ns)).with_timezone("UTC")),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.flow_id))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| if r.c2s { "c2s" } else { "s2c" }))),
        Arc::new(UInt8Array::from_iter_values(rows.iter().map(|r| r.ip_proto))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.seq))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ack))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.rel_seq))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.rel_ack))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.payload_len))),
        Arc::new(UInt16Array::from_iter(rows.iter().map(|r| r.flags))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.window))),
        Arc::new(BooleanArray::from_iter(rows.iter().map(|r| r.window_scaled))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ts.map(|t| t.0)))),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ts.map(|t| t.1)))),
        Arc::new(sack.finish()),
        Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ip_id))),
        Arc::new(UInt8Array::from_iter_values(rows.iter().map(|r| r.ttl))),
        Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.wire_len))),
        Arc::new(StringArray::from_iter(rows.iter().map(|r| opt_str(r.encap)))),
    ];
    RecordBatch::try_new(packet_schema(), columns).expect("packet columns match the schema")
}

pub fn flows_batch(flows: &[Flow], capture_id: &str, files: &[String], cid_seed: u16) -> RecordBatch {
    let n = flows.len();
    let u64s = |f: &dyn Fn(&Flow) -> u64| -> ArrayRef { Arc::new(UInt64Array::from_iter_values(flows.iter().map(f))) };
    let u32s = |f: &dyn Fn(&Flow) -> u32| -> ArrayRef { Arc::new(UInt32Array::from_iter_values(flows.iter().map(f))) };
    let strs = |f: &dyn Fn(&Flow) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(flows.iter().map(f))) };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(flows.iter().map(|f| f.flow_id))),
        strs(&|f| f.community_id(cid_seed)),
        strs(&|f| match f.proto { 6 => "tcp".into(), 17 => "udp".into(), p => p.to_string() }),
        Arc::new(UInt8Array::from_iter_values(flows.iter().map(|f| f.proto))),
        strs(&|f| f.client.0.to_string()),
        Arc::new(UInt16Array::from_iter_values(flows.iter().map(|f| f.client.1))),
        strs(&|f| f.server.0.to_string()),
        Arc::new(UInt16Array::from_iter_values(flows.iter().map(|f| f.server.1))),
        strs(&|f| f.role_source.name().into()),
        Arc::new(TimestampNanosecondArray::from_iter_values(flows.iter().map(|f| f.start_ns)).with_timezone("UTC")),
        Arc::new(TimestampNanosecondArray::from_iter_values(flows.iter().map(|f| f.end_ns)).with_timezone("UTC")),
        strs(&|f| f.end_reason.map_or("", |r| r.name()).into()),
    ];
    for d in 0..2 {
        columns.push(u64s(&|f| f.dir[d].packets));
        columns.push(u64s(&|f| f.dir[d].wire_bytes));
        columns.push(u64s(&|f| f.dir[d].ip_bytes));
        columns.push(u64s(&|f| f.dir[d].payload_bytes));
        columns.push(u32s(&|f| f.dir[d].syn));
        columns.push(u32s(&|f| f.dir[d].fin));
        columns.push(u32s(&|f| f.dir[d].rst));
        columns.push(Arc::new(UInt16Array::from_iter(flows.iter().map(|f| f.dir[d].mss))));
        columns.push(Arc::new(UInt8Array::from_iter(flows.iter().map(|f| f.dir[d].wscale))));
    }
    columns.push(strs(&|f| files[f.first_file as usize].clone()));
    columns.push(strs(&|f| files[f.last_file as usize].clone()));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| opt_str(f.encap)))));
    RecordBatch::try_new(flow_schema(), columns).expect("flow columns match the schema")
}

//! The flows table: one row per flow once it ends. The columns are named here; their values
//! come from the types that own them — the flow (`crate::flow::Flow`), its TCP analysis
//! (`TcpSummary`) and its QUIC analysis (`QuicSummary`, `KeyedSummary`).

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt16Array,
    UInt32Array, UInt64Array, UInt8Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::columns::{opt_str, string_lists};
use super::ts_type;
use crate::flow::{DirStats, Flow};
use crate::quic_summary::{KeyedSummary, QuicSummary};
use crate::tcp::TcpSummary;

/// Per-direction counters, `c2s_*` then `s2c_*` (the two nullable handshake options follow each).
type DirValue = fn(&DirStats) -> u64;
const DIR_COLUMNS: &[(&str, DataType, DirValue)] = &[
    ("packets", DataType::UInt64, |d| d.packets),
    ("bytes", DataType::UInt64, |d| d.wire_bytes),
    ("ip_bytes", DataType::UInt64, |d| d.ip_bytes),
    ("payload_bytes", DataType::UInt64, |d| d.payload_bytes),
    ("syn", DataType::UInt32, |d| u64::from(d.syn)),
    ("fin", DataType::UInt32, |d| u64::from(d.fin)),
    ("rst", DataType::UInt32, |d| u64::from(d.rst)),
];

/// TCP columns (null for other flows), in schema order.
type TcpValue = fn(&TcpSummary) -> Option<i64>;
const TCP_COLUMNS: &[(&str, TcpValue)] = &[
    ("handshake_rtt_ns", |s| s.handshake_rtt_ns),
    ("syn_synack_ns", |s| s.syn_synack_ns),
    ("rtt_samples", |s| Some(s.rtt_samples)),
    ("rtt_min_ns", |s| s.rtt_min_ns),
    ("rtt_p50_ns", |s| s.rtt_p50_ns),
    ("rtt_p95_ns", |s| s.rtt_p95_ns),
    ("rtt_max_ns", |s| s.rtt_max_ns),
    ("c2s_retx_packets", |s| Some(s.retx_packets[0])),
    ("s2c_retx_packets", |s| Some(s.retx_packets[1])),
    ("c2s_retx_bytes", |s| Some(s.retx_bytes[0])),
    ("s2c_retx_bytes", |s| Some(s.retx_bytes[1])),
    ("retx_rto", |s| Some(s.retx_rto)),
    ("retx_fast", |s| Some(s.retx_fast)),
    ("retx_tlp", |s| Some(s.retx_tlp)),
    ("retx_spurious", |s| Some(s.retx_spurious)),
    ("retx_network_duplicate", |s| Some(s.retx_network_duplicate)),
    ("c2s_network_duplicates", |s| Some(s.network_duplicates[0])),
    ("s2c_network_duplicates", |s| Some(s.network_duplicates[1])),
    ("retx_unknown", |s| Some(s.retx_unknown)),
    ("retx_delay_p50_ns", |s| s.retx_delay_p50_ns),
    ("retx_delay_max_ns", |s| s.retx_delay_max_ns),
    ("max_retx_per_segment", |s| Some(s.max_retx_per_segment)),
    ("recovery_ns", |s| Some(s.recovery_ns)),
    ("c2s_out_of_order", |s| Some(s.out_of_order[0])),
    ("s2c_out_of_order", |s| Some(s.out_of_order[1])),
    ("c2s_reordered", |s| Some(s.reordered[0])),
    ("s2c_reordered", |s| Some(s.reordered[1])),
    ("reorder_extent_max_ns", |s| Some(s.reorder_extent_max_ns)),
    ("c2s_lost_segments", |s| Some(s.lost_segments[0])),
    ("s2c_lost_segments", |s| Some(s.lost_segments[1])),
    ("c2s_dup_acks", |s| Some(s.dup_acks[0])),
    ("s2c_dup_acks", |s| Some(s.dup_acks[1])),
    ("c2s_zero_windows", |s| Some(s.zero_windows[0])),
    ("s2c_zero_windows", |s| Some(s.zero_windows[1])),
    ("syn_retx", |s| Some(s.syn_retx)),
    ("synack_retx", |s| Some(s.synack_retx)),
    ("syn_loss_delay_ns", |s| Some(s.syn_loss_delay_ns)),
    ("synack_loss_delay_ns", |s| Some(s.synack_loss_delay_ns)),
    ("tail_losses", |s| Some(s.tail_losses)),
    ("tail_loss_delay_ns", |s| Some(s.tail_loss_delay_ns)),
    ("rtt_inflation_ns", |s| s.rtt_inflation_ns),
    ("policing_burst_bytes", |s| s.policing_burst_bytes),
    ("rwnd_limited_ns", |s| Some(s.rwnd_limited_ns)),
    ("app_limited_ns", |s| Some(s.app_limited_ns)),
];

/// QUIC text columns (null for other flows), after `service`, `sni` and `alpn`, which other flows have too.
type QuicText = fn(&QuicSummary) -> Option<String>;
const QUIC_TEXT_COLUMNS: &[(&str, QuicText)] = &[
    ("quic_version", |q| q.version.clone()),
    ("quic_ocid", |q| q.ocid.clone()),
    ("quic_handshake", |q| Some(q.handshake.into())),
    ("quic_spin", |q| Some(q.spin.into())),
];

/// QUIC number columns (null for other flows).
type QuicValue = fn(&QuicSummary) -> Option<i64>;
const QUIC_COLUMNS: &[(&str, QuicValue)] = &[
    ("quic_handshake_rtt_ns", |q| q.handshake_rtt_ns),
    ("quic_initial_retx", |q| Some(q.initial_retx)),
    ("quic_server_initial_retx", |q| Some(q.server_initial_retx)),
    ("quic_initial_loss_delay_ns", |q| Some(q.initial_loss_delay_ns)),
    ("quic_spin_rtt_p50_ns", |q| q.spin_rtt_p50_ns),
    ("quic_spin_samples", |q| Some(q.spin_samples)),
    ("quic_migrations", |q| Some(q.migrations)),
];

/// QUIC columns with a key log (null without one, or when the log lacks the connection's
/// secrets).
type KeyedValue = fn(&KeyedSummary) -> Option<i64>;
const KEYED_COLUMNS: &[(&str, KeyedValue)] = &[
    ("quic_decrypted_packets", |k| Some(k.decrypted_packets)),
    ("quic_undecryptable_packets", |k| Some(k.undecryptable_packets)),
    ("c2s_quic_lost", |k| Some(k.lost[0])),
    ("s2c_quic_lost", |k| Some(k.lost[1])),
    ("quic_lost_packet_threshold", |k| Some(k.lost_packet_threshold)),
    ("quic_lost_time_threshold", |k| Some(k.lost_time_threshold)),
    ("quic_lost_pto", |k| Some(k.lost_pto)),
    ("c2s_quic_retx", |k| Some(k.retx[0])),
    ("s2c_quic_retx", |k| Some(k.retx[1])),
    ("quic_retx_spurious", |k| Some(k.retx_spurious)),
    ("c2s_quic_out_of_order", |k| Some(k.out_of_order[0])),
    ("s2c_quic_out_of_order", |k| Some(k.out_of_order[1])),
    ("quic_rtt_samples", |k| Some(k.rtt_samples)),
    ("quic_rtt_min_ns", |k| k.rtt_min_ns),
    ("quic_rtt_p50_ns", |k| k.rtt_p50_ns),
    ("quic_key_updates", |k| Some(k.key_updates)),
];

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
        for (name, ty, _) in DIR_COLUMNS {
            fields.push(Field::new(format!("{d}_{name}"), ty.clone(), false));
        }
        fields.push(Field::new(format!("{d}_mss"), DataType::UInt16, true));
        fields.push(Field::new(format!("{d}_wscale"), DataType::UInt8, true));
    }
    fields.push(Field::new("vantage", DataType::Utf8, true));
    for (name, _) in TCP_COLUMNS {
        fields.push(Field::new(*name, DataType::Int64, true));
    }
    let text = ["service", "sni", "alpn"].into_iter().chain(QUIC_TEXT_COLUMNS.iter().map(|c| c.0));
    fields.extend(text.map(|name| Field::new(name, DataType::Utf8, true)));
    for (name, _) in QUIC_COLUMNS {
        fields.push(Field::new(*name, DataType::Int64, true));
    }
    fields.push(Field::new("quic_retry", DataType::Boolean, true));
    fields.push(Field::new("quic_version_negotiation", DataType::Boolean, true));
    fields.push(Field::new("quic_keys", DataType::Utf8, true));
    for (name, _) in KEYED_COLUMNS {
        fields.push(Field::new(*name, DataType::Int64, true));
    }
    fields.push(Field::new("rtt_inflight_corr", DataType::Float64, true));
    fields.push(Field::new("policing_rate_bps", DataType::Float64, true));
    fields.push(Field::new("signatures", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false));
    fields.extend([
        Field::new("first_file", DataType::Utf8, false),
        Field::new("last_file", DataType::Utf8, false),
        Field::new("encap", DataType::Utf8, true),
    ]);
    Arc::new(Schema::new(fields))
}

fn protocol(f: &Flow) -> String {
    match f.proto {
        6 => "tcp".into(),
        17 if f.quic.is_some() => "quic".into(),
        17 => "udp".into(),
        p => p.to_string(),
    }
}

pub fn flows_batch(flows: &[Flow], capture_id: &str, files: &[String], cid_seed: u16) -> RecordBatch {
    let n = flows.len();
    let strs =
        |f: &dyn Fn(&Flow) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(flows.iter().map(f))) };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(flows.iter().map(|f| f.flow_id))),
        strs(&|f| f.community_id(cid_seed)),
        strs(&protocol),
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
        for (_, ty, value) in DIR_COLUMNS {
            let values = flows.iter().map(|f| value(&f.dir[d]));
            columns.push(match ty {
                DataType::UInt32 => Arc::new(UInt32Array::from_iter_values(values.map(|v| v as u32))),
                _ => Arc::new(UInt64Array::from_iter_values(values)),
            });
        }
        columns.push(Arc::new(UInt16Array::from_iter(flows.iter().map(|f| f.dir[d].mss))));
        columns.push(Arc::new(UInt8Array::from_iter(flows.iter().map(|f| f.dir[d].wscale))));
    }
    let tcp: Vec<Option<TcpSummary>> = flows.iter().map(|f| f.tcp.as_ref().map(|t| t.summary())).collect();
    columns.push(Arc::new(StringArray::from_iter(tcp.iter().map(|t| t.as_ref().map(|t| t.vantage)))));
    for (_, value) in TCP_COLUMNS {
        columns.push(Arc::new(Int64Array::from_iter(tcp.iter().map(|t| t.as_ref().and_then(value)))));
    }
    let quic: Vec<Option<QuicSummary>> =
        flows.iter().map(|f| f.quic.as_deref().map(|q| q.summary(f.dir[1].packets))).collect();
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| f.service()))));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| f.sni.clone()))));
    columns
        .push(Arc::new(StringArray::from_iter(flows.iter().map(|f| (!f.alpn.is_empty()).then(|| f.alpn.join(","))))));
    for (_, value) in QUIC_TEXT_COLUMNS {
        columns.push(Arc::new(StringArray::from_iter(quic.iter().map(|q| q.as_ref().and_then(value)))));
    }
    for (_, value) in QUIC_COLUMNS {
        columns.push(Arc::new(Int64Array::from_iter(quic.iter().map(|q| q.as_ref().and_then(value)))));
    }
    columns.push(Arc::new(BooleanArray::from_iter(quic.iter().map(|q| q.as_ref().map(|q| q.retry)))));
    columns.push(Arc::new(BooleanArray::from_iter(quic.iter().map(|q| q.as_ref().map(|q| q.version_negotiation)))));
    columns.push(Arc::new(StringArray::from_iter(quic.iter().map(|q| q.as_ref().and_then(|q| q.keys)))));
    for (_, value) in KEYED_COLUMNS {
        let keyed = quic.iter().map(|q| q.as_ref().and_then(|q| q.keyed.as_ref()));
        columns.push(Arc::new(Int64Array::from_iter(keyed.map(|k| k.and_then(value)))));
    }
    columns.push(Arc::new(Float64Array::from_iter(tcp.iter().map(|t| t.as_ref().and_then(|t| t.rtt_inflight_corr)))));
    columns.push(Arc::new(Float64Array::from_iter(tcp.iter().map(|t| t.as_ref().and_then(|t| t.policing_rate_bps)))));
    columns.push(string_lists(flows.iter().map(Flow::signatures)));
    columns.push(strs(&|f| files[f.first_file as usize].clone()));
    columns.push(strs(&|f| files[f.last_file as usize].clone()));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| opt_str(f.encap)))));
    RecordBatch::try_new(flow_schema(), columns).expect("flow columns match the schema")
}

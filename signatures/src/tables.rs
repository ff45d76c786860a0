//! The output tables as Arrow record batches: schemas (one place; documented in
//! docs/schemas.md) and the plain row structs they are built from.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder};
use arrow_array::types::{Int64Type, UInt16Type, UInt32Type};
use arrow_array::{
    ArrayRef, ArrowPrimitiveType, BooleanArray, Float64Array, Int64Array, ListArray, PrimitiveArray, RecordBatch,
    StringArray, TimestampNanosecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

use crate::flow::Flow;
use crate::quic::QuicState;
use crate::quic_keyed::{KeyStatus, KeyedQuic};
use crate::tags;
use crate::tcp::TcpFlowStats;

/// Bumped on every deliberate change of a table's columns or their meaning.
pub const SCHEMA_VERSION: u32 = 3;

fn ts_type() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

fn sack_fields() -> Fields {
    Fields::from(vec![Field::new("left", DataType::UInt32, false), Field::new("right", DataType::UInt32, false)])
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
        Field::new("tags", DataType::UInt32, false),
        Field::new("tag_names", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false),
        Field::new("retx_cause", DataType::Utf8, true),
        Field::new("retx_delay_ns", DataType::Int64, true),
        Field::new("rtt_ns", DataType::Int64, true),
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
    fields.push(Field::new("vantage", DataType::Utf8, true));
    for (name, ty) in TCP_FLOW_COLUMNS {
        fields.push(Field::new(*name, ty.clone(), true));
    }
    for name in ["sni", "alpn", "quic_version", "quic_ocid", "quic_handshake", "quic_spin"] {
        fields.push(Field::new(name, DataType::Utf8, true));
    }
    for name in [
        "quic_handshake_rtt_ns",
        "quic_initial_retx",
        "quic_server_initial_retx",
        "quic_initial_loss_delay_ns",
        "quic_spin_rtt_p50_ns",
        "quic_spin_samples",
        "quic_migrations",
    ] {
        fields.push(Field::new(name, DataType::Int64, true));
    }
    fields.push(Field::new("quic_retry", DataType::Boolean, true));
    fields.push(Field::new("quic_version_negotiation", DataType::Boolean, true));
    fields.push(Field::new("quic_keys", DataType::Utf8, true));
    for (name, _) in KEYED_FLOW_COLUMNS {
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
    pub tags: u32,
    pub rtt_ns: Option<i64>,
    pub retx_delay_ns: Option<i64>,
}

/// TCP flow columns (null for UDP flows), in schema order; values come from [`tcp_values`].
const TCP_FLOW_COLUMNS: &[(&str, DataType)] = &[
    ("handshake_rtt_ns", DataType::Int64),
    ("syn_synack_ns", DataType::Int64),
    ("rtt_samples", DataType::Int64),
    ("rtt_min_ns", DataType::Int64),
    ("rtt_p50_ns", DataType::Int64),
    ("rtt_p95_ns", DataType::Int64),
    ("rtt_max_ns", DataType::Int64),
    ("c2s_retx_packets", DataType::Int64),
    ("s2c_retx_packets", DataType::Int64),
    ("c2s_retx_bytes", DataType::Int64),
    ("s2c_retx_bytes", DataType::Int64),
    ("retx_rto", DataType::Int64),
    ("retx_fast", DataType::Int64),
    ("retx_tlp", DataType::Int64),
    ("retx_spurious", DataType::Int64),
    ("retx_network_duplicate", DataType::Int64),
    ("retx_unknown", DataType::Int64),
    ("retx_delay_p50_ns", DataType::Int64),
    ("retx_delay_max_ns", DataType::Int64),
    ("max_retx_per_segment", DataType::Int64),
    ("recovery_ns", DataType::Int64),
    ("c2s_out_of_order", DataType::Int64),
    ("s2c_out_of_order", DataType::Int64),
    ("c2s_reordered", DataType::Int64),
    ("s2c_reordered", DataType::Int64),
    ("reorder_extent_max_ns", DataType::Int64),
    ("c2s_lost_segments", DataType::Int64),
    ("s2c_lost_segments", DataType::Int64),
    ("c2s_dup_acks", DataType::Int64),
    ("s2c_dup_acks", DataType::Int64),
    ("c2s_zero_windows", DataType::Int64),
    ("s2c_zero_windows", DataType::Int64),
    ("syn_retx", DataType::Int64),
    ("synack_retx", DataType::Int64),
    ("syn_loss_delay_ns", DataType::Int64),
    ("synack_loss_delay_ns", DataType::Int64),
    ("tail_losses", DataType::Int64),
    ("tail_loss_delay_ns", DataType::Int64),
    ("rtt_inflation_ns", DataType::Int64),
    ("policing_burst_bytes", DataType::Int64),
    ("rwnd_limited_ns", DataType::Int64),
    ("app_limited_ns", DataType::Int64),
];

/// The path to the client is what a server-side capture measures: server data acked by the client.
fn tcp_values(f: &Flow) -> Option<[Option<i64>; 42]> {
    let t = f.tcp.as_ref()?;
    let s: &TcpFlowStats = &t.stats;
    let to_client = &t.dir[1].rtt;
    let n = |v: u64| Some(v as i64);
    Some([
        s.handshake_rtt_ns,
        s.syn_synack_ns,
        n(to_client.count()),
        to_client.min,
        to_client.percentile(50.0),
        to_client.percentile(95.0),
        to_client.max,
        n(s.retx_packets[0]),
        n(s.retx_packets[1]),
        n(s.retx_bytes[0]),
        n(s.retx_bytes[1]),
        n(s.retx_rto),
        n(s.retx_fast),
        n(s.retx_tlp),
        n(s.retx_spurious),
        n(s.retx_network_duplicate),
        n(s.retx_unknown),
        s.retx_delays_ns.percentile(50.0),
        s.retx_delays_ns.max,
        n(u64::from(s.max_retx_per_segment)),
        Some(s.recovery_ns),
        n(s.out_of_order[0]),
        n(s.out_of_order[1]),
        n(s.reordered[0]),
        n(s.reordered[1]),
        Some(s.reorder_extent_max_ns),
        n(s.lost_segments[0]),
        n(s.lost_segments[1]),
        n(s.dup_acks[0]),
        n(s.dup_acks[1]),
        n(s.zero_windows[0]),
        n(s.zero_windows[1]),
        n(u64::from(s.syn_retx)),
        n(u64::from(s.synack_retx)),
        Some(s.syn_loss_delay_ns),
        Some(s.synack_loss_delay_ns),
        n(s.tail_losses),
        Some(s.tail_loss_delay_ns),
        t.verdicts.rtt_inflation_ns,
        t.verdicts.policing_burst_bytes,
        Some(t.path.rwnd_limited_ns),
        Some(t.path.app_limited_ns),
    ])
}

/// QUIC flow columns with a key log (null without one, or when the log lacks the connection's
/// secrets); values from the keyed analysis (crate::quic_keyed).
type KeyedValue = fn(&KeyedQuic) -> Option<i64>;
const KEYED_FLOW_COLUMNS: &[(&str, KeyedValue)] = &[
    ("quic_decrypted_packets", |k| Some((k.stats.decrypted[0] + k.stats.decrypted[1]) as i64)),
    ("quic_undecryptable_packets", |k| Some((k.stats.undecryptable[0] + k.stats.undecryptable[1]) as i64)),
    ("c2s_quic_lost", |k| Some(k.stats.lost[0] as i64)),
    ("s2c_quic_lost", |k| Some(k.stats.lost[1] as i64)),
    ("quic_lost_packet_threshold", |k| Some(k.stats.lost_by[0] as i64)),
    ("quic_lost_time_threshold", |k| Some(k.stats.lost_by[1] as i64)),
    ("quic_lost_pto", |k| Some(k.stats.lost_by[2] as i64)),
    ("c2s_quic_retx", |k| Some(k.stats.retx[0] as i64)),
    ("s2c_quic_retx", |k| Some(k.stats.retx[1] as i64)),
    ("quic_retx_spurious", |k| Some(k.stats.retx_spurious as i64)),
    ("c2s_quic_out_of_order", |k| Some(k.stats.out_of_order[0] as i64)),
    ("s2c_quic_out_of_order", |k| Some(k.stats.out_of_order[1] as i64)),
    ("quic_rtt_samples", |k| Some(k.stats.rtt.count() as i64)),
    ("quic_rtt_min_ns", |k| k.stats.rtt.min),
    ("quic_rtt_p50_ns", |k| k.stats.rtt.percentile(50.0)),
    ("quic_key_updates", |k| Some(i64::from(k.key_updates()))),
];

fn keyed_of(f: &Flow) -> Option<&KeyedQuic> {
    f.quic.as_deref()?.keyed.as_deref().filter(|k| k.status == KeyStatus::Decrypting)
}

fn quic_of(f: &Flow) -> Option<&QuicState> {
    f.quic.as_deref()
}

/// Flow-level signature names: what struck this flow at least once.
fn flow_signatures(f: &Flow) -> Vec<&'static str> {
    if let Some(q) = f.quic.as_deref() {
        let mut out = Vec::new();
        if q.initial_retx[0] > 0 && q.initial_loss_delay_ns > 0 {
            out.push("quic_initial_loss");
        }
        if q.initial_retx[1] > 0 {
            out.push("quic_server_initial_loss");
        }
        match q.handshake_outcome(f.dir[1].packets) {
            "no_server_reply" => out.push("quic_no_server_reply"),
            "no_client_handshake" => out.push("quic_no_client_handshake"),
            "version_negotiation_failed" => out.push("quic_version_negotiation_failed"),
            _ => {}
        }
        if q.migrations > 0 {
            out.push("quic_migration");
        }
        if let Some(k) = keyed_of(f) {
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
        return out;
    }
    let Some(t) = f.tcp.as_ref() else { return Vec::new() };
    let s = &t.stats;
    let mut out = Vec::new();
    // A SYN repeated before any SYN-ACK went out; a SYN-ACK lost later in the same handshake is
    // its own signature, not a reason to drop this one.
    let syn_loss = s.syn_retx > 0 && s.syn_loss_delay_ns > 0;
    for (hit, name) in [
        (syn_loss, "syn_loss"),
        (s.synack_retx > 0, "synack_loss"),
        (s.tail_losses > 0, "tail_loss"),
        (s.retx_rto > 0, "rto"),
        (s.retx_fast > 0, "fast_retransmit"),
        (s.retx_tlp > 0, "tlp"),
        (s.retx_spurious > 0, "spurious_retransmission"),
        (s.reordered[0] + s.reordered[1] > 0, "reordering"),
        (s.zero_windows[0] + s.zero_windows[1] > 0, "zero_window"),
        (t.verdicts.bufferbloat, "bufferbloat"),
        (t.verdicts.policed, "policing"),
    ] {
        if hit {
            out.push(name);
        }
    }
    out
}

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
    /// An event on this packet's row (signature and details to be filled in).
    pub fn of(row: &PacketRow) -> EventRow {
        EventRow {
            file_index: row.file_index,
            frame: row.frame,
            ts_ns: row.ts_ns,
            flow_id: row.flow_id,
            c2s: row.c2s,
            signature: "",
            cause: None,
            delay_ns: None,
            seq: None,
            len: row.payload_len,
        }
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

fn string_lists<'a>(items: impl Iterator<Item = Vec<&'a str>>) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new("item", DataType::Utf8, false)));
    for v in items {
        for s in v {
            b.values().append_value(s);
        }
        b.append(true);
    }
    Arc::new(b.finish())
}

fn opt_str(s: &str) -> Option<&str> {
    if s.is_empty() {
        None
    } else {
        Some(s)
    }
}

// The packet batch is built once per packet, so its columns are filled without Arrow's
// per-element builders and `FromIterator<Option<_>>`, which branch and grow buffers on every value.

/// A string column with a null where `f` gives None (no validity buffer when nothing is null).
fn str_column<'a>(n: usize, f: impl Fn(usize) -> Option<&'a str>) -> StringArray {
    let mut values: Vec<u8> = Vec::new();
    let offsets = OffsetBuffer::<i32>::from_lengths((0..n).map(|i| {
        let s = f(i).unwrap_or("");
        values.extend_from_slice(s.as_bytes());
        s.len()
    }));
    let valid = BooleanBuffer::collect_bool(n, |i| f(i).is_some());
    let nulls = (valid.count_set_bits() < n).then(|| NullBuffer::new(valid));
    StringArray::new(offsets, Buffer::from_vec(values), nulls)
}

/// Names up to this long are copied as one fixed-size block (see `names_column`).
const NAME_BLOCK: usize = 32;

/// Each name zero-padded to a `NAME_BLOCK`-byte block, or None if one is longer.
fn name_blocks<'a>(names: impl Iterator<Item = &'a str>) -> Option<Vec<[u8; NAME_BLOCK]>> {
    names
        .map(|s| {
            let mut b = [0u8; NAME_BLOCK];
            b.get_mut(..s.len())?.copy_from_slice(s.as_bytes());
            Some(b)
        })
        .collect()
}

/// A string column whose every value is one of a few `names`: `index(i)` is row i's, or None for
/// a null (no validity buffer when nothing is null). The same as `str_column`, but each value is
/// copied as one fixed-size block, overwritten in part by the next: a copy of a variable length
/// is a call to `memcpy` per row.
fn names_column(n: usize, names: &[&str], index: impl Fn(usize) -> Option<usize>) -> StringArray {
    let Some(blocks) = name_blocks(names.iter().copied()) else {
        return str_column(n, |i| index(i).map(|k| names[k]));
    };
    let total: usize = (0..n).map(|i| index(i).map_or(0, |k| names[k].len())).sum();
    i32::try_from(total).expect("offset overflow");
    let mut values = vec![0u8; total + NAME_BLOCK];
    let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
    offsets.push(0);
    let mut end = 0;
    let mut null_count = 0;
    for i in 0..n {
        match index(i) {
            Some(k) => {
                values[end..end + NAME_BLOCK].copy_from_slice(&blocks[k]);
                end += names[k].len();
            }
            None => null_count += 1,
        }
        offsets.push(end as i32);
    }
    values.truncate(total);
    let nulls = (null_count > 0).then(|| NullBuffer::new(BooleanBuffer::collect_bool(n, |i| index(i).is_some())));
    StringArray::new(OffsetBuffer::new(ScalarBuffer::from(offsets)), Buffer::from_vec(values), nulls)
}

/// `tags::names` of every row as a list<string>, without a Vec per row. Names are copied as
/// fixed-size blocks, as in `names_column`.
fn tag_name_lists(tags: &[u32]) -> ArrayRef {
    let blocks = name_blocks(tags::ALL.iter().map(|(_, s)| *s)).expect("tag names fit a name block");
    let mut values: Vec<u8> = Vec::new();
    let mut end = 0;
    let mut value_offsets: Vec<i32> = vec![0];
    let mut list_offsets: Vec<i32> = Vec::with_capacity(tags.len() + 1);
    list_offsets.push(0);
    for &t in tags {
        let mut rest = t;
        while rest != 0 {
            // `tags::ALL` lists the bits in order, so this is `tags::names`' order.
            let bit = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if values.len() < end + NAME_BLOCK {
                values.resize((2 * values.len()).max(end + NAME_BLOCK).max(4096), 0);
            }
            values[end..end + NAME_BLOCK].copy_from_slice(&blocks[bit]);
            end += tags::ALL[bit].1.len();
            value_offsets.push(i32::try_from(end).expect("tag names of one batch fit in 2 GiB"));
        }
        list_offsets.push(i32::try_from(value_offsets.len() - 1).expect("tag names of one batch fit in 2 GiB"));
    }
    values.truncate(end);
    let names = StringArray::new(OffsetBuffer::new(ScalarBuffer::from(value_offsets)), Buffer::from_vec(values), None);
    let item = Arc::new(Field::new("item", DataType::Utf8, false));
    Arc::new(ListArray::new(item, OffsetBuffer::new(ScalarBuffer::from(list_offsets)), Arc::new(names), None))
}

/// A bit-packed copy of `v`, the same buffer as `BooleanBuffer::collect_bool(v.len(), |i| v[i])`
/// (whole 64-bit words, cut to the bytes the bits need, zeros after the last bit) at a fraction
/// of the instructions: eight bools (bytes of 0 or 1) become one byte by one multiplication.
fn pack_bools(v: &[bool]) -> BooleanBuffer {
    // Byte j of the product's top byte collects byte j of x as its bit j (no carries: each
    // partial product lands on its own bit).
    let byte = |c: &[bool]| -> u64 {
        let c: [bool; 8] = c.try_into().expect("eight bools");
        u64::from_le_bytes(c.map(u8::from)).wrapping_mul(0x0102_0408_1020_4080) >> 56
    };
    let mut words: Vec<u64> = Vec::with_capacity(v.len().div_ceil(64));
    let mut chunks = v.chunks_exact(64);
    for c in &mut chunks {
        let mut w = 0u64;
        for (j, b) in c.chunks_exact(8).enumerate() {
            w |= byte(b) << (8 * j);
        }
        words.push(w);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = 0u64;
        for (j, &b) in rest.iter().enumerate() {
            w |= u64::from(b) << j;
        }
        words.push(w);
    }
    let mut buffer = MutableBuffer::from(words);
    buffer.truncate(v.len().div_ceil(8));
    BooleanBuffer::new(buffer.into(), 0, v.len())
}

/// A nullable column being filled: values (the default in a null's slot, as Arrow's builders
/// do) and validity.
struct OptColumn<T: ArrowPrimitiveType> {
    values: Vec<T::Native>,
    valid: Vec<bool>,
}

impl<T: ArrowPrimitiveType> OptColumn<T> {
    fn new() -> Self {
        OptColumn { values: Vec::new(), valid: Vec::new() }
    }

    fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
        self.valid.reserve(n);
    }

    fn extend(&mut self, rows: &[PacketRow], f: impl Fn(&PacketRow) -> Option<T::Native>) {
        self.values.extend(rows.iter().map(|r| f(r).unwrap_or_default()));
        self.valid.extend(rows.iter().map(|r| f(r).is_some()));
    }

    fn finish(&mut self) -> PrimitiveArray<T> {
        let values = ScalarBuffer::from(std::mem::take(&mut self.values));
        let valid = std::mem::take(&mut self.valid);
        PrimitiveArray::new(values, Some(NullBuffer::new(pack_bools(&valid))))
    }
}

/// Rows staged before they go into the columns: 4,096 rows of 192 bytes stay in the L2 cache
/// while each column takes its values from them in one tight pass.
const STAGED_ROWS: usize = 4096;

/// The packet batch being filled. Rows are staged in a small buffer, which is moved into the
/// batch's columns each time it fills; the columns then become the batch's Arrow buffers without
/// a copy. (A whole batch of rows, 12 MiB at 64k rows, was written to memory and read back once
/// per column, then built in chunks that were concatenated: memory traffic, not instructions, was
/// most of that cost.) Tags stay editable until the batch is built (`Session::relabel_spurious`).
pub struct PacketColumns {
    /// Rows the columns reserve room for when a batch starts.
    capacity: usize,
    staged: Vec<PacketRow>,
    file_index: Vec<u32>,
    frame: Vec<u64>,
    ts_ns: Vec<i64>,
    flow_id: Vec<i64>,
    c2s: Vec<bool>,
    ip_proto: Vec<u8>,
    seq: OptColumn<UInt32Type>,
    ack: OptColumn<UInt32Type>,
    rel_seq: OptColumn<UInt32Type>,
    rel_ack: OptColumn<UInt32Type>,
    payload_len: Vec<u32>,
    flags: OptColumn<UInt16Type>,
    window: OptColumn<UInt32Type>,
    window_scaled: Vec<bool>,
    window_scaled_valid: Vec<bool>,
    tsval: OptColumn<UInt32Type>,
    tsecr: OptColumn<UInt32Type>,
    /// SACK blocks of the batch, flat; per row its count (0 for a packet that is not TCP).
    sack_left: Vec<u32>,
    sack_right: Vec<u32>,
    sack_count: Vec<u8>,
    is_tcp: Vec<bool>,
    ip_id: OptColumn<UInt32Type>,
    ttl: Vec<u8>,
    wire_len: Vec<u32>,
    /// Per row an index into `encaps`, the distinct encapsulation names seen.
    encap: Vec<u8>,
    encaps: Vec<&'static str>,
    tags: Vec<u32>,
    retx_delay_ns: OptColumn<Int64Type>,
    rtt_ns: OptColumn<Int64Type>,
}

impl PacketColumns {
    pub fn new(capacity: usize) -> PacketColumns {
        PacketColumns {
            capacity,
            staged: Vec::with_capacity(capacity.min(STAGED_ROWS)),
            file_index: Vec::new(),
            frame: Vec::new(),
            ts_ns: Vec::new(),
            flow_id: Vec::new(),
            c2s: Vec::new(),
            ip_proto: Vec::new(),
            seq: OptColumn::new(),
            ack: OptColumn::new(),
            rel_seq: OptColumn::new(),
            rel_ack: OptColumn::new(),
            payload_len: Vec::new(),
            flags: OptColumn::new(),
            window: OptColumn::new(),
            window_scaled: Vec::new(),
            window_scaled_valid: Vec::new(),
            tsval: OptColumn::new(),
            tsecr: OptColumn::new(),
            sack_left: Vec::new(),
            sack_right: Vec::new(),
            sack_count: Vec::new(),
            is_tcp: Vec::new(),
            ip_id: OptColumn::new(),
            ttl: Vec::new(),
            wire_len: Vec::new(),
            encap: Vec::new(),
            encaps: Vec::new(),
            tags: Vec::new(),
            retx_delay_ns: OptColumn::new(),
            rtt_ns: OptColumn::new(),
        }
    }

    /// Rows in the batch so far.
    pub fn len(&self) -> usize {
        self.frame.len() + self.staged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, r: PacketRow) {
        self.staged.push(r);
        if self.staged.len() >= STAGED_ROWS {
            self.unstage();
        }
    }

    /// Room for a whole batch at once, so that no column grows (and is copied) while it fills.
    fn reserve(&mut self, n: usize) {
        self.file_index.reserve(n);
        self.frame.reserve(n);
        self.ts_ns.reserve(n);
        self.flow_id.reserve(n);
        self.c2s.reserve(n);
        self.ip_proto.reserve(n);
        self.seq.reserve(n);
        self.ack.reserve(n);
        self.rel_seq.reserve(n);
        self.rel_ack.reserve(n);
        self.payload_len.reserve(n);
        self.flags.reserve(n);
        self.window.reserve(n);
        self.window_scaled.reserve(n);
        self.window_scaled_valid.reserve(n);
        self.tsval.reserve(n);
        self.tsecr.reserve(n);
        self.sack_count.reserve(n);
        self.is_tcp.reserve(n);
        self.ip_id.reserve(n);
        self.ttl.reserve(n);
        self.wire_len.reserve(n);
        self.encap.reserve(n);
        self.tags.reserve(n);
        self.retx_delay_ns.reserve(n);
        self.rtt_ns.reserve(n);
    }

    /// Move the staged rows into the columns, one column at a time.
    fn unstage(&mut self) {
        if self.staged.is_empty() {
            return;
        }
        if self.frame.is_empty() {
            self.reserve(self.capacity.max(self.staged.len()));
        }
        let staged = std::mem::take(&mut self.staged);
        let rows = &staged[..];
        self.file_index.extend(rows.iter().map(|r| r.file_index));
        self.frame.extend(rows.iter().map(|r| r.frame));
        self.ts_ns.extend(rows.iter().map(|r| r.ts_ns));
        self.flow_id.extend(rows.iter().map(|r| r.flow_id));
        self.c2s.extend(rows.iter().map(|r| r.c2s));
        self.ip_proto.extend(rows.iter().map(|r| r.ip_proto));
        self.seq.extend(rows, |r| r.seq);
        self.ack.extend(rows, |r| r.ack);
        self.rel_seq.extend(rows, |r| r.rel_seq);
        self.rel_ack.extend(rows, |r| r.rel_ack);
        self.payload_len.extend(rows.iter().map(|r| r.payload_len));
        self.flags.extend(rows, |r| r.flags);
        self.window.extend(rows, |r| r.window);
        self.window_scaled.extend(rows.iter().map(|r| r.window_scaled.unwrap_or_default()));
        self.window_scaled_valid.extend(rows.iter().map(|r| r.window_scaled.is_some()));
        self.tsval.extend(rows, |r| r.ts.map(|t| t.0));
        self.tsecr.extend(rows, |r| r.ts.map(|t| t.1));
        let blocks = |r: &PacketRow| if r.is_tcp { usize::from(r.sack_count) } else { 0 };
        self.sack_left.extend(rows.iter().flat_map(|r| &r.sack[..blocks(r)]).map(|b| b.0));
        self.sack_right.extend(rows.iter().flat_map(|r| &r.sack[..blocks(r)]).map(|b| b.1));
        self.sack_count.extend(rows.iter().map(|r| blocks(r) as u8));
        self.is_tcp.extend(rows.iter().map(|r| r.is_tcp));
        self.ip_id.extend(rows, |r| r.ip_id);
        self.ttl.extend(rows.iter().map(|r| r.ttl));
        self.wire_len.extend(rows.iter().map(|r| r.wire_len));
        for r in rows {
            // The names are static strings: the same name is almost always the same pointer.
            let same = |e: &&str| std::ptr::eq(*e, r.encap) || *e == r.encap;
            let encap = match self.encaps.iter().position(same) {
                Some(i) => i,
                None => {
                    self.encaps.push(r.encap);
                    self.encaps.len() - 1
                }
            };
            self.encap.push(u8::try_from(encap).expect("fewer than 256 encapsulation names"));
        }
        self.tags.extend(rows.iter().map(|r| r.tags));
        self.retx_delay_ns.extend(rows, |r| r.retx_delay_ns);
        self.rtt_ns.extend(rows, |r| r.rtt_ns);
        self.staged = staged;
        self.staged.clear();
    }

    /// The index of the last row at or after `floor` of this flow direction that carries
    /// sequence number `seq` and one of `bits` in its tags.
    pub fn find_last(&self, floor: usize, flow_id: i64, c2s: bool, seq: u32, bits: u32) -> Option<usize> {
        let moved = self.frame.len();
        let staged = self.staged.iter().enumerate().rev().map(|(i, r)| (moved + i, r.flow_id, r.c2s, r.tags, r.seq));
        let columns = (0..moved).rev().map(|i| {
            let seq = self.seq.valid[i].then(|| self.seq.values[i]);
            (i, self.flow_id[i], self.c2s[i], self.tags[i], seq)
        });
        staged
            .chain(columns)
            .take_while(|&(i, ..)| i >= floor)
            .find(|&(_, id, dir, tags, s)| id == flow_id && dir == c2s && tags & bits != 0 && s == Some(seq))
            .map(|(i, ..)| i)
    }

    /// A row's tags, to change them while the row waits in the batch.
    pub fn tags_mut(&mut self, i: usize) -> &mut u32 {
        let moved = self.frame.len();
        if i < moved {
            &mut self.tags[i]
        } else {
            &mut self.staged[i - moved].tags
        }
    }

    pub fn frame(&self, i: usize) -> u64 {
        let moved = self.frame.len();
        if i < moved {
            self.frame[i]
        } else {
            self.staged[i - moved].frame
        }
    }

    /// The rows so far as a batch; the columns start over empty.
    pub fn finish(&mut self, capture_id: &str, files: &[String]) -> RecordBatch {
        self.unstage();
        let n = self.frame.len();
        let capture_id = StringArray::new(
            OffsetBuffer::<i32>::from_repeated_length(capture_id.len(), n),
            Buffer::from_vec(capture_id.as_bytes().repeat(n)),
            None,
        );
        let file_index = std::mem::take(&mut self.file_index);
        let c2s = std::mem::take(&mut self.c2s);
        let encap = std::mem::take(&mut self.encap);
        let encaps = std::mem::take(&mut self.encaps);
        let tags = std::mem::take(&mut self.tags);
        let window_scaled = {
            let (v, ok) = (std::mem::take(&mut self.window_scaled), std::mem::take(&mut self.window_scaled_valid));
            BooleanArray::new(pack_bools(&v), Some(NullBuffer::new(pack_bools(&ok))))
        };
        let sack = {
            let left = UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.sack_left)), None);
            let right = UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.sack_right)), None);
            let items =
                arrow_array::StructArray::new(sack_fields(), vec![Arc::new(left) as ArrayRef, Arc::new(right)], None);
            let lists = OffsetBuffer::<i32>::from_lengths(self.sack_count.iter().map(|&c| usize::from(c)));
            self.sack_count = Vec::new();
            let is_tcp = std::mem::take(&mut self.is_tcp);
            let valid = pack_bools(&is_tcp);
            let nulls = (valid.count_set_bits() < n).then(|| NullBuffer::new(valid));
            let item = Arc::new(Field::new("item", DataType::Struct(sack_fields()), false));
            Arc::new(ListArray::new(item, lists, Arc::new(items), nulls))
        };
        let tag_names = tag_name_lists(&tags);
        let retx_cause = names_column(n, &tags::CAUSES.map(|(_, name)| name), |i| tags::cause_index(tags[i]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(capture_id),
            Arc::new(names_column(n, &files.iter().map(String::as_str).collect::<Vec<_>>(), |i| {
                Some(file_index[i] as usize)
            })),
            Arc::new(UInt64Array::new(ScalarBuffer::from(std::mem::take(&mut self.frame)), None)),
            Arc::new(
                TimestampNanosecondArray::new(ScalarBuffer::from(std::mem::take(&mut self.ts_ns)), None)
                    .with_timezone("UTC"),
            ),
            Arc::new(Int64Array::new(ScalarBuffer::from(std::mem::take(&mut self.flow_id)), None)),
            Arc::new(names_column(n, &["c2s", "s2c"], |i| Some(usize::from(!c2s[i])))),
            Arc::new(UInt8Array::new(ScalarBuffer::from(std::mem::take(&mut self.ip_proto)), None)),
            Arc::new(self.seq.finish()),
            Arc::new(self.ack.finish()),
            Arc::new(self.rel_seq.finish()),
            Arc::new(self.rel_ack.finish()),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.payload_len)), None)),
            Arc::new(self.flags.finish()),
            Arc::new(self.window.finish()),
            Arc::new(window_scaled),
            Arc::new(self.tsval.finish()),
            Arc::new(self.tsecr.finish()),
            sack,
            Arc::new(self.ip_id.finish()),
            Arc::new(UInt8Array::new(ScalarBuffer::from(std::mem::take(&mut self.ttl)), None)),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.wire_len)), None)),
            Arc::new(names_column(n, &encaps, |i| Some(usize::from(encap[i])).filter(|&k| !encaps[k].is_empty()))),
            Arc::new(UInt32Array::new(ScalarBuffer::from(tags), None)),
            tag_names,
            Arc::new(retx_cause),
            Arc::new(self.retx_delay_ns.finish()),
            Arc::new(self.rtt_ns.finish()),
        ];
        RecordBatch::try_new(packet_schema(), columns).expect("packet columns match the schema")
    }
}

/// The packets table's batch of these rows.
pub fn packets_batch(rows: &[PacketRow], capture_id: &str, files: &[String]) -> RecordBatch {
    let mut columns = PacketColumns::new(rows.len());
    for r in rows {
        columns.push(r.clone());
    }
    columns.finish(capture_id, files)
}

pub fn flows_batch(flows: &[Flow], capture_id: &str, files: &[String], cid_seed: u16) -> RecordBatch {
    let n = flows.len();
    let u64s = |f: &dyn Fn(&Flow) -> u64| -> ArrayRef { Arc::new(UInt64Array::from_iter_values(flows.iter().map(f))) };
    let u32s = |f: &dyn Fn(&Flow) -> u32| -> ArrayRef { Arc::new(UInt32Array::from_iter_values(flows.iter().map(f))) };
    let strs =
        |f: &dyn Fn(&Flow) -> String| -> ArrayRef { Arc::new(StringArray::from_iter_values(flows.iter().map(f))) };
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(flows.iter().map(|f| f.flow_id))),
        strs(&|f| f.community_id(cid_seed)),
        strs(&|f| match f.proto {
            6 => "tcp".into(),
            17 if f.quic.is_some() => "quic".into(),
            17 => "udp".into(),
            p => p.to_string(),
        }),
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
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| f.tcp.as_ref().map(|t| t.vantage.name())))));
    let tcp: Vec<Option<[Option<i64>; 42]>> = flows.iter().map(tcp_values).collect();
    for i in 0..TCP_FLOW_COLUMNS.len() {
        columns.push(Arc::new(Int64Array::from_iter(tcp.iter().map(|v| v.as_ref().and_then(|v| v[i])))));
    }
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| f.sni.clone()))));
    columns
        .push(Arc::new(StringArray::from_iter(flows.iter().map(|f| (!f.alpn.is_empty()).then(|| f.alpn.join(","))))));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| quic_of(f).and_then(|q| q.version_label())))));
    columns.push(Arc::new(StringArray::from_iter(
        flows.iter().map(|f| quic_of(f).filter(|q| !q.ocid.is_empty()).map(|q| hex(&q.ocid))),
    )));
    columns.push(Arc::new(StringArray::from_iter(
        flows.iter().map(|f| quic_of(f).map(|q| q.handshake_outcome(f.dir[1].packets))),
    )));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| quic_of(f).map(|q| q.spin_state())))));
    let qi = |g: &dyn Fn(&QuicState) -> Option<i64>| -> ArrayRef {
        Arc::new(Int64Array::from_iter(flows.iter().map(|f| quic_of(f).and_then(g))))
    };
    columns.push(qi(&|q| q.handshake_rtt_ns));
    columns.push(qi(&|q| Some(i64::from(q.initial_retx[0]))));
    columns.push(qi(&|q| Some(i64::from(q.initial_retx[1]))));
    columns.push(qi(&|q| Some(q.initial_loss_delay_ns)));
    columns.push(qi(&|q| q.spin_rtt.percentile(50.0)));
    columns.push(qi(&|q| Some(q.spin_rtt.count() as i64)));
    columns.push(qi(&|q| Some(i64::from(q.migrations))));
    columns.push(Arc::new(BooleanArray::from_iter(flows.iter().map(|f| quic_of(f).map(|q| q.retry)))));
    columns.push(Arc::new(BooleanArray::from_iter(flows.iter().map(|f| quic_of(f).map(|q| q.version_negotiation)))));
    columns.push(Arc::new(StringArray::from_iter(
        flows.iter().map(|f| quic_of(f).and_then(|q| q.keyed.as_deref()).map(|k| k.status.name())),
    )));
    for (_, value) in KEYED_FLOW_COLUMNS {
        columns.push(Arc::new(Int64Array::from_iter(flows.iter().map(|f| keyed_of(f).and_then(value)))));
    }
    columns.push(Arc::new(Float64Array::from_iter(
        flows.iter().map(|f| f.tcp.as_ref().and_then(|t| t.verdicts.rtt_inflight_corr)),
    )));
    columns.push(Arc::new(Float64Array::from_iter(
        flows.iter().map(|f| f.tcp.as_ref().and_then(|t| t.verdicts.policing_rate_bps)),
    )));
    columns.push(string_lists(flows.iter().map(flow_signatures)));
    columns.push(strs(&|f| files[f.first_file as usize].clone()));
    columns.push(strs(&|f| files[f.last_file as usize].clone()));
    columns.push(Arc::new(StringArray::from_iter(flows.iter().map(|f| opt_str(f.encap)))));
    RecordBatch::try_new(flow_schema(), columns).expect("flow columns match the schema")
}

pub fn query_schema() -> SchemaRef {
    let delay_item = Field::new(
        "item",
        DataType::Struct(Fields::from(vec![
            Field::new("signature", DataType::Utf8, false),
            Field::new("delay_ns", DataType::Int64, false),
        ])),
        false,
    );
    Arc::new(Schema::new(vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("query_index", DataType::UInt32, false),
        Field::new("start", ts_type(), false),
        Field::new("first_byte", ts_type(), true),
        Field::new("last_byte", ts_type(), true),
        Field::new("end", ts_type(), false),
        Field::new("latency_ns", DataType::Int64, false),
        Field::new("ttfb_ns", DataType::Int64, true),
        Field::new("request_bytes", DataType::UInt64, false),
        Field::new("response_bytes", DataType::UInt64, false),
        Field::new("request_packets", DataType::UInt64, false),
        Field::new("response_packets", DataType::UInt64, false),
        Field::new("complete", DataType::Boolean, false),
        Field::new("setup_ns", DataType::Int64, true),
        Field::new("request_retransmitted", DataType::Boolean, false),
        Field::new("retransmissions", DataType::UInt64, false),
        Field::new("signatures", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false),
        Field::new("delays", DataType::List(Arc::new(delay_item)), false),
        Field::new("attributed_delay_ns", DataType::Int64, false),
    ]))
}

/// The columns of the flows table that enrichment reads (docs/enrichment.md), for flows still
/// open whose queries are written before the flow's own row: client address and port, start.
pub fn query_flows_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("client_ip", DataType::Utf8, false),
        Field::new("client_port", DataType::UInt16, false),
        Field::new("start", ts_type(), false),
    ]))
}

/// A flow as `query_flows_schema` describes it.
#[derive(Debug, Clone)]
pub struct QueryFlow {
    pub flow_id: i64,
    pub client: (std::net::IpAddr, u16),
    pub start_ns: i64,
}

pub fn query_flows_batch(flows: &[QueryFlow], capture_id: &str) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, flows.len()))),
        Arc::new(Int64Array::from_iter_values(flows.iter().map(|f| f.flow_id))),
        Arc::new(StringArray::from_iter_values(flows.iter().map(|f| f.client.0.to_string()))),
        Arc::new(UInt16Array::from_iter_values(flows.iter().map(|f| f.client.1))),
        Arc::new(TimestampNanosecondArray::from_iter_values(flows.iter().map(|f| f.start_ns)).with_timezone("UTC")),
    ];
    RecordBatch::try_new(query_flows_schema(), columns).expect("query flow columns match the schema")
}

/// Queries of the flows that ended, in flow then query order.
pub fn queries_of_flows(flows: &[Flow]) -> impl Iterator<Item = (i64, &crate::queries::Query)> {
    flows
        .iter()
        .filter_map(|f| {
            let done = f.tcp.as_ref().map(|t| &t.queries.done).or(keyed_of(f).map(|k| &k.queries))?;
            Some((f.flow_id, done))
        })
        .flat_map(|(id, done)| done.iter().map(move |q| (id, q)))
}

/// One queries row per (flow id, query).
pub fn queries_batch<'a>(
    rows: impl Iterator<Item = (i64, &'a crate::queries::Query)>,
    capture_id: &str,
) -> Option<RecordBatch> {
    let qs: Vec<(i64, &crate::queries::Query)> = rows.collect();
    if qs.is_empty() {
        return None;
    }
    let n = qs.len();
    let ts =
        |v: Vec<Option<i64>>| -> ArrayRef { Arc::new(TimestampNanosecondArray::from_iter(v).with_timezone("UTC")) };
    let mut delays = ListBuilder::new(StructBuilder::from_fields(
        Fields::from(vec![
            Field::new("signature", DataType::Utf8, false),
            Field::new("delay_ns", DataType::Int64, false),
        ]),
        n,
    ))
    .with_field(Arc::new(Field::new(
        "item",
        DataType::Struct(Fields::from(vec![
            Field::new("signature", DataType::Utf8, false),
            Field::new("delay_ns", DataType::Int64, false),
        ])),
        false,
    )));
    for (_, q) in &qs {
        let values = delays.values();
        for (sig, d) in &q.charges.items {
            values.field_builder::<StringBuilder>(0).unwrap().append_value(sig);
            values.field_builder::<arrow_array::builder::Int64Builder>(1).unwrap().append_value(*d);
            values.append(true);
        }
        delays.append(true);
    }
    let sigs = |q: &crate::queries::Query| -> Vec<&str> {
        let mut v: Vec<&str> = q.charges.items.iter().map(|(s, _)| *s).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(qs.iter().map(|(id, _)| *id))),
        Arc::new(UInt32Array::from_iter_values(qs.iter().map(|(_, q)| q.index))),
        ts(qs.iter().map(|(_, q)| Some(q.start_ns)).collect()),
        ts(qs.iter().map(|(_, q)| q.first_byte_ns).collect()),
        ts(qs.iter().map(|(_, q)| q.last_byte_ns).collect()),
        ts(qs.iter().map(|(_, q)| Some(q.end_ns())).collect()),
        Arc::new(Int64Array::from_iter_values(qs.iter().map(|(_, q)| q.end_ns() - q.start_ns))),
        Arc::new(Int64Array::from_iter(qs.iter().map(|(_, q)| q.first_byte_ns.map(|t| t - q.start_ns)))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.request_bytes))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.response_bytes))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.request_packets))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.response_packets))),
        Arc::new(BooleanArray::from_iter(qs.iter().map(|(_, q)| Some(q.complete())))),
        Arc::new(Int64Array::from_iter(qs.iter().map(|(_, q)| q.setup_ns))),
        Arc::new(BooleanArray::from_iter(qs.iter().map(|(_, q)| Some(q.request_retransmitted)))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.retransmissions))),
        string_lists(qs.iter().map(|(_, q)| sigs(q))),
        Arc::new(delays.finish()),
        Arc::new(Int64Array::from_iter_values(
            qs.iter().map(|(_, q)| q.charges.items.iter().fold(0i64, |sum, (_, d)| sum.saturating_add(*d))),
        )),
    ];
    Some(RecordBatch::try_new(query_schema(), columns).expect("query columns match the schema"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::builder::UInt32Builder;
    use arrow_array::Array;

    /// The packet batch as Arrow's generic builders make it: what the hand-filled columns of
    /// `packets_batch` must equal.
    fn reference(rows: &[PacketRow], capture_id: &str, files: &[String]) -> Vec<ArrayRef> {
        let lists = |items: Vec<Vec<&str>>| -> ArrayRef {
            let mut b =
                ListBuilder::new(StringBuilder::new()).with_field(Arc::new(Field::new("item", DataType::Utf8, false)));
            for v in items {
                for s in v {
                    b.values().append_value(s);
                }
                b.append(true);
            }
            Arc::new(b.finish())
        };
        vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, rows.len()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| files[r.file_index as usize].as_str()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| if r.c2s { "c2s" } else { "s2c" }))),
            Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.seq))),
            Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.rel_ack))),
            Arc::new(UInt16Array::from_iter(rows.iter().map(|r| r.flags))),
            Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ts.map(|t| t.1)))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| opt_str(r.encap)))),
            lists(rows.iter().map(|r| tags::names(r.tags).collect()).collect()),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| tags::cause_name(r.tags)))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.rtt_ns))),
            {
                let mut sack = ListBuilder::new(StructBuilder::from_fields(sack_fields(), rows.len()))
                    .with_field(Arc::new(Field::new("item", DataType::Struct(sack_fields()), false)));
                for r in rows {
                    if !r.is_tcp {
                        sack.append(false);
                        continue;
                    }
                    for &(left, right) in &r.sack[..usize::from(r.sack_count)] {
                        let values = sack.values();
                        values.field_builder::<UInt32Builder>(0).unwrap().append_value(left);
                        values.field_builder::<UInt32Builder>(1).unwrap().append_value(right);
                        values.append(true);
                    }
                    sack.append(true);
                }
                Arc::new(sack.finish())
            },
        ]
    }

    #[test]
    fn packed_bools_equal_collect_bool() {
        let mut x: u64 = 1;
        for n in [0usize, 1, 7, 8, 9, 63, 64, 65, 127, 128, 129, 1000, 65_536, 65_537] {
            for density in [0u64, 1, 50, 99, 100] {
                let v: Vec<bool> = (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        (x >> 33) % 100 < density
                    })
                    .collect();
                let want = BooleanBuffer::collect_bool(n, |i| v[i]);
                let got = pack_bools(&v);
                assert_eq!(got.inner().as_slice(), want.inner().as_slice(), "{n} {density}");
                assert_eq!((got.len(), got.offset()), (want.len(), want.offset()));
            }
        }
    }

    #[test]
    fn packet_columns_equal_the_generic_builders() {
        let files = vec!["a.pcap".to_string(), "dir/b.pcapng".to_string()];
        let rows: Vec<PacketRow> = (0..300u32)
            .map(|i| PacketRow {
                file_index: u32::from(i >= 150),
                frame: u64::from(i),
                c2s: i % 3 == 0,
                seq: (i % 4 != 0).then_some(i.wrapping_mul(2_654_435_761)),
                rel_ack: (i % 5 == 1).then_some(i),
                flags: (i % 2 == 0).then_some(0x18),
                ts: (i % 7 != 0).then_some((i, i + 1)),
                encap: if i % 11 == 0 { "vlan" } else { "" },
                tags: match i % 6 {
                    0 => 0,
                    1 => tags::RETRANSMISSION | tags::RETX_RTO | tags::TAIL_LOSS,
                    2 => tags::DUPLICATE_ACK,
                    3 => tags::QUIC_MIGRATION,
                    4 => u32::MAX >> 6,
                    _ => tags::RETRANSMISSION | tags::RETX_SPURIOUS,
                },
                rtt_ns: (i % 9 == 0).then_some(i64::from(i) * 1000),
                is_tcp: i % 13 != 5,
                sack: [(i, i + 10), (i + 20, i + 30), (i + 40, i + 50), (i + 60, i + 70)],
                sack_count: (i % 5) as u8,
                ..PacketRow::default()
            })
            .collect();
        for rows in [&rows[..], &rows[..0], &rows[..1], &rows[7..8]] {
            let batch = packets_batch(rows, "cap", &files);
            let names = [
                "capture_id",
                "file",
                "direction",
                "seq",
                "rel_ack",
                "flags",
                "tsecr",
                "encap",
                "tag_names",
                "retx_cause",
                "rtt_ns",
                "sack",
            ];
            for (name, want) in names.iter().zip(reference(rows, "cap", &files)) {
                let got = batch.column_by_name(name).unwrap();
                assert_eq!(got.to_data(), want.to_data(), "{name}");
                assert_eq!(got.null_count(), want.null_count(), "{name}");
            }
        }
    }
}

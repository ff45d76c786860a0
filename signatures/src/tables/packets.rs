//! The packets table: one row per packet read, with the analysis' tags. Its batch is the one
//! built per packet, so its columns are filled by hand (`PacketColumns`, `super::columns`).
//!
//! What can be derived from another column is not stored: `tag_names` and `retx_cause` are the
//! `tags` mask by name, made by the DuckDB staging view (sql/staging/010_packets.sql) from
//! `tags::ALL` and `tags::CAUSES`, so users see the same columns at a lower cost per packet
//! (benchmarks/README.md, "the leaner packets table").

use std::sync::Arc;

use arrow_array::types::{Int64Type, UInt16Type, UInt32Type};
use arrow_array::{
    ArrayRef, BooleanArray, Int64Array, ListArray, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array,
    UInt64Array, UInt8Array,
};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use tailscope_parsers::decode::{Packet, TCP_ACK, TCP_SYN};

use super::columns::{names_column, pack_bools, OptColumn};
use super::ts_type;
use crate::flow::{Direction, Flow};
use crate::quic_keyed::Outcome;
use crate::tcp::Analysis;

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
        // seq, ack, window and window_scaled are stored 0/false for a packet that is not TCP, without
        // a null mask: the packets view nulls them where `flags` is null (TCP's own fields). A null
        // mask costs the writer its definition levels, ~15 ns per value (examples/column_cost.rs).
        Field::new("seq", DataType::UInt32, false),
        Field::new("ack", DataType::UInt32, false),
        Field::new("rel_seq", DataType::UInt32, true),
        Field::new("rel_ack", DataType::UInt32, true),
        Field::new("payload_len", DataType::UInt32, false),
        Field::new("flags", DataType::UInt16, true),
        Field::new("window", DataType::UInt32, false),
        Field::new("window_scaled", DataType::Boolean, false),
        Field::new("tsval", DataType::UInt32, true),
        Field::new("tsecr", DataType::UInt32, true),
        Field::new("sack", DataType::List(Arc::new(sack_item)), true),
        Field::new("ip_id", DataType::UInt32, true),
        Field::new("ttl", DataType::UInt8, false),
        Field::new("wire_len", DataType::UInt32, false),
        Field::new("encap", DataType::Utf8, true),
        Field::new("tags", DataType::UInt32, false),
        Field::new("retx_delay_ns", DataType::Int64, true),
        Field::new("rtt_ns", DataType::Int64, true),
    ]))
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

impl PacketRow {
    /// The row of packet `p` of flow `f`, sent in `direction`, before any analysis: its header
    /// fields, the sequence numbers relative to the flow's ISNs and the window scaled by the
    /// flow's window scale, as far as the flow knows them.
    #[inline]
    pub fn new(p: &Packet<'_>, f: &Flow, direction: Direction, file_index: u32) -> PacketRow {
        let mut row = PacketRow {
            file_index,
            frame: p.frame,
            ts_ns: p.ts_ns,
            flow_id: f.flow_id,
            c2s: direction == Direction::C2S,
            ip_proto: p.proto,
            payload_len: p.payload_len,
            ip_id: p.ip_id,
            ttl: p.ttl,
            wire_len: p.wire_len,
            encap: p.encap.name(),
            ..PacketRow::default()
        };
        if let Some(t) = p.tcp() {
            let own = &f.dir[direction.index()];
            let peer = &f.dir[direction.other().index()];
            row.is_tcp = true;
            row.seq = Some(t.seq);
            row.ack = Some(t.ack);
            row.rel_seq = own.isn.map(|isn| t.seq.wrapping_sub(isn));
            row.rel_ack = if t.has(TCP_ACK) { peer.isn.map(|isn| t.ack.wrapping_sub(isn)) } else { None };
            row.flags = Some(t.flags);
            // Window scaling applies to every segment after the SYNs, never to the SYNs.
            let shift = if t.has(TCP_SYN) { None } else { f.window_shift(direction) };
            row.window = Some(u32::from(t.window) << shift.unwrap_or(0));
            row.window_scaled = Some(shift.is_some());
            row.ts = t.ts;
            row.sack = t.sack;
            row.sack_count = t.sack_count;
        }
        row
    }

    /// The keyed QUIC analysis' RTT sample and resend delay for the datagram (its tags come
    /// with the QUIC observation's).
    #[inline]
    pub fn add_keyed(&mut self, o: &Outcome) {
        self.rtt_ns = o.rtt_ns;
        self.retx_delay_ns = o.retx_delay_ns;
    }

    /// What the TCP analysis of the segment found.
    #[inline]
    pub fn add_tcp(&mut self, an: &Analysis) {
        self.tags |= an.tags;
        self.rtt_ns = an.rtt_ns;
        self.retx_delay_ns = an.retx_delay_ns;
    }
}

/// Rows staged before they go into the columns: 4,096 rows of 192 bytes stay in the L2 cache
/// while each column takes its values from them in one tight pass.
const STAGED_ROWS: usize = 4096;

/// The packet batch being filled. Rows are staged in a small buffer, which is moved into the
/// batch's columns each time it fills; the columns then become the batch's Arrow buffers without
/// a copy. (A whole batch of rows, 12 MiB at 64k rows, was written to memory and read back once
/// per column, then built in chunks that were concatenated: memory traffic, not instructions, was
/// most of that cost.) A row is final when it comes: resends wait for their D-SACK before
/// (session/resends.rs). A row that will not be written (`--packets tagged|none`) is only
/// counted, so that batches end after the same packets whichever rows they keep.
pub struct PacketColumns {
    /// Rows the columns reserve room for when a batch starts.
    capacity: usize,
    /// Rows of this batch passed over (not written).
    passed: usize,
    staged: Vec<PacketRow>,
    file_index: Vec<u32>,
    frame: Vec<u64>,
    ts_ns: Vec<i64>,
    flow_id: Vec<i64>,
    c2s: Vec<bool>,
    ip_proto: Vec<u8>,
    seq: Vec<u32>,
    ack: Vec<u32>,
    rel_seq: OptColumn<UInt32Type>,
    rel_ack: OptColumn<UInt32Type>,
    payload_len: Vec<u32>,
    flags: OptColumn<UInt16Type>,
    window: Vec<u32>,
    window_scaled: Vec<bool>,
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
            passed: 0,
            staged: Vec::with_capacity(capacity.min(STAGED_ROWS)),
            file_index: Vec::new(),
            frame: Vec::new(),
            ts_ns: Vec::new(),
            flow_id: Vec::new(),
            c2s: Vec::new(),
            ip_proto: Vec::new(),
            seq: Vec::new(),
            ack: Vec::new(),
            rel_seq: OptColumn::new(),
            rel_ack: OptColumn::new(),
            payload_len: Vec::new(),
            flags: OptColumn::new(),
            window: Vec::new(),
            window_scaled: Vec::new(),
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

    /// Rows in the batch so far, the ones passed over included.
    pub fn len(&self) -> usize {
        self.frame.len() + self.staged.len() + self.passed
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A packet's row, staged if `keep`, else only counted.
    pub fn offer(&mut self, r: PacketRow, keep: bool) {
        if keep {
            self.push(r);
        } else {
            self.passed += 1;
        }
    }

    /// The rows kept so far as a batch, if any; the batch starts over.
    pub fn take(&mut self, capture_id: &str, files: &[String]) -> Option<RecordBatch> {
        self.passed = 0;
        (self.frame.len() + self.staged.len() > 0).then(|| self.finish(capture_id, files))
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
        self.seq.extend(rows.iter().map(|r| r.seq.unwrap_or_default()));
        self.ack.extend(rows.iter().map(|r| r.ack.unwrap_or_default()));
        self.rel_seq.extend(rows, |r| r.rel_seq);
        self.rel_ack.extend(rows, |r| r.rel_ack);
        self.payload_len.extend(rows.iter().map(|r| r.payload_len));
        self.flags.extend(rows, |r| r.flags);
        self.window.extend(rows.iter().map(|r| r.window.unwrap_or_default()));
        self.window_scaled.extend(rows.iter().map(|r| r.window_scaled.unwrap_or_default()));
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
        let window_scaled = BooleanArray::new(pack_bools(&std::mem::take(&mut self.window_scaled)), None);
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
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.seq)), None)),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.ack)), None)),
            Arc::new(self.rel_seq.finish()),
            Arc::new(self.rel_ack.finish()),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.payload_len)), None)),
            Arc::new(self.flags.finish()),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.window)), None)),
            Arc::new(window_scaled),
            Arc::new(self.tsval.finish()),
            Arc::new(self.tsecr.finish()),
            sack,
            Arc::new(self.ip_id.finish()),
            Arc::new(UInt8Array::new(ScalarBuffer::from(std::mem::take(&mut self.ttl)), None)),
            Arc::new(UInt32Array::new(ScalarBuffer::from(std::mem::take(&mut self.wire_len)), None)),
            Arc::new(names_column(n, &encaps, |i| Some(usize::from(encap[i])).filter(|&k| !encaps[k].is_empty()))),
            Arc::new(UInt32Array::new(ScalarBuffer::from(tags), None)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::columns::opt_str;
    use crate::tags;
    use arrow_array::builder::UInt32Builder;
    use arrow_array::builder::{ListBuilder, StructBuilder};
    use arrow_array::Array;
    use arrow_array::UInt16Array;

    /// The packet batch as Arrow's generic builders make it: what the hand-filled columns of
    /// `packets_batch` must equal.
    fn reference(rows: &[PacketRow], capture_id: &str, files: &[String]) -> Vec<ArrayRef> {
        vec![
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, rows.len()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| files[r.file_index as usize].as_str()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| if r.c2s { "c2s" } else { "s2c" }))),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.seq.unwrap_or_default()))),
            Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.rel_ack))),
            Arc::new(UInt16Array::from_iter(rows.iter().map(|r| r.flags))),
            Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.ts.map(|t| t.1)))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| opt_str(r.encap)))),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.tags))),
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
                "tags",
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

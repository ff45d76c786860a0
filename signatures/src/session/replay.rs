//! A Session cut in two halves for a distributed engine (jobs/run/spark_engine.py):
//!
//! 1. [`FrameSplitter`] reads one capture file and emits its decodable frames as Arrow rows, each
//!    with the *group* of flows it belongs to; every frame read is counted in [`FileStats`]
//!    exactly as [`Session::step`] counts it.
//! 2. [`Replayer`] takes those rows back, ordered by (group, file, frame), and runs them through
//!    the same flow table and signatures, one group at a time.
//!
//! A group must hold every packet that can ever join one flow: for TCP and other protocols that
//! is the 5-tuple; for UDP it is the server endpoint (the lower port), because a QUIC
//! connection keeps its connection IDs but may change its client address and port (migration,
//! NAT rebinding). Each group is ended with [`FlowTracker::finish_at`] at the capture's last
//! packet time, so a flow ends (idle timeout or end of capture) as it would in one pass.

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, Int64Builder, UInt32Builder, UInt64Builder};
use arrow_array::{Array, ArrayRef, BinaryArray, Int64Array, RecordBatch, UInt32Array, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use tailscope_parsers::capture::{CaptureError, CaptureReader, Frame};
use tailscope_parsers::decode::{decode_frame, Packet};
use xxhash_rust::xxh3::Xxh3;

use super::{Drained, FileStats, Session, SessionConfig};
use crate::flow::FlowKey;

/// Columns of a frames batch (between the two halves).
pub fn frame_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("group", DataType::UInt64, false),
        Field::new("file_index", DataType::UInt32, false),
        Field::new("frame", DataType::UInt64, false),
        Field::new("ts_ns", DataType::Int64, false),
        Field::new("linktype", DataType::UInt32, false),
        Field::new("wire_len", DataType::UInt32, false),
        Field::new("data", DataType::Binary, false),
    ]))
}

/// The group of flows a packet belongs to (see the module doc).
pub fn group_of(p: &Packet<'_>) -> u64 {
    let key = FlowKey::of(p);
    let mut h = Xxh3::new();
    h.update(&[key.proto]);
    let endpoints: &[(std::net::IpAddr, u16)] = if p.proto == 17 {
        let (a, b) = (key.lo, key.hi);
        if (a.1, a.0) <= (b.1, b.0) {
            &[a]
        } else {
            &[b]
        }
    } else {
        &[key.lo, key.hi]
    };
    for (addr, port) in endpoints {
        match addr {
            std::net::IpAddr::V4(a) => h.update(&a.octets()),
            std::net::IpAddr::V6(a) => h.update(&a.octets()),
        }
        h.update(&port.to_be_bytes());
    }
    h.digest()
}

/// Reads one capture file into frames batches.
pub struct FrameSplitter {
    reader: CaptureReader,
    file_index: u32,
    pub stats: FileStats,
    /// Latest timestamp of a frame that decoded: the clock the flow table would have reached.
    pub last_decoded_ts_ns: Option<i64>,
    /// The first frame's timestamp (what the local engine's probe orders files by).
    pub first_frame_ts_ns: Option<i64>,
    pub done: bool,
}

impl FrameSplitter {
    pub fn new(reader: CaptureReader, file_index: u32) -> FrameSplitter {
        let stats =
            FileStats { format: reader.format.name(), compression: reader.compression.name(), ..FileStats::default() };
        FrameSplitter { reader, file_index, stats, last_decoded_ts_ns: None, first_frame_ts_ns: None, done: false }
    }

    pub fn offset(&self) -> u64 {
        self.reader.offset()
    }

    /// Up to `max_rows` decodable frames; `None` once the file is done (errors are kept in the
    /// stats, as in a Session).
    pub fn next_batch(&mut self, max_rows: usize) -> Option<RecordBatch> {
        let mut group = UInt64Builder::with_capacity(max_rows);
        let mut frame_no = UInt64Builder::with_capacity(max_rows);
        let mut ts = Int64Builder::with_capacity(max_rows);
        let mut linktype = UInt32Builder::with_capacity(max_rows);
        let mut wire_len = UInt32Builder::with_capacity(max_rows);
        let mut data = BinaryBuilder::new();
        let mut n = 0;
        while n < max_rows && !self.done {
            let frame = match self.reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => {
                    self.close();
                    break;
                }
                Err(e) => {
                    self.stats.error = Some(e);
                    self.close();
                    break;
                }
            };
            self.stats.count_frame(frame.ts_ns);
            self.first_frame_ts_ns.get_or_insert(frame.ts_ns);
            match decode_frame(&frame) {
                Ok(p) => {
                    self.stats.decoded += 1;
                    self.last_decoded_ts_ns = Some(self.last_decoded_ts_ns.map_or(p.ts_ns, |t| t.max(p.ts_ns)));
                    group.append_value(group_of(&p));
                    frame_no.append_value(frame.number);
                    ts.append_value(frame.ts_ns);
                    linktype.append_value(frame.linktype);
                    wire_len.append_value(frame.wire_len);
                    data.append_value(frame.data);
                    n += 1;
                }
                Err(reason) => self.stats.skipped.add(reason),
            }
        }
        if n == 0 {
            return None;
        }
        let columns: Vec<ArrayRef> = vec![
            Arc::new(group.finish()),
            Arc::new(UInt32Array::from(vec![self.file_index; n])),
            Arc::new(frame_no.finish()),
            Arc::new(ts.finish()),
            Arc::new(linktype.finish()),
            Arc::new(wire_len.finish()),
            Arc::new(data.finish()),
        ];
        Some(RecordBatch::try_new(frame_schema(), columns).expect("frame batch matches its schema"))
    }

    fn close(&mut self) {
        self.done = true;
        self.stats.linktypes = self.reader.linktypes_seen.clone();
    }
}

pub fn open_splitter(path: &std::path::Path, file_index: u32) -> Result<FrameSplitter, CaptureError> {
    Ok(FrameSplitter::new(CaptureReader::open(path)?, file_index))
}

/// Replays frames batches of one capture through a Session.
pub struct Replayer {
    pub session: Session,
    horizon_ns: i64,
    group: Option<u64>,
    file: Option<u32>,
}

impl Replayer {
    /// `files` are the capture's file labels in the order the local engine opens them (the
    /// frames' `file_index` points into it); `horizon_ns` is the capture's last decoded packet time.
    pub fn new(config: SessionConfig, capture_id: &str, files: Vec<String>, horizon_ns: i64) -> Replayer {
        let mut session = Session::new(config, capture_id);
        session.files = files;
        Replayer { session, horizon_ns, group: None, file: None }
    }

    /// Feed a frames batch (rows ordered by group, then file, then frame; a group may continue
    /// from the previous batch). Returns the output that became ready.
    pub fn feed(&mut self, batch: &RecordBatch) -> Result<Vec<Drained>, String> {
        let col = |name: &str| batch.column_by_name(name).ok_or_else(|| format!("frames batch has no column {name:?}"));
        let group = downcast::<UInt64Array>(col("group")?, "group")?;
        let file = downcast::<UInt32Array>(col("file_index")?, "file_index")?;
        let frame_no = downcast::<UInt64Array>(col("frame")?, "frame")?;
        let ts = downcast::<Int64Array>(col("ts_ns")?, "ts_ns")?;
        let linktype = downcast::<UInt32Array>(col("linktype")?, "linktype")?;
        let wire_len = downcast::<UInt32Array>(col("wire_len")?, "wire_len")?;
        let data = downcast::<BinaryArray>(col("data")?, "data")?;
        let mut out = Vec::new();
        for i in 0..batch.num_rows() {
            let (g, f) = (group.value(i), file.value(i));
            if f as usize >= self.session.files.len() {
                return Err(format!(
                    "frame {} names file index {f}, the capture has {} files",
                    frame_no.value(i),
                    self.session.files.len()
                ));
            }
            if self.group != Some(g) {
                self.end_group();
                self.group = Some(g);
            } else if self.file != Some(f) {
                // The local engine writes out a file's packets before reading the next file: a
                // later D-SACK cannot relabel them. Same here, without cutting a batch per group.
                self.session.release_resends();
            }
            self.file = Some(f);
            let frame = Frame {
                number: frame_no.value(i),
                ts_ns: ts.value(i),
                linktype: linktype.value(i),
                wire_len: wire_len.value(i),
                data: data.value(i),
                offset: 0,
            };
            let p = decode_frame(&frame).map_err(|r| {
                format!("frame {} of {} no longer decodes ({})", frame.number, self.session.files[f as usize], r.name())
            })?;
            self.session.totals.decoded += 1;
            self.session.track(&p, f);
            if self.session.batch_full() {
                out.push(self.session.drain(false));
            }
        }
        Ok(out)
    }

    fn end_group(&mut self) {
        if self.group.take().is_some() {
            self.session.tracker.finish_at(self.horizon_ns);
        }
        self.file = None;
    }

    /// End the last group and return everything left.
    pub fn finish(&mut self) -> Drained {
        self.end_group();
        self.session.drain(true)
    }
}

fn downcast<'a, T: Array + 'static>(a: &'a ArrayRef, name: &str) -> Result<&'a T, String> {
    if a.null_count() > 0 {
        return Err(format!("frames column {name:?} has nulls"));
    }
    a.as_any().downcast_ref::<T>().ok_or_else(|| format!("frames column {name:?} has type {}", a.data_type()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A capture with two TCP connections and a QUIC-looking UDP flow, written as a pcap.
    fn pcap(frames: &[(i64, Vec<u8>)]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&65535u32.to_le_bytes());
        out.extend_from_slice(&101u32.to_le_bytes()); // raw IP
        for (ts, data) in frames {
            out.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
            out.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(&(data.len() as u32).to_le_bytes());
            out.extend_from_slice(data);
        }
        out
    }

    fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], l4: &[u8]) -> Vec<u8> {
        let total = 20 + l4.len();
        let mut v = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0, 0, 64, proto, 0, 0];
        v.extend_from_slice(&src);
        v.extend_from_slice(&dst);
        v.extend_from_slice(l4);
        v
    }

    fn tcp(sport: u16, dport: u16, seq: u32, flags: u8, payload: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&sport.to_be_bytes());
        v.extend_from_slice(&dport.to_be_bytes());
        v.extend_from_slice(&seq.to_be_bytes());
        v.extend_from_slice(&0u32.to_be_bytes());
        v.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
        v.extend(std::iter::repeat_n(0u8, payload));
        v
    }

    fn udp(sport: u16, dport: u16, payload: usize) -> Vec<u8> {
        let len = 8 + payload;
        let mut v = Vec::new();
        v.extend_from_slice(&sport.to_be_bytes());
        v.extend_from_slice(&dport.to_be_bytes());
        v.extend_from_slice(&(len as u16).to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend(std::iter::repeat_n(0u8, payload));
        v
    }

    const C: [u8; 4] = [10, 0, 0, 1];
    const S: [u8; 4] = [10, 0, 0, 2];

    fn sample() -> Vec<(i64, Vec<u8>)> {
        let s = 1_000_000_000i64;
        vec![
            (s, ipv4(6, C, S, &tcp(40000, 443, 100, 0x02, 0))),
            (s + 1, ipv4(6, C, S, &tcp(40001, 443, 500, 0x02, 0))),
            (s + 2, ipv4(17, C, S, &udp(50000, 443, 20))),
            (s + 3, ipv4(6, S, C, &tcp(443, 40000, 900, 0x12, 0))),
            (s + 4, ipv4(17, [10, 0, 0, 9], S, &udp(50001, 443, 20))),
            // 200 s later the first connection's port is reused with a new ISN.
            (201 * s, ipv4(6, C, S, &tcp(40000, 443, 7000, 0x02, 0))),
            (202 * s, ipv4(17, S, C, &udp(443, 50000, 20))),
            (203 * s, vec![0x60]), // not decodable: counted, not emitted
        ]
    }

    fn one_pass(frames: &[(i64, Vec<u8>)]) -> Vec<(String, RecordBatch)> {
        let mut s = Session::new(SessionConfig::default(), "cap");
        let mut cur = s.open_bytes(pcap(frames), "a.pcap").unwrap();
        while !cur.done {
            s.step(&mut cur, 1000);
        }
        s.finish();
        let mut out = Vec::new();
        for (t, b) in s.drain(true).into_tables() {
            out.extend(b.map(|b| (t.to_string(), b)));
        }
        out
    }

    fn sorted_rows(batches: &[(String, RecordBatch)], table: &str) -> Vec<String> {
        let mut rows = Vec::new();
        for (t, b) in batches.iter().filter(|(t, _)| t == table) {
            let _ = t;
            for i in 0..b.num_rows() {
                let cells: Vec<String> = b.columns().iter().map(|c| arrow_cast_display(c.as_ref(), i)).collect();
                rows.push(cells.join("|"));
            }
        }
        rows.sort();
        rows
    }

    fn arrow_cast_display(a: &dyn Array, i: usize) -> String {
        format!("{:?}", a.slice(i, 1))
    }

    #[test]
    fn split_then_replay_equals_one_pass() {
        let frames = sample();
        let reader = CaptureReader::from_reader(
            Box::new(std::io::Cursor::new(pcap(&frames))),
            tailscope_parsers::Compression::None,
        )
        .unwrap();
        let mut split = FrameSplitter::new(reader, 0);
        let mut batches = Vec::new();
        while let Some(b) = split.next_batch(3) {
            batches.push(b);
        }
        assert_eq!(split.stats.frames, 8);
        assert_eq!(split.stats.decoded, 7);
        assert_eq!(split.stats.skipped.total(), 1);
        let horizon = split.last_decoded_ts_ns.unwrap();
        assert_eq!(horizon, 202_000_000_000);

        // Order rows as the engine's shuffle does: by group, file, frame.
        let all = arrow_select::concat::concat_batches(&frame_schema(), &batches).unwrap();
        let groups = all.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        let frames_col = all.column(2).as_any().downcast_ref::<UInt64Array>().unwrap();
        let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
        order.sort_by_key(|&i| (groups.value(i as usize), frames_col.value(i as usize)));
        let idx = UInt32Array::from(order);
        let sorted = arrow_select::take::take_record_batch(&all, &idx).unwrap();
        // UDP from two client addresses to one server endpoint: one group.
        let distinct: std::collections::BTreeSet<u64> = groups.values().iter().copied().collect();
        assert_eq!(distinct.len(), 3, "two TCP 5-tuples and one UDP server endpoint");

        let mut r = Replayer::new(SessionConfig::default(), "cap", vec!["a.pcap".into()], horizon);
        let mut out = Vec::new();
        for chunk in [sorted.slice(0, 2), sorted.slice(2, sorted.num_rows() - 2)] {
            for d in r.feed(&chunk).unwrap() {
                out.extend(d.into_tables().into_iter().filter_map(|(t, b)| b.map(|b| (t.to_string(), b))));
            }
        }
        out.extend(r.finish().into_tables().into_iter().filter_map(|(t, b)| b.map(|b| (t.to_string(), b))));

        let reference = one_pass(&frames);
        for table in ["packets", "flows", "events", "queries"] {
            assert_eq!(sorted_rows(&out, table), sorted_rows(&reference, table), "table {table}");
        }
        // The reused port made two TCP flows, the 200 s UDP silence two UDP flows from 10.0.0.1.
        assert_eq!(sorted_rows(&out, "flows").len(), 6);
    }

    #[test]
    fn replay_rejects_a_bad_batch() {
        let mut r = Replayer::new(SessionConfig::default(), "cap", vec!["a.pcap".into()], 0);
        let bad = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("group", DataType::UInt64, false)])),
            vec![Arc::new(UInt64Array::from(vec![1u64]))],
        )
        .unwrap();
        let err = r.feed(&bad).err().expect("a batch without file_index is refused");
        assert!(err.contains("file_index"), "{err}");
    }
}

//! One capture's analysis: files of a rotation set are fed in time order through one flow table,
//! so a connection that spans files stays one flow. Output is drained as Arrow batches of a
//! bounded size; memory grows with concurrent flows, not with file size.

use std::path::Path;

use arrow_array::RecordBatch;
use tailscope_parsers::capture::{CaptureError, CaptureErrorKind, CaptureReader};
use tailscope_parsers::decode::{decode_frame_into, Packet};
use tailscope_parsers::select::FrameSelection;
use tailscope_parsers::skip::SkipReason;
use tailscope_parsers::{Compression, SkipCounts};

use crate::flow::{FlowConfig, FlowTracker};
use crate::queries::Query;
use crate::quic;
use crate::quic_keyed::{KeyedQuic, Keys, Outcome};
use crate::service::{self, Opening};
use crate::tables::{
    events, events_batch, flows_batch, queries_batch, queries_of_flows, query_flows_batch, EventRow, PacketColumns,
    PacketRow, QueryFlow,
};
use crate::tags;
use crate::tcp::PacketIn;

pub mod replay;
mod resends;
mod shards;

/// Ended flows are written in batches of this many (they hold their summaries until then).
const FLOWS_PER_BATCH: usize = 4096;
/// Finished queries of open flows are written in batches of at most this many: a query waiting
/// in the session costs more than a packet row (its charges, ~200 bytes), and a connection that
/// completes many small exchanges fills a batch fast.
const QUERIES_PER_BATCH: usize = 8192;

/// Which rows of the packets table a session writes (`--packets`): flows, queries and events are
/// complete whatever the choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PacketsKept {
    #[default]
    All,
    /// Packets carrying an analysis tag or an RTT sample: the rows the signatures and RTT
    /// questions read, a small part of a fleet's traffic.
    Tagged,
    None,
}

impl PacketsKept {
    pub fn parse(name: &str) -> Option<PacketsKept> {
        match name {
            "all" => Some(PacketsKept::All),
            "tagged" => Some(PacketsKept::Tagged),
            "none" => Some(PacketsKept::None),
            _ => None,
        }
    }

    /// Whether a packet's row is written. Decided when the row joins the batch: its tags are
    /// final by then (a resend waits for its D-SACK in `resends` first).
    fn wants(self, r: &PacketRow) -> bool {
        match self {
            PacketsKept::All => true,
            PacketsKept::None => false,
            PacketsKept::Tagged => r.tags != 0 || r.rtt_ns.is_some(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct SessionConfig {
    pub flow: FlowConfig,
    pub batch_rows: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { flow: FlowConfig::default(), batch_rows: crate::defaults::BATCH_ROWS }
    }
}

/// What happened to one input file.
#[derive(Debug, Clone, Default)]
pub struct FileStats {
    pub frames: u64,
    pub decoded: u64,
    pub skipped: SkipCounts,
    pub first_ts_ns: Option<i64>,
    pub last_ts_ns: Option<i64>,
    /// Frames whose timestamp is earlier than the frame just before them in the file (what a
    /// tshark user sees as a negative `frame.time_delta`): one frame stamped far ahead counts
    /// once, not once per frame after it.
    pub ts_backwards: u64,
    pub format: &'static str,
    pub compression: &'static str,
    pub linktypes: Vec<u32>,
    pub error: Option<CaptureError>,
    /// The previous frame's timestamp, for `ts_backwards`.
    prev_ts_ns: Option<i64>,
}

impl FileStats {
    /// Account for one frame read (before decoding it).
    pub(crate) fn count_frame(&mut self, ts_ns: i64) {
        self.frames += 1;
        if self.prev_ts_ns.is_some_and(|t| ts_ns < t) {
            self.ts_backwards += 1;
        }
        self.prev_ts_ns = Some(ts_ns);
        self.first_ts_ns = Some(self.first_ts_ns.map_or(ts_ns, |t| t.min(ts_ns)));
        self.last_ts_ns = Some(self.last_ts_ns.map_or(ts_ns, |t| t.max(ts_ns)));
    }
}

/// An open input file being fed into a session.
pub struct FileCursor {
    reader: CaptureReader,
    file_index: u32,
    pub stats: FileStats,
    pub done: bool,
}

impl FileCursor {
    pub fn offset(&self) -> u64 {
        self.reader.offset()
    }

    /// Bytes of the input as stored (compressed) read so far, for progress.
    pub fn input_offset(&self) -> u64 {
        self.reader.input_offset()
    }
}

/// Output ready to be written, by table.
#[derive(Default)]
pub struct Drained {
    pub packets: Option<RecordBatch>,
    pub flows: Option<RecordBatch>,
    pub events: Option<RecordBatch>,
    /// Not a table of the dataset: the flows still open whose queries are in `queries`, with
    /// what enrichment needs to give those queries their flow's columns (the flow's own row
    /// comes when it ends). Comes before `queries`.
    pub query_flows: Option<RecordBatch>,
    pub queries: Option<RecordBatch>,
}

impl Drained {
    pub fn into_tables(self) -> [(&'static str, Option<RecordBatch>); 5] {
        [
            ("packets", self.packets),
            ("flows", self.flows),
            ("events", self.events),
            ("query_flows", self.query_flows),
            ("queries", self.queries),
        ]
    }
}

pub struct Session {
    pub config: SessionConfig,
    pub capture_id: String,
    pub files: Vec<String>,
    tracker: FlowTracker,
    /// The packet batch being filled.
    packets: PacketColumns,
    /// A resend's events on their way to `resends` (reused: no allocation per resend).
    held_events: Vec<EventRow>,
    events: Vec<EventRow>,
    /// Finished queries of flows still open (a long-lived connection's exchanges), written as
    /// they complete rather than held by their flow; and those flows, once each.
    queries: Vec<(i64, Query)>,
    query_flows: Vec<QueryFlow>,
    /// Resends waiting for a D-SACK that would prove them spurious.
    resends: resends::Resends,
    /// Queries written before their flow's verdicts (queries::MAX_HELD_QUERIES).
    pub queries_written_unsettled: u64,
    pub totals: FileStats,
    /// A TLS key log (--keylog): QUIC flows it has secrets for are decrypted.
    keys: Option<Keys>,
    keyed_outcome: Option<Outcome>,
    /// The frames the user asked for (--since/--until/--filter); the rest are counted as skipped.
    selection: FrameSelection,
    packets_kept: PacketsKept,
    /// Threads to spread the flows over (`set_shards`); the shards once the first file opens.
    shard_count: usize,
    shards: Option<shards::Shards>,
    /// The latest decoded packet's time: where the shards' clocks end the capture.
    horizon_ns: Option<i64>,
    /// What finished shards counted, and their last output until it is taken.
    shard_counters: shards::ShardCounters,
    finished_output: Vec<Drained>,
}

/// The TCP segment holds the client's first byte (its ISN + 1; without the SYN, the first byte
/// seen): a ClientHello's SNI is read there, from the original or, when the original was lost
/// before the capture, from its resend - not from a later part of the stream the capture showed
/// first (the second segment of a two-segment ClientHello).
fn starts_stream(f: &crate::flow::Flow, p: &Packet<'_>) -> bool {
    starts_stream_of(f, p, 0)
}

/// Whether `p`, sent in direction `dir`, carries the first byte of that direction's stream (or
/// may: without the SYN the start is unknown, and the first payload seen stands for it).
fn starts_stream_of(f: &crate::flow::Flow, p: &Packet<'_>, dir: usize) -> bool {
    match (p.tcp(), f.dir[dir].isn) {
        (Some(t), Some(isn)) => t.seq == isn.wrapping_add(1),
        _ => true,
    }
}

impl Session {
    pub fn new(config: SessionConfig, capture_id: &str) -> Session {
        Session {
            tracker: FlowTracker::new(config.flow.clone(), capture_id),
            packets: PacketColumns::new(config.batch_rows),
            held_events: Vec::new(),
            events: Vec::new(),
            resends: resends::Resends::default(),
            queries_written_unsettled: 0,
            queries: Vec::new(),
            query_flows: Vec::new(),
            config,
            capture_id: capture_id.to_string(),
            files: Vec::new(),
            totals: FileStats::default(),
            keys: None,
            keyed_outcome: None,
            selection: FrameSelection::default(),
            packets_kept: PacketsKept::All,
            shard_count: 1,
            shards: None,
            horizon_ns: None,
            shard_counters: shards::ShardCounters::default(),
            finished_output: Vec::new(),
        }
    }

    /// Analyse this capture's flows on `n` threads (session/shards.rs); call before the first
    /// file. The rows are the same for any `n`.
    pub fn set_shards(&mut self, n: usize) {
        self.shard_count = n.max(1);
    }

    /// Which packet rows to write (the other tables are complete whatever it is).
    pub fn keep_packets(&mut self, kept: PacketsKept) {
        self.packets_kept = kept;
    }

    /// Take only these frames from the files fed from now on.
    pub fn select(&mut self, selection: FrameSelection) {
        self.selection = selection;
    }

    /// Add a key log file's secrets (before the captures are fed); returns what it held.
    pub fn add_keylog_file(&mut self, path: &Path) -> std::io::Result<tailscope_parsers::quic::KeyLogStats> {
        let keys = self.keys.get_or_insert_with(Keys::default);
        let log = std::sync::Arc::make_mut(&mut keys.log);
        let before = log.stats;
        log.add_file(path)?;
        let after = log.stats;
        Ok(tailscope_parsers::quic::KeyLogStats {
            lines: after.lines - before.lines,
            secrets: after.secrets - before.secrets,
            other_labels: after.other_labels - before.other_labels,
            malformed: after.malformed - before.malformed,
        })
    }

    /// QUIC connections by what the key log did for them; `None` without a key log.
    pub fn keylog_counts(&self) -> Option<[(&'static str, u64); 3]> {
        self.keys.as_ref().map(|k| k.counters.snapshot())
    }

    /// Open a file; `label` is how rows name it (usually the path as given).
    pub fn open(&mut self, path: &Path, label: &str) -> Result<FileCursor, CaptureError> {
        let reader = CaptureReader::open(path)?;
        Ok(self.attach(reader, label))
    }

    /// Read a capture from standard input.
    pub fn open_stdin(&mut self, label: &str) -> Result<FileCursor, CaptureError> {
        let reader = CaptureReader::open_stdin()?;
        Ok(self.attach(reader, label))
    }

    /// Open a capture held in memory or streamed from elsewhere (bytes as stored: not
    /// decompressed here). Used by the fuzz targets and tests; `open` is the same for a path.
    pub fn open_bytes(&mut self, data: Vec<u8>, label: &str) -> Result<FileCursor, CaptureError> {
        let reader = CaptureReader::from_reader(Box::new(std::io::Cursor::new(data)), Compression::None)?;
        Ok(self.attach(reader, label))
    }

    fn attach(&mut self, reader: CaptureReader, label: &str) -> FileCursor {
        self.files.push(label.to_string());
        if self.shard_count > 1 {
            let shards = self.shards.get_or_insert_with(|| {
                let (config, id, keys, kept) = (&self.config, &self.capture_id, &self.keys, self.packets_kept);
                shards::Shards::spawn(self.shard_count, || {
                    let mut s = Session::new(config.clone(), id);
                    s.keys = keys.clone();
                    s.packets_kept = kept;
                    s
                })
            });
            shards.open_file(label, (self.files.len() - 1) as u32);
        }
        let stats =
            FileStats { format: reader.format.name(), compression: reader.compression.name(), ..FileStats::default() };
        FileCursor { reader, file_index: (self.files.len() - 1) as u32, stats, done: false }
    }

    /// Is some output batch full, so that it must be drained before more packets come in?
    pub(crate) fn batch_full(&self) -> bool {
        self.packets.len() >= self.config.batch_rows
            || self.queries.len() >= self.query_batch_rows()
            || self.tracker.finished.len() >= FLOWS_PER_BATCH
    }

    /// Decode up to `max_frames` frames of `cur`. Stops early once a packet batch or a flows
    /// batch is full, so the caller can drain it (ended flows hold their analysis state until
    /// drained: under a SYN flood with a full flow table every packet ends a flow). Sets
    /// `cur.done` at end of file or on an error (kept in the stats).
    pub fn step(&mut self, cur: &mut FileCursor, max_frames: usize) {
        for _ in 0..max_frames {
            if self.shards.is_none() && self.batch_full() {
                return;
            }
            let frame = match cur.reader.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => {
                    self.close_file(cur);
                    return;
                }
                Err(e) => {
                    cur.stats.error = Some(e);
                    self.close_file(cur);
                    return;
                }
            };
            let st = &mut cur.stats;
            st.count_frame(frame.ts_ns);
            if !self.selection.is_empty() {
                match self.selection.reject(&frame) {
                    Ok(None) => {}
                    Ok(Some(reason)) => {
                        st.skipped.add(reason);
                        continue;
                    }
                    Err(e) => {
                        // counted (read = decoded + skipped), then the file stops with the error
                        st.skipped.add(SkipReason::Filtered);
                        st.error = Some(CaptureError { offset: frame.offset, kind: CaptureErrorKind::Filter(e) });
                        self.close_file(cur);
                        return;
                    }
                }
            }
            let mut p = Packet::empty();
            match decode_frame_into(&frame, &mut p) {
                Ok(()) => {
                    st.decoded += 1;
                    match self.shards.as_mut() {
                        Some(shards) => {
                            self.horizon_ns = Some(self.horizon_ns.map_or(p.ts_ns, |t| t.max(p.ts_ns)));
                            shards.route(&frame, &p);
                            if shards.output_waiting() {
                                return;
                            }
                        }
                        None => self.track(&p, cur.file_index),
                    }
                }
                Err(reason) => st.skipped.add(reason),
            }
        }
    }

    fn close_file(&mut self, cur: &mut FileCursor) {
        cur.done = true;
        cur.stats.linktypes = cur.reader.linktypes_seen.clone();
        let t = &mut self.totals;
        t.frames += cur.stats.frames;
        t.decoded += cur.stats.decoded;
        t.skipped.merge(&cur.stats.skipped);
    }

    /// Analyse one packet and add its row to the packet batch. (The row goes into the batch here
    /// rather than being returned: a 192-byte return value was copied once more on its way.)
    fn track(&mut self, p: &Packet<'_>, file_index: u32) {
        let a = self.tracker.assign(p, file_index);
        let analysis = p.tcp().and_then(|t| {
            let f = self.tracker.flow_mut(a.slot);
            let peer_window_shift = f.window_shift(a.direction.other());
            let dir = a.direction.index();
            f.tcp.as_mut().map(|state| {
                state.analyze(&PacketIn {
                    dir,
                    ts_ns: p.ts_ns,
                    tcp: t,
                    seglen: p.payload_len,
                    ip_id: p.ip_id,
                    peer_window_shift,
                    payload: p.payload,
                })
            })
        });
        let quic_tags = self.observe_application(p, &a);
        self.take_ready_queries(a.slot);
        let f = self.tracker.flow_mut(a.slot);
        if f.closed() {
            if let Some(state) = f.tcp.as_mut() {
                state.compact();
            }
        }
        let mut row = PacketRow::new(p, self.tracker.flow(a.slot), a.direction, file_index);
        row.tags |= quic_tags;
        let keyed = self.keyed_outcome.take();
        if let Some(o) = &keyed {
            row.add_keyed(o);
        }
        let (packets, kept) = (&mut self.packets, self.packets_kept);
        self.resends.release(
            self.tracker.now_ns(),
            |r| {
                let keep = kept.wants(&r);
                packets.offer(r, keep)
            },
            &mut self.events,
        );
        if let Some(an) = analysis {
            row.add_tcp(&an);
            for (data_dir, proved) in an.proved_spurious.iter().enumerate() {
                if let Some((seq, _, rows)) = *proved {
                    for _ in 0..rows {
                        self.resends.prove_spurious(row.flow_id, data_dir == 0, seq);
                    }
                }
            }
            for &(data_dir, seq) in &an.also_proved_spurious {
                self.resends.prove_spurious(row.flow_id, data_dir == 0, seq);
            }
        }
        let pn = keyed.as_ref().and_then(|o| o.pn).map(|n| n as u32);
        let keyed_events = keyed.as_ref().map_or(&[][..], |o| &o.events[..]);
        let seq = p.tcp().map(|t| t.seq).or(pn);
        if resends::Resends::is_resend(&row) {
            events::note(&row, seq, keyed_events, &mut self.held_events);
            self.resends.hold(row, self.held_events.drain(..));
        } else {
            events::note(&row, seq, keyed_events, &mut self.events);
            let keep = self.packets_kept.wants(&row);
            self.packets.offer(row, keep);
        }
    }

    /// Write out the resends still waiting for a D-SACK (a file ends: one in the next file
    /// relabels nothing).
    pub(crate) fn release_resends(&mut self) {
        let (packets, kept) = (&mut self.packets, self.packets_kept);
        self.resends.release(
            i64::MAX,
            |r| {
                let keep = kept.wants(&r);
                packets.offer(r, keep)
            },
            &mut self.events,
        );
    }

    fn query_batch_rows(&self) -> usize {
        self.config.batch_rows.min(QUERIES_PER_BATCH)
    }

    fn take_ready_queries(&mut self, slot: usize) {
        let f = self.tracker.flow_mut(slot);
        let ready = match (f.tcp.as_mut(), f.quic.as_mut()) {
            (Some(t), _) => {
                self.queries_written_unsettled += std::mem::take(&mut t.queries.written_unsettled);
                &mut t.queries.ready
            }
            (None, Some(q)) => &mut q.inferred.ready,
            (None, None) => return,
        };
        if ready.is_empty() {
            return;
        }
        let id = f.flow_id;
        // A flow's queries complete one at a time, so its entry, if any, is usually the last.
        if !self.query_flows.iter().rev().any(|q| q.flow_id == id) {
            self.query_flows.push(QueryFlow { flow_id: id, client: f.client, start_ns: f.start_ns });
        }
        self.queries.extend(ready.drain(..).map(|q| (id, q)));
    }

    /// What the payload says above the transport: QUIC headers and Initials, or a TLS
    /// ClientHello at the start of a TCP stream. Returns packet tags.
    fn observe_application(&mut self, p: &Packet<'_>, a: &crate::flow::Assigned) -> u32 {
        let dir = a.direction.index();
        let mut mask = if a.migrated { tags::QUIC_MIGRATION } else { 0 };
        let f = self.tracker.flow_mut(a.slot);
        if p.proto == 17 {
            if f.quic.is_none() && f.dir[0].packets + f.dir[1].packets <= 2 && quic::looks_like_quic(p.payload) {
                let mut q: Box<quic::QuicState> = Box::default();
                q.keyed = self.keys.as_ref().map(|k| Box::new(KeyedQuic::new(k.clone())));
                f.quic = Some(q);
            }
            let Some(q) = f.quic.as_mut() else { return mask };
            let known = (q.scid[0].len(), q.scid[1].len());
            mask |= q.observe(dir, p.ts_ns, p.payload, p.payload_len);
            self.keyed_outcome = q.take_outcome();
            if q.hello && !f.tls_checked {
                f.tls_checked = true;
                f.sni = q.sni.clone();
                f.alpn = q.alpn.clone();
            }
            // Copied (to free the flow for the tracker) only when one is new: two copies per
            // datagram were two allocations per QUIC packet.
            let cids = ((q.scid[0].len(), q.scid[1].len()) != known).then(|| [q.scid[0].clone(), q.scid[1].clone()]);
            for c in cids.iter().flatten() {
                self.tracker.register_cid(a.slot, c);
            }
            if a.migrated {
                if let Some(q) = self.tracker.flow_mut(a.slot).quic.as_mut() {
                    q.migrations += 1;
                }
            }
        } else if !p.payload.is_empty() {
            // Only where the connection's start was seen (a SYN or SYN-ACK), as Zeek, which
            // attaches no protocol analyzer to a connection picked up mid-stream.
            let start_seen = f.dir[0].syn + f.dir[1].syn > 0;
            if f.openings[dir] == Opening::Unseen && start_seen && starts_stream_of(f, p, dir) {
                f.openings[dir] = service::opening(p.payload);
            }
            if dir == 0 && !f.tls_checked && starts_stream(f, p) {
                f.tls_checked = true;
                if let Some((sni, alpn)) = quic::tls_client_hello(p.payload) {
                    f.sni = sni;
                    f.alpn = alpn;
                }
            }
        }
        mask
    }

    /// Ready output: the packet batch if full (or `force`), and the flows that have ended.
    pub fn drain(&mut self, force: bool) -> Drained {
        if force {
            self.release_resends();
        }
        let packets = if !self.packets.is_empty() && (force || self.packets.len() >= self.config.batch_rows) {
            self.packets.take(&self.capture_id, &self.files)
        } else {
            None
        };
        let flows_due = !self.tracker.finished.is_empty() && (force || self.tracker.finished.len() >= FLOWS_PER_BATCH);
        // Queries of open flows go with the next queries batch, or alone once they fill one.
        let live_due =
            !self.queries.is_empty() && (force || flows_due || self.queries.len() >= self.query_batch_rows());
        // Written from `self.queries` and cleared after: the Vec keeps its capacity (up to a
        // batch of queries, ~0.5 KiB each) instead of regrowing from empty by doubling for
        // every batch, which fragmented the heap of a long-lived chatty connection's run.
        let live: &[(i64, Query)] = if live_due { &self.queries } else { &[] };
        let query_flows = if live_due {
            let b = query_flows_batch(&self.query_flows, &self.capture_id);
            self.query_flows.clear();
            Some(b)
        } else {
            None
        };
        let live_rows = live.iter().map(|(id, q)| (*id, q));
        let (flows, queries) = if flows_due {
            let b =
                flows_batch(&self.tracker.finished, &self.capture_id, &self.files, self.config.flow.community_id_seed);
            let q = queries_batch(live_rows.chain(queries_of_flows(&self.tracker.finished)), &self.capture_id);
            self.tracker.finished.clear();
            (Some(b), q)
        } else {
            (None, queries_batch(live_rows, &self.capture_id))
        };
        if live_due {
            self.queries.clear();
        }
        let events = if !self.events.is_empty() && (force || self.events.len() >= self.config.batch_rows) {
            let b = events_batch(&self.events, &self.capture_id, &self.files);
            self.events.clear();
            Some(b)
        } else {
            None
        };
        Drained { packets, flows, events, query_flows, queries }
    }

    /// Ready output, as `drain`, from the shards too: with shards, one `Drained` per shard
    /// batch that became ready (all they hold with `force`).
    pub fn take_output(&mut self, force: bool) -> Vec<Drained> {
        let mut out = std::mem::take(&mut self.finished_output);
        match self.shards.as_mut() {
            Some(shards) => out.extend(shards.collect(force)),
            None => out.push(self.drain(force)),
        }
        out
    }

    /// End every flow; call once after the last file.
    pub fn finish(&mut self) {
        match self.shards.take() {
            Some(shards) => {
                let (out, counters) = shards.finish(self.horizon_ns);
                self.finished_output.extend(out);
                self.queries_written_unsettled += counters.queries_written_unsettled;
                self.shard_counters = counters;
            }
            None => self.tracker.finish(),
        }
    }

    pub fn flows_started(&self) -> u64 {
        self.tracker.flows_started + self.shard_counters.flows_started
    }

    pub fn flows_evicted(&self) -> u64 {
        self.tracker.evicted + self.shard_counters.flows_evicted
    }

    pub fn active_flows(&self) -> usize {
        self.tracker.active()
    }
}

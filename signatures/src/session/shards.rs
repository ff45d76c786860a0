//! One capture's analysis on several threads. The caller's thread reads, selects, decodes and
//! counts every frame, as a one-pass [`Session`] does, and hands each decoded frame to the shard
//! that owns its group of flows ([`replay::group_of`]: the TCP 5-tuple; UDP by server endpoint,
//! so a QUIC connection that migrates stays whole). A shard is a `Session` of its own on its own
//! thread — flow table, TCP and QUIC analysis, column builders — so every flow meets the same
//! code with the same packets in the same order as in one pass, and its rows are the same; only
//! their order and batching differ. `--max-flows` bounds the capture, not each shard (the flow
//! count is shared), and at the end every shard sees the capture's last packet time, so a flow
//! idle past its timeout by then ends as timed out, as in one pass. Nothing a row says depends on
//! which rows share its output batch (a D-SACK's reach is capture time: session/resends.rs).
//! What can differ: which flow an overfull table evicts (each shard its own least recently
//! active), and a flow's end under timestamps that go backwards by more than its idle timeout.
//!
//! Frames cross to a shard copied into chunks (one buffer per chunk, not per frame); the shard
//! decodes them again, which costs less than sending the decoded form (it borrows the buffer).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tailscope_parsers::capture::Frame;
use tailscope_parsers::decode::{decode_frame_into, Packet};

use super::{replay, Drained, Session};

/// Frames per chunk: enough that a channel operation per chunk costs nothing per packet.
const CHUNK_FRAMES: usize = 512;
/// Chunks queued per shard before the reader waits: bounds memory, keeps shards busy.
const QUEUE_CHUNKS: usize = 8;

struct FrameMeta {
    number: u64,
    ts_ns: i64,
    linktype: u32,
    wire_len: u32,
    /// End of the frame's bytes in the chunk's buffer (it starts where the previous one ends).
    end: usize,
}

#[derive(Default)]
struct Chunk {
    file_index: u32,
    data: Vec<u8>,
    frames: Vec<FrameMeta>,
}

enum ToShard {
    /// A file opened: its label, as rows name it.
    File(String),
    Frames(Chunk),
    /// Write out everything held (the end of a file).
    Flush,
    /// End every flow as the end of a capture whose last packet came at this time would.
    Finish(Option<i64>),
}

/// What a shard's flow table counted, summed over the shards when they finish.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ShardCounters {
    pub flows_started: u64,
    pub flows_evicted: u64,
    pub queries_written_unsettled: u64,
}

enum FromShard {
    Output(Drained),
    /// A panic in the shard (a bug of ours), with its message.
    Failed(String),
    Flushed,
    Finished(ShardCounters),
}

struct Worker {
    tx: SyncSender<ToShard>,
    handle: Option<JoinHandle<()>>,
}

pub(crate) struct Shards {
    workers: Vec<Worker>,
    /// Behind a lock only so a session stays `Sync` (the Python binding's classes must be);
    /// one thread reads it.
    out: Mutex<Receiver<FromShard>>,
    /// The chunk being filled for each shard.
    filling: Vec<Chunk>,
    file_index: u32,
    failure: Option<String>,
    /// Output batches the shards sent and the reader has not taken: the reader pauses for the
    /// caller to take them, so they never pile up (as a one-pass session pauses on a full batch).
    unread: Arc<AtomicUsize>,
}

impl Shards {
    /// Start `n` shards, each a session made by `make` (same configuration, key log, packets kept).
    pub(crate) fn spawn(n: usize, make: impl Fn() -> Session) -> Shards {
        let held = Arc::new(AtomicUsize::new(0));
        let unread = Arc::new(AtomicUsize::new(0));
        let (out_tx, out) = channel();
        let workers = (0..n)
            .map(|i| {
                let mut session = make();
                session.tracker.share_flow_count(held.clone());
                let (tx, rx) = sync_channel(QUEUE_CHUNKS);
                let out = Outbox { tx: out_tx.clone(), unread: unread.clone() };
                let handle = std::thread::Builder::new()
                    .name(format!("tailscope-shard{i}"))
                    .spawn(move || serve(session, rx, out))
                    .expect("starting a shard thread");
                Worker { tx, handle: Some(handle) }
            })
            .collect();
        Shards {
            workers,
            out: Mutex::new(out),
            filling: (0..n).map(|_| Chunk::default()).collect(),
            file_index: 0,
            failure: None,
            unread,
        }
    }

    /// Has a shard output waiting? (The reader then returns, so the caller takes it.)
    pub(crate) fn output_waiting(&self) -> bool {
        self.unread.load(Ordering::Relaxed) > 0
    }

    pub(crate) fn open_file(&mut self, label: &str, file_index: u32) {
        self.send_filling();
        self.file_index = file_index;
        for i in 0..self.workers.len() {
            self.send(i, ToShard::File(label.to_string()));
        }
    }

    /// Hand a decoded frame to the shard of its flows.
    pub(crate) fn route(&mut self, frame: &Frame<'_>, p: &Packet<'_>) {
        let i = (replay::group_of(p) % self.workers.len() as u64) as usize;
        let c = &mut self.filling[i];
        c.data.extend_from_slice(frame.data);
        c.frames.push(FrameMeta {
            number: frame.number,
            ts_ns: frame.ts_ns,
            linktype: frame.linktype,
            wire_len: frame.wire_len,
            end: c.data.len(),
        });
        if c.frames.len() >= CHUNK_FRAMES {
            let full = std::mem::take(c);
            self.send_chunk(i, full);
        }
    }

    fn send_chunk(&mut self, i: usize, mut chunk: Chunk) {
        chunk.file_index = self.file_index;
        self.send(i, ToShard::Frames(chunk));
    }

    /// Send every partly filled chunk (before a flush, or when the reader pauses).
    pub(crate) fn send_filling(&mut self) {
        for i in 0..self.filling.len() {
            if !self.filling[i].frames.is_empty() {
                let c = std::mem::take(&mut self.filling[i]);
                self.send_chunk(i, c);
            }
        }
    }

    fn send(&mut self, i: usize, msg: ToShard) {
        if self.workers[i].tx.send(msg).is_err() && self.failure.is_none() {
            // a shard never leaves its loop while its sender lives; say so rather than hang
            self.failure = Some(format!("shard {i} stopped"));
        }
    }

    /// The output the shards have ready; with `force`, everything they hold (waits for them).
    pub(crate) fn collect(&mut self, force: bool) -> Vec<Drained> {
        let mut ready = Vec::new();
        if force {
            self.send_filling();
            for i in 0..self.workers.len() {
                self.send(i, ToShard::Flush);
            }
            self.wait(&mut ready, |m| matches!(m, FromShard::Flushed));
        } else {
            while let Some(m) = self.next(false) {
                self.take(m, &mut ready);
            }
        }
        self.raise_failure();
        ready
    }

    /// End every shard's flows at `horizon_ns` and stop the shards: their last output and
    /// their counters, summed.
    pub(crate) fn finish(mut self, horizon_ns: Option<i64>) -> (Vec<Drained>, ShardCounters) {
        self.send_filling();
        for i in 0..self.workers.len() {
            self.send(i, ToShard::Finish(horizon_ns));
        }
        let mut ready = Vec::new();
        let mut total = ShardCounters::default();
        let mut finished = 0;
        while finished < self.live() {
            match self.next(true) {
                Some(FromShard::Finished(c)) => {
                    finished += 1;
                    total.flows_started += c.flows_started;
                    total.flows_evicted += c.flows_evicted;
                    total.queries_written_unsettled += c.queries_written_unsettled;
                }
                Some(m) => self.take(m, &mut ready),
                None => break,
            }
        }
        self.stop();
        self.raise_failure();
        (ready, total)
    }

    fn next(&mut self, wait: bool) -> Option<FromShard> {
        let rx = self.out.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        if wait {
            rx.recv().ok()
        } else {
            rx.try_recv().ok()
        }
    }

    fn live(&self) -> usize {
        self.workers.iter().filter(|w| w.handle.as_ref().is_some_and(|h| !h.is_finished())).count()
    }

    /// Receive until every live shard sent the marker `is_marker` matches.
    fn wait(&mut self, ready: &mut Vec<Drained>, is_marker: impl Fn(&FromShard) -> bool) {
        let mut seen = 0;
        while seen < self.live() {
            match self.next(true) {
                Some(m) if is_marker(&m) => seen += 1,
                Some(m) => self.take(m, ready),
                None => break,
            }
        }
    }

    fn take(&mut self, m: FromShard, ready: &mut Vec<Drained>) {
        match m {
            FromShard::Output(d) => {
                self.unread.fetch_sub(1, Ordering::Relaxed);
                ready.push(d);
            }
            FromShard::Failed(msg) => {
                self.failure.get_or_insert(msg);
            }
            FromShard::Flushed | FromShard::Finished(_) => {}
        }
    }

    /// A shard's panic surfaces in the caller, where the binding reports it as an internal
    /// error of the file or capture being read.
    fn raise_failure(&mut self) {
        if let Some(msg) = self.failure.take() {
            panic!("{msg}");
        }
    }

    fn stop(&mut self) {
        for w in &mut self.workers {
            // dropping the sender ends the shard's loop
            let (dead, _) = sync_channel(0);
            drop(std::mem::replace(&mut w.tx, dead));
            if let Some(h) = w.handle.take() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A shard's side of the output channel.
struct Outbox {
    tx: Sender<FromShard>,
    unread: Arc<AtomicUsize>,
}

impl Outbox {
    fn send(&self, m: FromShard) {
        if matches!(m, FromShard::Output(_)) {
            self.unread.fetch_add(1, Ordering::Relaxed);
        }
        // the reader is gone only when the session was dropped: nothing is waiting then
        let _ = self.tx.send(m);
    }
}

/// A shard's loop. Each message's work is guarded: a panic is reported and the shard goes on,
/// so flushes and the finish are always answered (the reader waits for them).
fn serve(mut s: Session, rx: Receiver<ToShard>, out: Outbox) {
    let guarded = |out: &Outbox, f: &mut dyn FnMut() -> Vec<Drained>| match catch_unwind(AssertUnwindSafe(f)) {
        Ok(drained) => {
            for d in drained {
                out.send(FromShard::Output(d));
            }
        }
        Err(p) => out.send(FromShard::Failed(crate::panic_message(p.as_ref()))),
    };
    for msg in rx {
        match msg {
            ToShard::File(label) => s.files.push(label),
            ToShard::Frames(chunk) => guarded(&out, &mut || analyse(&mut s, &chunk)),
            ToShard::Flush => {
                guarded(&out, &mut || vec![s.drain(true)]);
                out.send(FromShard::Flushed);
            }
            ToShard::Finish(horizon) => {
                guarded(&out, &mut || {
                    match horizon {
                        Some(h) => s.tracker.finish_at(h),
                        None => s.tracker.finish(),
                    }
                    vec![s.drain(true)]
                });
                let counters = ShardCounters {
                    flows_started: s.tracker.flows_started,
                    flows_evicted: s.tracker.evicted,
                    queries_written_unsettled: s.queries_written_unsettled,
                };
                out.send(FromShard::Finished(counters));
            }
        }
    }
}

fn analyse(s: &mut Session, chunk: &Chunk) -> Vec<Drained> {
    let mut ready = Vec::new();
    let mut p = Packet::empty();
    let mut start = 0;
    for m in &chunk.frames {
        let frame = Frame {
            number: m.number,
            ts_ns: m.ts_ns,
            linktype: m.linktype,
            wire_len: m.wire_len,
            data: &chunk.data[start..m.end],
            offset: 0,
        };
        start = m.end;
        if let Err(reason) = decode_frame_into(&frame, &mut p) {
            panic!("frame {} decoded in the reader but not in its shard ({})", m.number, reason.name());
        }
        s.track(&p, chunk.file_index);
        if s.batch_full() {
            ready.push(s.drain(false));
        }
    }
    ready
}

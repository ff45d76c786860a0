//! A [`PartWriter`] on its own thread: the analysis hands batches over and goes on.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;

use arrow_array::RecordBatch;

use super::{PartWriter, StagedPart, StoreError};

/// Batches in flight before a producer waits: enough to keep the writer busy while the next
/// batch is analysed, few enough to bound memory (a packets batch is ~10 MiB of Arrow).
const QUEUE: usize = 4;

/// A closed writer's part files, and the rows it wrote by table.
pub type Closed = (Vec<StagedPart>, BTreeMap<String, u64>);
type Outcome = Result<Closed, StoreError>;

/// Where batches go: cheap to clone, one per producer.
#[derive(Clone)]
pub struct Sink(SyncSender<(String, RecordBatch)>);

impl Sink {
    /// False when the writer has stopped (its error comes from [`WriterThread::close`]).
    pub fn send(&self, table: &str, batch: RecordBatch) -> bool {
        batch.num_rows() == 0 || self.0.send((table.to_string(), batch)).is_ok()
    }
}

pub struct WriterThread {
    sink: Option<Sink>,
    handle: Option<JoinHandle<Outcome>>,
}

fn run(mut writer: PartWriter, rx: Receiver<(String, RecordBatch)>) -> Outcome {
    for (table, batch) in rx {
        // the first error stops the writer: the receiver is dropped, senders see it
        writer.write(&table, &batch)?;
    }
    let rows = writer.rows().clone();
    Ok((writer.close()?, rows))
}

impl WriterThread {
    pub fn spawn(writer: PartWriter) -> Result<WriterThread, StoreError> {
        let (tx, rx) = sync_channel(QUEUE);
        let handle = std::thread::Builder::new()
            .name("tailscope-writer".into())
            .spawn(move || run(writer, rx))
            .map_err(|e| StoreError(format!("starting a writer thread: {e}")))?;
        Ok(WriterThread { sink: Some(Sink(tx)), handle: Some(handle) })
    }

    pub fn sink(&self) -> Option<Sink> {
        self.sink.clone()
    }

    /// Wait for every batch sent (by any clone of the sink, which must all be dropped by now) to
    /// be written, close the files and return them with the rows written by table.
    pub fn close(&mut self) -> Outcome {
        self.sink = None;
        match self.handle.take() {
            None => Err(StoreError("the part writer was closed already".into())),
            Some(h) => h.join().unwrap_or_else(|panic| {
                Err(StoreError(format!("the part writer failed: {}", crate::panic_message(panic.as_ref()))))
            }),
        }
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        self.sink = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

//! `PartWriter`: the dataset's Parquet part files, written by the native core on a writer
//! thread (signatures/src/store/). Python hands it the batches it enriches; a `Session` hands it
//! the others itself, without crossing into Python.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use arrow::pyarrow::FromPyArrow;
use arrow::record_batch::RecordBatch;
use pyo3::exceptions::{PyOSError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use tailscope_signatures::files_table::{files_batch, FileRow};
use tailscope_signatures::store::{compact, Closed, PartWriter, Sink, WriterThread, TABLES_BY_DATE};

/// What `close` returns to Python: ([(table, date, path)], {table: rows}).
type ClosedPy = (Vec<(String, Option<String>, String)>, BTreeMap<String, u64>);

#[pyclass(name = "PartWriter", module = "tailscope._native")]
pub(crate) struct PyPartWriter {
    thread: Mutex<Option<WriterThread>>,
    closed: Mutex<Option<Result<Closed, String>>>,
}

impl PyPartWriter {
    fn sink(&self) -> Option<Sink> {
        self.thread.lock().ok()?.as_ref()?.sink()
    }

    fn close_thread(&self) -> Result<Closed, String> {
        let mut closed = self.closed.lock().map_err(|_| "the part writer is poisoned".to_string())?;
        if closed.is_none() {
            let thread = self.thread.lock().map_err(|_| "the part writer is poisoned".to_string())?.take();
            *closed = Some(match thread {
                Some(mut t) => t.close().map_err(|e| e.0),
                None => Err("the part writer was never started".into()),
            });
        }
        closed.clone().unwrap()
    }

    /// Hand `batch` of `table` to the writer thread (GIL released while the queue is full).
    /// Raises OSError naming the file if the writer has stopped on an error.
    pub(crate) fn send(&self, py: Python<'_>, table: &str, batch: RecordBatch) -> PyResult<()> {
        let Some(sink) = self.sink() else { return Err(self.failure()) };
        if py.detach(|| sink.send(table, batch)) {
            Ok(())
        } else {
            Err(self.failure())
        }
    }

    /// The error that stopped the writer (called when a batch could not be handed over).
    fn failure(&self) -> PyErr {
        match self.close_thread() {
            Err(e) => PyOSError::new_err(e),
            Ok(_) => PyRuntimeError::new_err("the part writer was closed while batches were still coming"),
        }
    }
}

#[pymethods]
impl PyPartWriter {
    /// Stage part files under `stage` as `<table>/date=YYYY-MM-DD/part-<run_id>-<tag><n>.parquet`.
    #[new]
    #[pyo3(signature = (stage, run_id, tag="", max_rows_per_file=None))]
    fn new(stage: PathBuf, run_id: &str, tag: &str, max_rows_per_file: Option<usize>) -> PyResult<Self> {
        let thread = WriterThread::spawn(PartWriter::new(stage, run_id, tag, max_rows_per_file))
            .map_err(|e| PyOSError::new_err(e.0))?;
        Ok(PyPartWriter { thread: Mutex::new(Some(thread)), closed: Mutex::new(None) })
    }

    /// Hand a record batch (any Arrow PyCapsule or pyarrow batch) of `table` to the writer.
    /// Raises OSError naming the file if the writer has stopped on an error.
    fn write(&self, py: Python<'_>, table: &str, batch: &Bound<'_, PyAny>) -> PyResult<()> {
        self.send(py, table, RecordBatch::from_pyarrow_bound(batch)?)
    }

    /// Write the `files` table from its rows (dicts with the columns of `files_batch`).
    fn write_files(&self, py: Python<'_>, rows: Vec<PyFileRow>) -> PyResult<()> {
        self.send(py, "files", files_from(rows)?)
    }

    /// Wait for every batch to be written and close the files. Returns ([(table, date, path)],
    /// {table: rows}). Raises OSError naming the file when one could not be written.
    fn close(&self, py: Python<'_>) -> PyResult<ClosedPy> {
        let (parts, rows) = py.detach(|| self.close_thread()).map_err(PyOSError::new_err)?;
        let parts = parts.into_iter().map(|p| (p.table, p.date, p.path.display().to_string())).collect();
        Ok((parts, rows))
    }
}

/// The column each date-partitioned table is partitioned by (its UTC day).
#[pyfunction]
pub(crate) fn tables_by_date(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (table, column) in TABLES_BY_DATE {
        d.set_item(table, column)?;
    }
    Ok(d)
}

/// A `files` row as the engines give it: a dict with the table's columns (`first_ts`, `last_ts`
/// in ns since the epoch; `skipped_by_reason` as (reason, count) pairs).
#[derive(FromPyObject)]
#[pyo3(from_item_all)]
pub(crate) struct PyFileRow {
    run_id: String,
    path: String,
    capture_id: Option<String>,
    status: String,
    error: Option<String>,
    error_offset: Option<u64>,
    format: Option<String>,
    compression: Option<String>,
    size: Option<u64>,
    sha256: Option<String>,
    frames: Option<u64>,
    decoded: Option<u64>,
    skipped: Option<u64>,
    skipped_by_reason: Vec<(String, u64)>,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
}

fn files_from(rows: Vec<PyFileRow>) -> PyResult<RecordBatch> {
    let rows: Vec<FileRow> = rows
        .into_iter()
        .map(|r| FileRow {
            run_id: r.run_id,
            path: r.path,
            capture_id: r.capture_id,
            status: r.status,
            error: r.error,
            error_offset: r.error_offset,
            format: r.format,
            compression: r.compression,
            size: r.size,
            sha256: r.sha256,
            frames: r.frames,
            decoded: r.decoded,
            skipped: r.skipped,
            skipped_by_reason: r.skipped_by_reason,
            first_ts_ns: r.first_ts,
            last_ts_ns: r.last_ts,
        })
        .collect();
    files_batch(&rows).map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

/// The `files` table of these rows, as a record batch (the Spark driver, schema checks).
#[pyfunction(name = "files_batch")]
pub(crate) fn files_batch_py(py: Python<'_>, rows: Vec<PyFileRow>) -> PyResult<Py<PyAny>> {
    crate::batch_to_py(py, files_from(rows)?)
}

/// Rewrite part files of `table` (in order) as few large ones staged under `stage`
/// (jobs/dataset/compact.py). Returns [(table, date, path)]; raises OSError naming a file.
#[pyfunction]
#[pyo3(name = "compact_parts", signature = (stage, run_id, table, inputs, max_rows_per_file=None))]
pub(crate) fn compact_parts(
    py: Python<'_>,
    stage: PathBuf,
    run_id: &str,
    table: &str,
    inputs: Vec<PathBuf>,
    max_rows_per_file: Option<usize>,
) -> PyResult<Vec<(String, Option<String>, String)>> {
    let parts = py
        .detach(|| compact(&stage, run_id, table, &inputs, max_rows_per_file))
        .map_err(|e| PyOSError::new_err(e.0))?;
    Ok(parts.into_iter().map(|p| (p.table, p.date, p.path.display().to_string())).collect())
}

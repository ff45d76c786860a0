//! The two halves of a Session for the Spark engine (signatures/src/session/replay.rs):
//! `FrameSplitter` on the executors that read files, `Replayer` on the executors that hold whole
//! groups of flows after the shuffle.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use arrow::pyarrow::{FromPyArrow, ToPyArrow};
use arrow::record_batch::RecordBatch;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use tailscope_signatures::defaults;
use tailscope_signatures::session::replay::{frame_schema, open_splitter, FrameSplitter, Replayer};
use tailscope_signatures::session::Drained;

use crate::{
    add_keylog_to, capture_error, guarded, keylog_counts_of, output_list, session_config, InternalError, OpenFile,
};

#[pyclass(name = "FrameSplitter", module = "tailscope._native")]
pub(crate) struct PyFrameSplitter {
    file: OpenFile<FrameSplitter>,
}

#[pymethods]
impl PyFrameSplitter {
    /// Open a capture file whose frames will carry `file_index`. Raises CaptureFileError
    /// naming `label` (default: the path) when it is not a readable capture.
    #[new]
    #[pyo3(signature = (path, file_index, label=None))]
    fn new(path: PathBuf, file_index: u32, label: Option<String>) -> PyResult<Self> {
        let shown = label.unwrap_or_else(|| path.display().to_string());
        let opened =
            guarded(&shown, "opening it", || open_splitter(&path, file_index)).map_err(InternalError::new_err)?;
        let inner = opened.map_err(|e| capture_error(&shown, &e))?;
        Ok(PyFrameSplitter { file: OpenFile::new(inner, shown) })
    }

    /// The next frames batch (pyarrow.RecordBatch, GIL released while reading), or None at the
    /// end of the file or after an error (see stats()).
    #[pyo3(signature = (max_rows=65_536))]
    fn next_batch(&mut self, py: Python<'_>, max_rows: usize) -> PyResult<Option<Py<PyAny>>> {
        let mut guard = self.file.lock()?;
        let split = &mut *guard;
        if split.done {
            return Ok(None);
        }
        let outcome = py.detach(|| catch_unwind(AssertUnwindSafe(|| split.next_batch(max_rows.max(1)))));
        match outcome {
            Ok(Some(b)) => Ok(Some(b.to_pyarrow(py)?.into())),
            Ok(None) => Ok(None),
            Err(panic) => {
                split.done = true;
                drop(guard);
                self.file.failed(panic.as_ref());
                Ok(None)
            }
        }
    }

    #[getter]
    fn done(&self) -> bool {
        self.file.done()
    }

    #[getter]
    fn offset(&self) -> u64 {
        self.file.offset()
    }

    #[getter]
    fn path(&self) -> &str {
        &self.file.path
    }

    /// Per-file accounting as FileCursor.stats(), plus `last_decoded_ts_ns` and `first_frame_ts_ns`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.file.stats(py, |s, d| {
            d.set_item("last_decoded_ts_ns", s.last_decoded_ts_ns)?;
            d.set_item("first_frame_ts_ns", s.first_frame_ts_ns)
        })
    }
}

#[pyclass(name = "Replayer", module = "tailscope._native")]
pub(crate) struct PyReplayer {
    inner: Replayer,
}

fn drained_list(py: Python<'_>, chunks: Vec<Drained>) -> PyResult<Py<PyList>> {
    let out = PyList::empty(py);
    for d in chunks {
        for item in output_list(py, d.into_tables())?.bind(py).iter() {
            out.append(item)?;
        }
    }
    Ok(out.unbind())
}

#[pymethods]
impl PyReplayer {
    /// Replays one capture's frames: `files` are its file labels in the local engine's order,
    /// `horizon_ns` its last decoded packet time. Options as for Session.
    #[new]
    #[pyo3(signature = (capture_id, files, horizon_ns, *, tcp_idle_timeout_s=defaults::TCP_IDLE_TIMEOUT_S,
                        udp_idle_timeout_s=defaults::UDP_IDLE_TIMEOUT_S, tcp_closed_linger_s=defaults::TCP_CLOSED_LINGER_S,
                        max_flows=defaults::MAX_FLOWS, batch_rows=defaults::BATCH_ROWS,
                        community_id_seed=0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        capture_id: &str,
        files: Vec<String>,
        horizon_ns: i64,
        tcp_idle_timeout_s: f64,
        udp_idle_timeout_s: f64,
        tcp_closed_linger_s: f64,
        max_flows: usize,
        batch_rows: usize,
        community_id_seed: u16,
    ) -> PyResult<Self> {
        let config = session_config(
            tcp_idle_timeout_s,
            udp_idle_timeout_s,
            tcp_closed_linger_s,
            max_flows,
            batch_rows,
            community_id_seed,
        )?;
        Ok(PyReplayer { inner: Replayer::new(config, capture_id, files, horizon_ns) })
    }

    /// Feed a frames batch ordered by (group, file_index, frame); returns ready output as a
    /// list of (table_name, pyarrow.RecordBatch).
    /// Raises ValueError for a batch that is not a frames batch, InternalError on a bug of ours.
    fn feed(&mut self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<Py<PyList>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let what = self.inner.session.capture_id.clone();
        let replayer = &mut self.inner;
        let outcome = py.detach(|| guarded(&what, "replaying its frames", || replayer.feed(&batch)));
        match outcome.map_err(InternalError::new_err)? {
            Ok(chunks) => drained_list(py, chunks),
            Err(msg) => Err(PyValueError::new_err(format!("{what}: {msg}"))),
        }
    }

    /// End the last group of flows and return everything left.
    fn finish(&mut self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let what = self.inner.session.capture_id.clone();
        let replayer = &mut self.inner;
        let drained =
            py.detach(|| guarded(&what, "ending its flows", || replayer.finish())).map_err(InternalError::new_err)?;
        drained_list(py, vec![drained])
    }

    /// Secrets of an SSLKEYLOGFILE for the QUIC connections replayed (as Session.add_keylog).
    /// Which packet rows to write: all, tagged or none (`analyze --packets`).
    fn keep_packets(&mut self, kept: &str) -> PyResult<()> {
        self.inner.session.keep_packets(crate::packets_kept(kept)?);
        Ok(())
    }

    fn add_keylog<'py>(&mut self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        add_keylog_to(py, &mut self.inner.session, &path)
    }

    fn keylog_counts<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        keylog_counts_of(py, &self.inner.session)
    }

    /// Flows started and evicted so far.
    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("flows", self.inner.session.flows_started())?;
        d.set_item("flows_evicted", self.inner.session.flows_evicted())?;
        d.set_item("queries_written_unsettled", self.inner.session.queries_written_unsettled)?;
        Ok(d)
    }
}

/// The frames batch schema (pyarrow.Schema).
#[pyfunction]
#[pyo3(name = "frame_schema")]
pub(crate) fn frame_schema_py(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(frame_schema().as_ref().to_pyarrow(py)?.into())
}

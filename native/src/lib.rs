//! `tailscope._native`: the Rust core behind a small Python API. Batches cross as Arrow through
//! the C data interface (no copy); the decode loop runs with the GIL released.

use std::any::Any;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use arrow::pyarrow::ToPyArrow;
use arrow::record_batch::RecordBatch;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use tailscope_parsers::bpf::BpfFilter;
use tailscope_parsers::capture::{CaptureError, CaptureErrorKind, CaptureReader};
use tailscope_parsers::select::FrameSelection;
use tailscope_parsers::SkipReason;
use tailscope_signatures::defaults;
use tailscope_signatures::enrichment;
use tailscope_signatures::flow::FlowConfig;
use tailscope_signatures::session::replay::FrameSplitter;
use tailscope_signatures::session::{Drained, FileCursor, FileStats, PacketsKept, Session, SessionConfig};
use tailscope_signatures::tables;

mod finish;
mod pseudonym;
mod replay;
mod store;

pyo3::create_exception!(_native, CaptureFileError, PyValueError, "A capture file could not be read.");
pyo3::create_exception!(
    _native,
    InternalError,
    PyRuntimeError,
    "A bug in the native core (a Rust panic), caught at the binding; the message names the file or capture."
);

pub(crate) use tailscope_signatures::panic_message;

/// Run `f`, turning a panic into "`what`: internal error while `doing`: <message>". A panic that
/// crossed into Python would surface as pyo3's PanicException, which callers cannot tell apart
/// from an abort and do not expect.
pub(crate) fn guarded<T>(what: &str, doing: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|p| format!("{what}: internal error while {doing}: {}", panic_message(p.as_ref())))
}

/// Test hook: the next call of the named entry point (`step`, `flush`, `finish`, `open`,
/// `probe`) panics inside its guard, so tests can prove each one reports a bug of ours as an
/// error instead of crashing. Empty when disarmed; the check is one lock per call, not per packet.
static FORCED_PANIC: Mutex<String> = Mutex::new(String::new());

fn forced_panic(point: &str) {
    let armed = FORCED_PANIC.lock().map(|mut p| if *p == point { std::mem::take(&mut *p) } else { String::new() });
    if armed.is_ok_and(|p| !p.is_empty()) {
        panic!("forced panic in {point} (test hook)");
    }
}

#[pyfunction]
fn _force_panic(point: &str) {
    if let Ok(mut p) = FORCED_PANIC.lock() {
        *p = point.to_string();
    }
}

pub(crate) fn capture_error(path: &str, e: &CaptureError) -> PyErr {
    CaptureFileError::new_err(format!("{path}: {e}"))
}

fn error_kind(e: &CaptureError) -> &'static str {
    match e.kind {
        CaptureErrorKind::Io(_) => "io",
        CaptureErrorKind::EmptyFile => "empty",
        CaptureErrorKind::NotACapture => "not_a_capture",
        CaptureErrorKind::Truncated => "truncated",
        CaptureErrorKind::RecordTooLarge(_) => "record_too_large",
        CaptureErrorKind::Corrupt(_) => "corrupt",
        CaptureErrorKind::Filter(_) => "filter",
    }
}

const NS_PER_S: f64 = 1e9;

#[pyclass(name = "Session", module = "tailscope._native")]
struct PySession {
    inner: Session,
    /// Set by `write_unenriched`: flows and queries get the unknown enrichment columns here and
    /// go to the writer with the packets and events (a run without enrichment sources).
    unenriched: Option<(i32, Option<String>)>,
    /// Rows handed to a writer, by table.
    written: BTreeMap<&'static str, u64>,
}

#[pyclass(name = "FileCursor", module = "tailscope._native")]
struct PyFileCursor {
    file: OpenFile<FileCursor>,
}

/// One capture file being read for Python (by a FileCursor or a FrameSplitter): its reader, the
/// name errors show, and the internal error caught while decoding it, if any. Both classes answer
/// `done`, `offset`, `path` and `stats()` through it.
pub(crate) struct OpenFile<R> {
    // pyclasses must be Sync; a capture reader is only Send, so it sits behind a mutex that is
    // never contended (one Python thread drives one reader).
    reader: Mutex<R>,
    pub(crate) path: String,
    internal_error: Option<String>,
}

/// What OpenFile reads off a reader.
pub(crate) trait FileProgress {
    fn is_done(&self) -> bool;
    /// Bytes of the (decompressed) stream read so far.
    fn bytes_read(&self) -> u64;
    fn file_stats(&self) -> &FileStats;
}

/// FileCursor and FrameSplitter keep their progress in the same fields.
macro_rules! file_progress {
    ($($reader:ty),*) => {$(
        impl FileProgress for $reader {
            fn is_done(&self) -> bool {
                self.done
            }
            fn bytes_read(&self) -> u64 {
                self.offset()
            }
            fn file_stats(&self) -> &FileStats {
                &self.stats
            }
        }
    )*};
}
file_progress!(FileCursor, FrameSplitter);

impl<R: FileProgress> OpenFile<R> {
    pub(crate) fn new(reader: R, path: String) -> Self {
        OpenFile { reader: Mutex::new(reader), path, internal_error: None }
    }

    pub(crate) fn lock(&self) -> PyResult<MutexGuard<'_, R>> {
        self.reader.lock().map_err(|_| PyValueError::new_err(format!("{}: reader poisoned", self.path)))
    }

    pub(crate) fn done(&self) -> bool {
        self.reader.lock().map(|r| r.is_done()).unwrap_or(true)
    }

    pub(crate) fn offset(&self) -> u64 {
        self.reader.lock().map(|r| r.bytes_read()).unwrap_or(0)
    }

    /// A panic caught while decoding: the file is reported as failed with the message.
    pub(crate) fn failed(&mut self, panic: &(dyn Any + Send)) {
        self.internal_error = Some(format!("internal error while decoding: {}", panic_message(panic)));
    }

    /// Per-file accounting: frames read, decoded, skipped by reason, error with byte offset (an
    /// internal one included); `extra` adds what a reader knows besides.
    pub(crate) fn stats<'py>(
        &self,
        py: Python<'py>,
        extra: impl FnOnce(&R, &Bound<'py, PyDict>) -> PyResult<()>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let reader = self.lock()?;
        let d = stats_dict(py, reader.file_stats())?;
        extra(&reader, &d)?;
        if let Some(msg) = &self.internal_error {
            d.set_item("error", msg)?;
            d.set_item("error_kind", "internal")?;
        }
        Ok(d)
    }
}

pub(crate) fn batch_to_py(py: Python<'_>, b: RecordBatch) -> PyResult<Py<PyAny>> {
    Ok(b.to_pyarrow(py)?.into())
}

pub(crate) fn stats_dict<'py>(py: Python<'py>, s: &FileStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("frames", s.frames)?;
    d.set_item("decoded", s.decoded)?;
    let skipped = PyDict::new(py);
    for r in SkipReason::ALL {
        skipped.set_item(r.name(), s.skipped.get(r))?;
    }
    d.set_item("skipped", skipped)?;
    d.set_item("first_ts_ns", s.first_ts_ns)?;
    d.set_item("last_ts_ns", s.last_ts_ns)?;
    d.set_item("ts_backwards", s.ts_backwards)?;
    d.set_item("format", s.format)?;
    d.set_item("compression", s.compression)?;
    d.set_item("linktypes", s.linktypes.clone())?;
    match &s.error {
        Some(e) => {
            d.set_item("error", e.to_string())?;
            d.set_item("error_kind", error_kind(e))?;
            d.set_item("error_offset", e.offset)?;
        }
        None => {
            d.set_item("error", py.None())?;
            d.set_item("error_kind", py.None())?;
            d.set_item("error_offset", py.None())?;
        }
    }
    Ok(d)
}

pub(crate) fn packets_kept(name: &str) -> PyResult<PacketsKept> {
    PacketsKept::parse(name).ok_or_else(|| PyValueError::new_err(format!("packets {name:?}: one of all, tagged, none")))
}

pub(crate) fn session_config(
    tcp_idle_timeout_s: f64,
    udp_idle_timeout_s: f64,
    tcp_closed_linger_s: f64,
    max_flows: usize,
    batch_rows: usize,
    community_id_seed: u16,
) -> PyResult<SessionConfig> {
    if max_flows == 0 || batch_rows == 0 {
        return Err(PyValueError::new_err("max_flows and batch_rows must be positive"));
    }
    Ok(SessionConfig {
        flow: FlowConfig {
            tcp_idle_timeout_ns: (tcp_idle_timeout_s * NS_PER_S) as i64,
            udp_idle_timeout_ns: (udp_idle_timeout_s * NS_PER_S) as i64,
            tcp_closed_linger_ns: (tcp_closed_linger_s * NS_PER_S) as i64,
            max_flows,
            community_id_seed,
        },
        batch_rows,
    })
}

pub(crate) fn add_keylog_to<'py>(
    py: Python<'py>,
    session: &mut Session,
    path: &std::path::Path,
) -> PyResult<Bound<'py, PyDict>> {
    let st = session
        .add_keylog_file(path)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("{}: {e}", path.display())))?;
    let d = PyDict::new(py);
    d.set_item("lines", st.lines)?;
    d.set_item("secrets", st.secrets)?;
    d.set_item("other_labels", st.other_labels)?;
    d.set_item("malformed", st.malformed)?;
    Ok(d)
}

pub(crate) fn keylog_counts_of<'py>(py: Python<'py>, session: &Session) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(counts) = session.keylog_counts() else { return Ok(None) };
    let d = PyDict::new(py);
    for (k, v) in counts {
        d.set_item(k, v)?;
    }
    Ok(Some(d))
}

#[pymethods]
impl PySession {
    #[new]
    #[pyo3(signature = (capture_id, *, tcp_idle_timeout_s=defaults::TCP_IDLE_TIMEOUT_S,
                        udp_idle_timeout_s=defaults::UDP_IDLE_TIMEOUT_S, tcp_closed_linger_s=defaults::TCP_CLOSED_LINGER_S,
                        max_flows=defaults::MAX_FLOWS, batch_rows=defaults::BATCH_ROWS,
                        community_id_seed=0, shards=1))]
    #[allow(clippy::too_many_arguments)] // the Python constructor's keywords
    fn new(
        capture_id: &str,
        tcp_idle_timeout_s: f64,
        udp_idle_timeout_s: f64,
        tcp_closed_linger_s: f64,
        max_flows: usize,
        batch_rows: usize,
        community_id_seed: u16,
        shards: usize,
    ) -> PyResult<Self> {
        let config = session_config(
            tcp_idle_timeout_s,
            udp_idle_timeout_s,
            tcp_closed_linger_s,
            max_flows,
            batch_rows,
            community_id_seed,
        )?;
        let mut inner = Session::new(config, capture_id);
        // `shards` threads analyse the capture's flows (signatures/src/session/shards.rs)
        inner.set_shards(shards);
        Ok(PySession { inner, unenriched: None, written: BTreeMap::new() })
    }

    /// Which packet rows to write: all, tagged (an analysis tag or an RTT sample) or none.
    fn keep_packets(&mut self, kept: &str) -> PyResult<()> {
        self.inner.keep_packets(packets_kept(kept)?);
        Ok(())
    }

    /// Take only the frames in [since_ns, until_ns) that pass `filter` (tcpdump's expression
    /// language, run by libpcap) from the files opened next; the others are counted as skipped
    /// (`outside_time_window`, `filtered`). Raises ValueError for an expression libpcap rejects.
    #[pyo3(signature = (since_ns=None, until_ns=None, filter=None))]
    fn select(&mut self, since_ns: Option<i64>, until_ns: Option<i64>, filter: Option<&str>) -> PyResult<()> {
        let filter = filter.map(BpfFilter::new).transpose().map_err(PyValueError::new_err)?;
        self.inner.select(FrameSelection { since_ns, until_ns, filter });
        Ok(())
    }

    /// Open a capture file for this session. Raises CaptureFileError naming the file and the
    /// problem when it is not a readable capture.
    fn open(&mut self, path: PathBuf, label: &str) -> PyResult<PyFileCursor> {
        let shown = path.display().to_string();
        let session = &mut self.inner;
        let opened = guarded(&shown, "opening it", || {
            forced_panic("open");
            session.open(&path, label)
        })
        .map_err(InternalError::new_err)?;
        let inner = opened.map_err(|e| capture_error(&shown, &e))?;
        Ok(PyFileCursor { file: OpenFile::new(inner, shown) })
    }

    /// Read a capture from standard input (`tcpdump -w - | tailscope analyze - ...`).
    fn open_stdin(&mut self, label: &str) -> PyResult<PyFileCursor> {
        let session = &mut self.inner;
        let opened = guarded(label, "opening it", || session.open_stdin(label)).map_err(InternalError::new_err)?;
        let inner = opened.map_err(|e| capture_error(label, &e))?;
        Ok(PyFileCursor { file: OpenFile::new(inner, label.to_string()) })
    }

    /// Decode up to `max_frames` frames (GIL released), then return the ready output as a list
    /// of (table_name, pyarrow.RecordBatch).
    /// With a `writer` (PartWriter), the packets go to it directly and are not returned.
    #[pyo3(signature = (cursor, max_frames=262_144, writer=None))]
    fn step(
        &mut self,
        py: Python<'_>,
        cursor: &mut PyFileCursor,
        max_frames: usize,
        writer: Option<PyRef<'_, store::PyPartWriter>>,
    ) -> PyResult<Py<PyList>> {
        let session = &mut self.inner;
        let mut guard = cursor.file.lock()?;
        let cur = &mut *guard;
        let outcome = py.detach(|| {
            catch_unwind(AssertUnwindSafe(|| {
                forced_panic("step");
                session.step(cur, max_frames);
                session.take_output(false)
            }))
        });
        let drained = match outcome {
            Ok(out) => out,
            Err(panic) => {
                // A bug of ours must not take the whole run down: the file is reported as failed
                // with the message, and the caller goes on with the next file.
                cur.done = true;
                drop(guard);
                cursor.file.failed(panic.as_ref());
                Vec::new()
            }
        };
        self.hand_over(py, drained, writer.as_deref())
    }

    /// End every flow and return all remaining output (the packets to `writer`, if given).
    /// Raises InternalError naming the capture if the core fails (the output still held is lost).
    #[pyo3(signature = (writer=None))]
    fn finish(&mut self, py: Python<'_>, writer: Option<PyRef<'_, store::PyPartWriter>>) -> PyResult<Py<PyList>> {
        let session = &mut self.inner;
        let what = format!("capture {}", session.capture_id);
        let drained = py
            .detach(|| {
                guarded(&what, "ending its flows", || {
                    forced_panic("finish");
                    session.finish();
                    session.take_output(true)
                })
            })
            .map_err(InternalError::new_err)?;
        self.hand_over(py, drained, writer.as_deref())
    }

    /// Flush a partial packet batch (e.g. at the end of a file; the packets to `writer`, if
    /// given). Raises InternalError naming the capture if the core fails.
    #[pyo3(signature = (writer=None))]
    fn flush(&mut self, py: Python<'_>, writer: Option<PyRef<'_, store::PyPartWriter>>) -> PyResult<Py<PyList>> {
        let session = &mut self.inner;
        let what = format!("capture {}", session.capture_id);
        let drained = guarded(&what, "flushing its output", || {
            forced_panic("flush");
            session.take_output(true)
        })
        .map_err(InternalError::new_err)?;
        self.hand_over(py, drained, writer.as_deref())
    }

    /// Read an SSLKEYLOGFILE (call before the captures; repeatable). Returns its line counts.
    fn add_keylog<'py>(&mut self, py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
        add_keylog_to(py, &mut self.inner, &path)
    }

    /// QUIC connections by what the key log did for them (None without a key log).
    fn keylog_counts<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        keylog_counts_of(py, &self.inner)
    }

    /// From now on, with a writer, hand it every table: flows and queries with the enrichment
    /// columns no source filled (`h3_res`, and `site` or "unknown"), the open flows enrichment
    /// would read (`query_flows`) dropped. Nothing is returned to Python then.
    #[pyo3(signature = (h3_res, site=None))]
    fn write_unenriched(&mut self, h3_res: i32, site: Option<String>) {
        self.unenriched = Some((h3_res, site));
    }

    /// Rows handed to a writer so far, by table.
    fn written(&self) -> BTreeMap<&'static str, u64> {
        self.written.clone()
    }

    fn totals<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = stats_dict(py, &self.inner.totals)?;
        d.set_item("flows", self.inner.flows_started())?;
        d.set_item("flows_evicted", self.inner.flows_evicted())?;
        d.set_item("active_flows", self.inner.active_flows())?;
        d.set_item("queries_written_unsettled", self.inner.queries_written_unsettled)?;
        Ok(d)
    }
}

impl PySession {
    /// The writer's tables to the writer (packets always; every table once `write_unenriched`
    /// was called); the others back to Python.
    fn hand_over(
        &mut self,
        py: Python<'_>,
        drained: Vec<Drained>,
        writer: Option<&store::PyPartWriter>,
    ) -> PyResult<Py<PyList>> {
        let out = PyList::empty(py);
        for d in drained {
            for item in self.hand_over_one(py, d, writer)?.bind(py) {
                out.append(item)?;
            }
        }
        Ok(out.unbind())
    }

    fn hand_over_one(
        &mut self,
        py: Python<'_>,
        mut drained: Drained,
        writer: Option<&store::PyPartWriter>,
    ) -> PyResult<Py<PyList>> {
        let Some(w) = writer else { return output_list(py, drained.into_tables()) };
        let mut to_writer = vec![("packets", drained.packets.take())];
        if let Some((h3_res, site)) = &self.unenriched {
            let enrich = |b: Option<RecordBatch>| {
                b.map(|b| enrichment::with_unknown(&b, *h3_res, site.as_deref()))
                    .transpose()
                    .map_err(|e| InternalError::new_err(e.to_string()))
            };
            drained.query_flows = None;
            to_writer.push(("flows", enrich(drained.flows.take())?));
            to_writer.push(("events", drained.events.take()));
            to_writer.push(("queries", enrich(drained.queries.take())?));
        }
        for (table, batch) in to_writer.into_iter().filter_map(|(t, b)| b.map(|b| (t, b))) {
            *self.written.entry(table).or_default() += batch.num_rows() as u64;
            w.send(py, table, batch)?;
        }
        output_list(py, drained.into_tables())
    }
}

pub(crate) fn output_list<const N: usize>(
    py: Python<'_>,
    batches: [(&str, Option<RecordBatch>); N],
) -> PyResult<Py<PyList>> {
    let out = PyList::empty(py);
    for (table, batch) in batches {
        if let Some(b) = batch {
            out.append((table, batch_to_py(py, b)?))?;
        }
    }
    Ok(out.unbind())
}

#[pymethods]
impl PyFileCursor {
    #[getter]
    fn done(&self) -> bool {
        self.file.done()
    }

    /// Bytes of the (decompressed) stream read so far.
    #[getter]
    fn offset(&self) -> u64 {
        self.file.offset()
    }

    /// Bytes of the input as stored (compressed or not) read so far: progress against its size.
    #[getter]
    fn input_offset(&self) -> u64 {
        self.file.lock().map(|c| c.input_offset()).unwrap_or(0)
    }

    #[getter]
    fn path(&self) -> &str {
        &self.file.path
    }

    /// Per-file accounting: frames read, decoded, skipped by reason, error with byte offset.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.file.stats(py, |_, _| Ok(()))
    }
}

/// First frame's timestamp and the file's format, without decoding the rest: used to order the
/// files of a capture in time. Raises CaptureFileError for unreadable files.
#[pyfunction]
fn probe<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let shown = path.display().to_string();
    let probed = guarded(&shown, "probing it", || {
        forced_panic("probe");
        let mut reader = CaptureReader::open(&path)?;
        let first = reader.next_frame().ok().flatten().map(|f| (f.ts_ns, f.linktype));
        Ok((reader.format.name(), reader.compression.name(), first))
    })
    .map_err(InternalError::new_err)?;
    let (format, compression, first) = probed.map_err(|e: CaptureError| capture_error(&shown, &e))?;
    let d = PyDict::new(py);
    d.set_item("format", format)?;
    d.set_item("compression", compression)?;
    d.set_item("first_ts_ns", first.map(|f| f.0))?;
    d.set_item("linktype", first.map(|f| f.1))?;
    Ok(d)
}

#[pyfunction]
#[pyo3(signature = (src, sport, dst, dport, proto, seed=0))]
fn community_id(src: &str, sport: u16, dst: &str, dport: u16, proto: u8, seed: u16) -> PyResult<String> {
    let parse = |s: &str| s.parse().map_err(|_| PyValueError::new_err(format!("not an IP address: {s:?}")));
    Ok(tailscope_signatures::community_id::community_id_v1(seed, parse(src)?, sport, parse(dst)?, dport, proto))
}

#[pyfunction]
fn packet_schema(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(tables::packet_schema().as_ref().to_pyarrow(py)?.into())
}

#[pyfunction]
fn flow_schema(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(tables::flow_schema().as_ref().to_pyarrow(py)?.into())
}

#[pyfunction]
fn query_schema(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(tables::query_schema().as_ref().to_pyarrow(py)?.into())
}

#[pyfunction]
fn event_schema(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(tables::event_schema().as_ref().to_pyarrow(py)?.into())
}

/// The columns enrichment adds to flows and queries (signatures/src/enrichment.rs).
#[pyfunction]
fn enrichment_schema(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(arrow::datatypes::Schema::new(enrichment::fields()).to_pyarrow(py)?.into())
}

/// The enrichment columns of `rows` rows no source matched, as a record batch.
#[pyfunction]
#[pyo3(signature = (rows, h3_res, site=None))]
fn unknown_enrichment(py: Python<'_>, rows: usize, h3_res: i32, site: Option<&str>) -> PyResult<Py<PyAny>> {
    batch_to_py(py, enrichment::unknown_batch(rows, h3_res, site))
}

/// Names of the per-packet tags, in bit order (bit i is `1 << i`).
#[pyfunction]
fn tag_names() -> Vec<&'static str> {
    tailscope_signatures::tags::ALL.iter().map(|(_, n)| *n).collect()
}

/// The retransmission causes as (tag bit, name), in the order a packet's cause is looked for
/// (`tags::cause_name`): the packets view derives `retx_cause` from `tags` with them.
#[pyfunction]
fn retx_causes() -> Vec<(u32, &'static str)> {
    tailscope_signatures::tags::CAUSES.to_vec()
}

#[pyfunction]
fn skip_reasons() -> Vec<&'static str> {
    SkipReason::ALL.iter().map(|r| r.name()).collect()
}

/// The session defaults (signatures/src/defaults.rs), by option name: the Python layer's defaults.
#[pyfunction(name = "defaults")]
fn defaults_py(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, value) in defaults::TABLE {
        match value {
            defaults::Value::Seconds(s) => d.set_item(name, s)?,
            defaults::Value::Count(n) => d.set_item(name, n)?,
        }
    }
    Ok(d)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySession>()?;
    m.add_class::<PyFileCursor>()?;
    m.add_class::<replay::PyFrameSplitter>()?;
    m.add_class::<replay::PyReplayer>()?;
    m.add_class::<pseudonym::PyPseudonymizer>()?;
    m.add_class::<store::PyPartWriter>()?;
    m.add_function(wrap_pyfunction!(store::tables_by_date, m)?)?;
    m.add_function(wrap_pyfunction!(store::compact_parts, m)?)?;
    m.add_function(wrap_pyfunction!(store::files_batch_py, m)?)?;
    m.add_function(wrap_pyfunction!(replay::frame_schema_py, m)?)?;
    m.add_function(wrap_pyfunction!(probe, m)?)?;
    m.add_function(wrap_pyfunction!(finish::finish_capture, m)?)?;
    m.add_function(wrap_pyfunction!(defaults_py, m)?)?;
    m.add_function(wrap_pyfunction!(community_id, m)?)?;
    m.add_function(wrap_pyfunction!(packet_schema, m)?)?;
    m.add_function(wrap_pyfunction!(flow_schema, m)?)?;
    m.add_function(wrap_pyfunction!(skip_reasons, m)?)?;
    m.add_function(wrap_pyfunction!(event_schema, m)?)?;
    m.add_function(wrap_pyfunction!(query_schema, m)?)?;
    m.add_function(wrap_pyfunction!(tag_names, m)?)?;
    m.add_function(wrap_pyfunction!(retx_causes, m)?)?;
    m.add_function(wrap_pyfunction!(enrichment_schema, m)?)?;
    m.add_function(wrap_pyfunction!(unknown_enrichment, m)?)?;
    m.add_function(wrap_pyfunction!(_force_panic, m)?)?;
    m.add("CaptureFileError", m.py().get_type::<CaptureFileError>())?;
    m.add("InternalError", m.py().get_type::<InternalError>())?;
    m.add("SCHEMA_VERSION", tables::SCHEMA_VERSION)?;
    m.add("ENRICHMENT_UNKNOWN", enrichment::UNKNOWN)?;
    Ok(())
}

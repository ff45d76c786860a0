//! `finish_capture`: the edge agent's per-file copy of a closed raw capture into its compressed
//! spool file (tailscope_parsers::finish), one call per file with the GIL released.

use std::path::PathBuf;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PySequence};

use tailscope_parsers::finish::{finish_file, Codec, FinishError, HandoverDedupe, Key};

use crate::{guarded, CaptureFileError, InternalError};

/// Copy the classic pcap `raw_path` into `out_path` (created or replaced, synced) compressed with
/// `compression` ("gzip" | "zstd") at `level` (None: gzip 6, zstd 3), leaving out the packets
/// matching `dedupe_keys` (the previous file's tail: `[ts_ns, caplen, wirelen, digest]` each, as
/// in the agent's dedupe files) and a torn last record. Returns a dict: linktype, snaplen,
/// packets, bytes_captured, bytes_on_wire, first_ns, last_ns (None without packets),
/// duplicates_removed, truncated_tail (bytes), size_bytes, sha256 (of the compressed file),
/// pcap_size_bytes, pcap_sha256 (of the pcap kept), tail (the keys of the kept packets at or
/// after `tail_from_ns`, `(ts_ns, caplen, wirelen, digest)` tuples; empty when None).
///
/// Raises CaptureFileError naming the file if it is not a classic pcap or holds a record no
/// tcpdump writes, OSError (naming the file) if reading or writing fails, ValueError for a bad
/// compression name or level.
#[pyfunction]
#[pyo3(signature = (raw_path, out_path, compression, level=None, dedupe_keys=None, tail_from_ns=None))]
pub(crate) fn finish_capture<'py>(
    py: Python<'py>,
    raw_path: PathBuf,
    out_path: PathBuf,
    compression: &str,
    level: Option<i32>,
    dedupe_keys: Option<Bound<'py, PySequence>>,
    tail_from_ns: Option<i64>,
) -> PyResult<Bound<'py, PyDict>> {
    let codec = Codec::parse(compression)
        .ok_or_else(|| PyValueError::new_err(format!("compression must be gzip or zstd, not {compression:?}")))?;
    let mut keys = Vec::new();
    if let Some(seq) = dedupe_keys {
        for k in seq.try_iter()? {
            // JSON gives lists; any 4-item sequence will do
            let (ts_ns, caplen, wirelen, digest): (i64, u32, u32, String) =
                k?.downcast::<PySequence>()?.to_tuple()?.extract()?;
            keys.push(Key { ts_ns, caplen, wirelen, digest });
        }
    }
    let what = raw_path.display().to_string();
    let outcome = py
        .detach(|| {
            guarded(&what, "finishing it", || {
                let mut dedupe = HandoverDedupe::new(keys);
                finish_file(&raw_path, &out_path, codec, level, &mut dedupe, tail_from_ns)
            })
        })
        .map_err(InternalError::new_err)?;
    let f = outcome.map_err(|e| match e {
        FinishError::BadCapture(m) => CaptureFileError::new_err(m),
        FinishError::BadLevel(m) => PyValueError::new_err(m),
        // the agent retries these (the raw file is intact); the message names the file
        FinishError::Io(e) => PyOSError::new_err(e.to_string()),
    })?;
    let d = PyDict::new(py);
    d.set_item("linktype", f.linktype)?;
    d.set_item("snaplen", f.snaplen)?;
    d.set_item("packets", f.packets)?;
    d.set_item("bytes_captured", f.bytes_captured)?;
    d.set_item("bytes_on_wire", f.bytes_on_wire)?;
    d.set_item("first_ns", f.first_ns)?;
    d.set_item("last_ns", f.last_ns)?;
    d.set_item("duplicates_removed", f.duplicates_removed)?;
    d.set_item("truncated_tail", f.truncated_tail)?;
    d.set_item("size_bytes", f.size_bytes)?;
    d.set_item("sha256", f.sha256)?;
    d.set_item("pcap_size_bytes", f.pcap_size_bytes)?;
    d.set_item("pcap_sha256", f.pcap_sha256)?;
    let tail = PyList::empty(py);
    for k in f.tail {
        tail.append((k.ts_ns, k.caplen, k.wirelen, k.digest))?;
    }
    d.set_item("tail", tail)?;
    Ok(d)
}

//! `Pseudonymizer`: Crypto-PAn pseudonyms of the client addresses of flows batches
//! (tailscope_signatures::pseudonym), applied after enrichment read the real address.

use arrow::pyarrow::{FromPyArrow, ToPyArrow};
use arrow::record_batch::RecordBatch;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use tailscope_signatures::pseudonym::{FlowPseudonymizer, KEY_LEN};

#[pyclass(name = "Pseudonymizer", module = "tailscope._native")]
pub struct PyPseudonymizer {
    inner: FlowPseudonymizer,
}

#[pymethods]
impl PyPseudonymizer {
    #[new]
    fn new(key: &[u8]) -> PyResult<Self> {
        let key: &[u8; KEY_LEN] = key
            .try_into()
            .map_err(|_| PyValueError::new_err(format!("a Crypto-PAn key is {KEY_LEN} bytes, got {}", key.len())))?;
        Ok(PyPseudonymizer { inner: FlowPseudonymizer::new(key) })
    }

    /// The flows batch with pseudonymized client addresses and Community IDs.
    fn apply_flows(&mut self, py: Python<'_>, batch: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let batch = RecordBatch::from_pyarrow_bound(batch)?;
        let out = self.inner.apply(&batch).map_err(PyValueError::new_err)?;
        Ok(out.to_pyarrow(py)?.into())
    }

    /// The pseudonym of one address (IPv4 or IPv6 text).
    fn address(&self, text: &str) -> PyResult<String> {
        let addr: std::net::IpAddr =
            text.parse().map_err(|_| PyValueError::new_err(format!("{text:?} is not an address")))?;
        Ok(self.inner.pan().anonymize(addr).to_string())
    }
}

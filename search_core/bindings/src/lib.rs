//! Thin PyO3 bindings of kf-mcts, exposed as `search_core._native`.
use pyo3::prelude::*;

#[pymodule]
fn _native(_py: Python<'_>, m: &PyModule) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

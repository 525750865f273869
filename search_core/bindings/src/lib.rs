//! Thin PyO3 bindings of kf-mcts, exposed as `search_core._native`; the Python package wraps
//! them in its public API. Work that can take time (file I/O, many picks) runs with the GIL
//! released; calls that take microseconds keep it, since handing the GIL over and taking it
//! back costs more than that whenever another thread is waiting for it.
mod error;

use std::path::PathBuf;

use kf_mcts::{DurableTree, NodeId, NodeStatus, SearchConfig};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use error::{to_py, UnknownNodeError};

/// A node as a plain tuple:
/// (id, parent, depth, status, cancelled, latency_us, spread_us, visits, value, best_reward, in_flight).
type NodeTuple = (
    NodeId,
    Option<NodeId>,
    u32,
    &'static str,
    bool,
    Option<f64>,
    Option<f64>,
    u64,
    Option<f64>,
    Option<f64>,
    u32,
);

/// The fields of a `SearchConfig`, in declaration order.
type ConfigTuple = (u64, f64, f64, f64, f64, f64, Option<f64>, u64);

#[pyclass(module = "search_core._native")]
struct NativeTree {
    inner: DurableTree,
}

/// Picks per `ask` from which selection runs without the GIL.
const ASK_WITHOUT_GIL: usize = 64;

/// Runs `work` with the GIL released when `release` says it is long enough to pay for it.
fn maybe_without_gil<T: Send>(py: Python<'_>, release: bool, work: impl FnOnce() -> T + Send) -> T {
    if release {
        py.allow_threads(work)
    } else {
        work()
    }
}

fn node_id(raw: i64) -> PyResult<NodeId> {
    NodeId::try_from(raw).map_err(|_| UnknownNodeError::new_err(format!("no node with id {raw}")))
}

#[pymethods]
impl NativeTree {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        seed: u64,
        exploration: f64,
        widen_k: f64,
        widen_alpha: f64,
        virtual_loss: f64,
        max_weight: f64,
        widen_alpha_end: Option<f64>,
        widen_anneal_evaluations: u64,
        reference_latency_us: f64,
        log_path: Option<PathBuf>,
        snapshot_every: u64,
    ) -> PyResult<Self> {
        let config = SearchConfig {
            seed,
            exploration,
            widen_k,
            widen_alpha,
            virtual_loss,
            max_weight,
            widen_alpha_end,
            widen_anneal_evaluations,
        };
        py.allow_threads(|| {
            DurableTree::create(
                config,
                reference_latency_us,
                log_path.as_deref(),
                snapshot_every,
            )
        })
        .map(|inner| Self { inner })
        .map_err(to_py)
    }

    #[staticmethod]
    fn restore(
        py: Python<'_>,
        data: &[u8],
        log_path: Option<PathBuf>,
        snapshot_every: u64,
    ) -> PyResult<Self> {
        py.allow_threads(|| DurableTree::restore(data, log_path.as_deref(), snapshot_every))
            .map(|inner| Self { inner })
            .map_err(to_py)
    }

    #[staticmethod]
    fn open(py: Python<'_>, log_path: PathBuf, snapshot_every: u64) -> PyResult<Self> {
        py.allow_threads(|| DurableTree::open(&log_path, snapshot_every))
            .map(|inner| Self { inner })
            .map_err(to_py)
    }

    /// (seed, exploration, widen_k, widen_alpha, virtual_loss, max_weight, widen_alpha_end,
    /// widen_anneal_evaluations)
    fn config(&self) -> ConfigTuple {
        let c = self.inner.tree().config();
        (
            c.seed,
            c.exploration,
            c.widen_k,
            c.widen_alpha,
            c.virtual_loss,
            c.max_weight,
            c.widen_alpha_end,
            c.widen_anneal_evaluations,
        )
    }

    #[getter]
    fn reference_latency_us(&self) -> f64 {
        self.inner.tree().reference_latency_us()
    }

    #[getter]
    fn log_path(&self) -> Option<PathBuf> {
        self.inner.log_path().map(PathBuf::from)
    }

    fn ask(&mut self, py: Python<'_>, n: usize) -> PyResult<Vec<NodeId>> {
        let inner = &mut self.inner;
        maybe_without_gil(py, n >= ASK_WITHOUT_GIL, || inner.ask(n)).map_err(to_py)
    }

    fn release(&mut self, parent: i64) -> PyResult<()> {
        self.inner.release(node_id(parent)?).map_err(to_py)
    }

    fn add_child(&mut self, parent: i64) -> PyResult<NodeId> {
        self.inner.add_child(node_id(parent)?).map_err(to_py)
    }

    fn tell(
        &mut self,
        py: Python<'_>,
        node: i64,
        passed: bool,
        latency_us: Option<f64>,
        spread_us: Option<f64>,
    ) -> PyResult<()> {
        let node = node_id(node)?;
        let inner = &mut self.inner;
        // A logged result is fsync'd.
        let logged = inner.is_logged();
        maybe_without_gil(py, logged, || {
            inner.tell(node, passed, latency_us, spread_us)
        })
        .map_err(to_py)
    }

    fn cancel(&mut self, py: Python<'_>, node: i64) -> PyResult<()> {
        let node = node_id(node)?;
        let inner = &mut self.inner;
        let logged = inner.is_logged();
        maybe_without_gil(py, logged, || inner.cancel(node)).map_err(to_py)
    }

    fn checkpoint(&mut self, py: Python<'_>) -> PyResult<()> {
        let inner = &mut self.inner;
        py.allow_threads(|| inner.checkpoint()).map_err(to_py)
    }

    fn best(&self) -> Option<NodeId> {
        self.inner.tree().best()
    }

    fn node(&self, id: i64) -> PyResult<NodeTuple> {
        let v = self.inner.tree().node(node_id(id)?).map_err(to_py)?;
        let status = match v.status {
            NodeStatus::Root => "root",
            NodeStatus::Pending => "pending",
            NodeStatus::Passed => "passed",
            NodeStatus::Failed | NodeStatus::Cancelled => "failed",
        };
        let cancelled = v.status == NodeStatus::Cancelled;
        Ok((
            v.id,
            v.parent,
            v.depth,
            status,
            cancelled,
            v.latency_us,
            v.spread_us,
            v.visits,
            v.value,
            v.best_reward,
            v.in_flight,
        ))
    }

    fn ancestors(&self, id: i64) -> PyResult<Vec<NodeId>> {
        self.inner.tree().ancestors(node_id(id)?).map_err(to_py)
    }

    fn best_descendant(&self, id: i64) -> PyResult<Option<NodeId>> {
        self.inner
            .tree()
            .best_descendant(node_id(id)?)
            .map_err(to_py)
    }

    fn failed_siblings(&self, id: i64) -> PyResult<Vec<NodeId>> {
        self.inner
            .tree()
            .failed_siblings(node_id(id)?)
            .map_err(to_py)
    }

    fn children(&self, id: i64) -> PyResult<Vec<NodeId>> {
        self.inner.tree().children(node_id(id)?).map_err(to_py)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> &'py PyBytes {
        let tree = self.inner.tree();
        let data = py.allow_threads(|| tree.snapshot());
        PyBytes::new(py, &data)
    }

    fn __len__(&self) -> usize {
        self.inner.tree().len()
    }
}

#[pymodule]
fn _native(_py: Python<'_>, m: &PyModule) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<NativeTree>()?;
    Ok(())
}

//! Thin PyO3 bindings of kf-mcts, exposed as `search_core._native`; the Python package wraps
//! them in its public API.
//!
//! A `NativeTree` may be shared by threads: a mutex runs its calls one at a time. Calls that
//! take microseconds keep the GIL (handing it over and taking it back costs more than that
//! whenever another thread waits for it); work that can take long (many picks, a snapshot of a
//! large tree) runs without it, and so does a call that has to wait for the mutex, so the holder
//! can finish.
mod error;

use std::sync::{Mutex, TryLockError};

use kf_mcts::{NodeId, NodeStatus, SearchConfig, Tree};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use error::{to_py, InvalidStateError, UnknownNodeError};

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
    inner: Mutex<Tree>,
}

/// Picks per `ask` from which selection runs without the GIL.
const ASK_WITHOUT_GIL: usize = 64;

impl NativeTree {
    fn wrap(tree: Tree) -> Self {
        Self {
            inner: Mutex::new(tree),
        }
    }

    /// Runs `work` on the tree, one call at a time: with the GIL when the tree is free and the
    /// work is short (`long` false), else without it.
    fn with_tree<T: Send>(
        &self,
        py: Python<'_>,
        long: bool,
        work: impl FnOnce(&mut Tree) -> T + Send,
    ) -> PyResult<T> {
        if !long {
            match self.inner.try_lock() {
                Ok(mut tree) => return Ok(work(&mut tree)),
                Err(TryLockError::Poisoned(_)) => return Err(poisoned()),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        py.allow_threads(|| match self.inner.lock() {
            Ok(mut tree) => Some(work(&mut tree)),
            Err(_) => None,
        })
        .ok_or_else(poisoned)
    }
}

/// A call panicked (a bug) while it held the tree, which may be half-updated: refuse to go on.
fn poisoned() -> PyErr {
    InvalidStateError::new_err(
        "an earlier call failed inside the search core; rebuild the tree from its snapshot or log",
    )
}

fn node_id(raw: i64) -> PyResult<NodeId> {
    NodeId::try_from(raw).map_err(|_| UnknownNodeError::new_err(format!("no node with id {raw}")))
}

#[pymethods]
impl NativeTree {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        exploration: f64,
        widen_k: f64,
        widen_alpha: f64,
        virtual_loss: f64,
        max_weight: f64,
        widen_alpha_end: Option<f64>,
        widen_anneal_evaluations: u64,
        reference_latency_us: f64,
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
        Tree::new(config, reference_latency_us)
            .map(Self::wrap)
            .map_err(to_py)
    }

    #[staticmethod]
    fn restore(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        py.allow_threads(|| Tree::restore(data))
            .map(Self::wrap)
            .map_err(to_py)
    }

    /// (seed, exploration, widen_k, widen_alpha, virtual_loss, max_weight, widen_alpha_end,
    /// widen_anneal_evaluations)
    fn config(&self, py: Python<'_>) -> PyResult<ConfigTuple> {
        let c = self.with_tree(py, false, |t| t.config().clone())?;
        Ok((
            c.seed,
            c.exploration,
            c.widen_k,
            c.widen_alpha,
            c.virtual_loss,
            c.max_weight,
            c.widen_alpha_end,
            c.widen_anneal_evaluations,
        ))
    }

    #[getter]
    fn reference_latency_us(&self, py: Python<'_>) -> PyResult<f64> {
        self.with_tree(py, false, |t| t.reference_latency_us())
    }

    fn ask(&self, py: Python<'_>, n: usize) -> PyResult<Vec<NodeId>> {
        self.with_tree(py, n >= ASK_WITHOUT_GIL, |t| t.ask(n))
    }

    fn release(&self, py: Python<'_>, parent: i64) -> PyResult<()> {
        let parent = node_id(parent)?;
        self.with_tree(py, false, |t| t.release(parent))?
            .map_err(to_py)
    }

    fn add_child(&self, py: Python<'_>, parent: i64) -> PyResult<NodeId> {
        let parent = node_id(parent)?;
        self.with_tree(py, false, |t| t.add_child(parent))?
            .map_err(to_py)
    }

    fn tell(
        &self,
        py: Python<'_>,
        node: i64,
        passed: bool,
        latency_us: Option<f64>,
        spread_us: Option<f64>,
    ) -> PyResult<()> {
        let node = node_id(node)?;
        self.with_tree(py, false, |t| t.tell(node, passed, latency_us, spread_us))?
            .map_err(to_py)
    }

    fn cancel(&self, py: Python<'_>, node: i64) -> PyResult<()> {
        let node = node_id(node)?;
        self.with_tree(py, false, |t| t.cancel(node))?
            .map_err(to_py)
    }

    fn best(&self, py: Python<'_>) -> PyResult<Option<NodeId>> {
        self.with_tree(py, false, |t| t.best())
    }

    fn node(&self, py: Python<'_>, id: i64) -> PyResult<NodeTuple> {
        let id = node_id(id)?;
        let v = self
            .with_tree(py, false, |t| t.node(id))?
            .map_err(to_py)?;
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

    fn ancestors(&self, py: Python<'_>, id: i64) -> PyResult<Vec<NodeId>> {
        let id = node_id(id)?;
        self.with_tree(py, false, |t| t.ancestors(id))?
            .map_err(to_py)
    }

    fn best_descendant(&self, py: Python<'_>, id: i64) -> PyResult<Option<NodeId>> {
        let id = node_id(id)?;
        self.with_tree(py, false, |t| t.best_descendant(id))?
            .map_err(to_py)
    }

    fn failed_siblings(&self, py: Python<'_>, id: i64) -> PyResult<Vec<NodeId>> {
        let id = node_id(id)?;
        self.with_tree(py, false, |t| t.failed_siblings(id))?
            .map_err(to_py)
    }

    fn children(&self, py: Python<'_>, id: i64) -> PyResult<Vec<NodeId>> {
        let id = node_id(id)?;
        self.with_tree(py, false, |t| t.children(id))?
            .map_err(to_py)
    }

    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<&'py PyBytes> {
        let data = self.with_tree(py, true, |t| t.snapshot())?;
        Ok(PyBytes::new(py, &data))
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.with_tree(py, false, |t| t.len())
    }
}

#[pymodule]
fn _native(_py: Python<'_>, m: &PyModule) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<NativeTree>()?;
    Ok(())
}

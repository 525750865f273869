//! Monte Carlo Tree Search over kernel revisions.
//!
//! [`Tree`] is the in-memory search tree (selection, back-propagation, lineage queries);
//! [`DurableTree`] adds the append-only log and snapshots that let a search survive a crash.
//! Nothing here knows about Python, gRPC, CUDA or LLMs.

mod config;
mod durable;
mod error;
mod journal;
mod node;
mod rng;
mod selection;
mod snapshot;
mod tree;

pub use config::SearchConfig;
pub use durable::DurableTree;
pub use error::SearchError;
pub use node::{NodeId, NodeStatus, NodeView};
pub use rng::SplitMix64;
pub use tree::Tree;

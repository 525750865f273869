//! Monte Carlo Tree Search over kernel revisions.
//!
//! [`Tree`] is the in-memory search tree (selection, back-propagation, lineage queries), with
//! [`Tree::snapshot`] / [`Tree::restore`] as its exact serialised form. Persistence is the
//! caller's: the forge logs every operation in its run store and replays it into a new tree.
//! Nothing here knows about Python, gRPC, CUDA or LLMs.

mod config;
mod error;
mod node;
mod rng;
mod selection;
mod snapshot;
mod tree;

pub use config::SearchConfig;
pub use error::SearchError;
pub use node::{NodeId, NodeStatus, NodeView};
pub use rng::SplitMix64;
pub use tree::Tree;

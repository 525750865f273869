//! Monte Carlo Tree Search over kernel revisions.

/// Identifier of a node in the tree.
pub type NodeId = u64;

//! One candidate of the search: its result and the statistics of its subtree.

use serde::{Deserialize, Serialize};

use crate::selection::{Arms, NodeCache};

/// Index of a node; the root (the eager baseline) is 0 and ids grow in creation order.
pub type NodeId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeStatus {
    /// The eager baseline every candidate descends from.
    Root,
    /// Created, its evaluation still in flight.
    Pending,
    /// Compiled, verified and timed.
    Passed,
    /// Evaluated and rejected (compile error, wrong numerics, crash).
    Failed,
    /// Its evaluation was lost before a result; kept as a failed child, never counted as a visit.
    Cancelled,
}

impl NodeStatus {
    /// Only the root and passed nodes may be revised further.
    pub fn is_expandable(self) -> bool {
        matches!(self, Self::Root | Self::Passed)
    }
}

/// A node and the statistics selection reads. `visits` counts evaluations in the subtree
/// (failures included); `passed` and `reward_sum` only the passed ones.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    pub parent: Option<NodeId>,
    pub depth: u32,
    pub status: NodeStatus,
    pub latency_us: Option<f64>,
    pub spread_us: Option<f64>,
    pub visits: u64,
    pub passed: u64,
    pub reward_sum: f64,
    pub best_reward: Option<f64>,
    pub best_below: Option<NodeId>,
    /// Evaluations in flight in the subtree, plus parents handed out by `ask` and not yet expanded.
    pub in_flight: u32,
    /// Parents handed out by `ask` for this node and not yet turned into a child.
    pub reserved: u32,
    /// Children that count against progressive widening (all but cancelled ones).
    pub expansions: u32,
    /// The children, oldest first, with the terms of their selection scores.
    pub arms: Arms,
    /// This node's index among its parent's children.
    pub slot: u32,
    /// `ln(reference / latency)` of this node's own result (root and passed nodes).
    pub own_reward: f64,
    pub cache: NodeCache,
}

impl Node {
    pub fn new(parent: Option<NodeId>, depth: u32, status: NodeStatus, epoch: u64) -> Self {
        Self {
            parent,
            depth,
            status,
            latency_us: None,
            spread_us: None,
            visits: 0,
            passed: 0,
            reward_sum: 0.0,
            best_reward: None,
            best_below: None,
            in_flight: 0,
            reserved: 0,
            expansions: 0,
            arms: Arms::new(epoch),
            slot: 0,
            own_reward: 0.0,
            cache: NodeCache::default(),
        }
    }
}

/// A read-only copy of one node for callers.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeView {
    pub id: NodeId,
    pub parent: Option<NodeId>,
    pub depth: u32,
    pub status: NodeStatus,
    pub latency_us: Option<f64>,
    pub spread_us: Option<f64>,
    pub visits: u64,
    /// Mean reward `ln(reference / latency)` of the passed evaluations in the subtree.
    pub value: Option<f64>,
    /// Best reward in the subtree.
    pub best_reward: Option<f64>,
    pub in_flight: u32,
}

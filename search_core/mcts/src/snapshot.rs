//! The serialised form of a [`Tree`]: JSON with one array per node field, so a million-node
//! tree stays compact and other languages (the Python reference) load it directly. Derived
//! fields (depth, children, widening counts) are rebuilt on load.

use serde::{Deserialize, Serialize};

use crate::node::{Node, NodeId, NodeStatus};
use crate::selection::Arms;
use crate::{SearchConfig, SearchError, SplitMix64, Tree};

const FORMAT: u32 = 1;

#[derive(Serialize, Deserialize)]
struct TreeSnapshot {
    format: u32,
    config: SearchConfig,
    reference_latency_us: f64,
    rng: SplitMix64,
    reward_min: f64,
    reward_max: f64,
    best: Option<NodeId>,
    nodes: NodeColumns,
}

#[derive(Serialize, Deserialize)]
struct NodeColumns {
    parent: Vec<Option<NodeId>>,
    status: Vec<NodeStatus>,
    latency_us: Vec<Option<f64>>,
    spread_us: Vec<Option<f64>>,
    visits: Vec<u64>,
    passed: Vec<u64>,
    reward_sum: Vec<f64>,
    best_reward: Vec<Option<f64>>,
    best_below: Vec<Option<NodeId>>,
    in_flight: Vec<u32>,
    reserved: Vec<u32>,
}

impl From<&Tree> for TreeSnapshot {
    fn from(tree: &Tree) -> Self {
        let nodes = NodeColumns {
            parent: tree.nodes.iter().map(|n| n.parent).collect(),
            status: tree.nodes.iter().map(|n| n.status).collect(),
            latency_us: tree.nodes.iter().map(|n| n.latency_us).collect(),
            spread_us: tree.nodes.iter().map(|n| n.spread_us).collect(),
            visits: tree.nodes.iter().map(|n| n.visits).collect(),
            passed: tree.nodes.iter().map(|n| n.passed).collect(),
            reward_sum: tree.nodes.iter().map(|n| n.reward_sum).collect(),
            best_reward: tree.nodes.iter().map(|n| n.best_reward).collect(),
            best_below: tree.nodes.iter().map(|n| n.best_below).collect(),
            in_flight: tree.nodes.iter().map(|n| n.in_flight).collect(),
            reserved: tree.nodes.iter().map(|n| n.reserved).collect(),
        };
        Self {
            format: FORMAT,
            config: tree.config.clone(),
            reference_latency_us: tree.reference_latency_us,
            rng: tree.rng.clone(),
            reward_min: tree.reward_min,
            reward_max: tree.reward_max,
            best: tree.best,
            nodes,
        }
    }
}

impl TreeSnapshot {
    /// Rebuilds the tree, checking the structure so a damaged snapshot fails here, not later.
    fn into_tree(self) -> Result<Tree, SearchError> {
        let bad = SearchError::InvalidSnapshot;
        if self.format != FORMAT {
            return Err(bad(format!(
                "format {} is not the supported {FORMAT}",
                self.format
            )));
        }
        self.config.validate().map_err(|e| bad(e.to_string()))?;
        let c = self.nodes;
        let len = c.parent.len();
        let lengths = [
            c.status.len(),
            c.latency_us.len(),
            c.spread_us.len(),
            c.visits.len(),
            c.passed.len(),
            c.reward_sum.len(),
            c.best_reward.len(),
            c.best_below.len(),
            c.in_flight.len(),
            c.reserved.len(),
        ];
        if len == 0 || lengths.iter().any(|&l| l != len) {
            return Err(bad("node columns are empty or of different lengths".into()));
        }
        let in_range = |id: Option<NodeId>| id.is_none_or(|i| (i as usize) < len);
        if !in_range(self.best) || !c.best_below.iter().all(|&b| in_range(b)) {
            return Err(bad("a best node id is out of range".into()));
        }
        let mut nodes: Vec<Node> = Vec::with_capacity(len);
        for id in 0..len {
            let (parent, status) = (c.parent[id], c.status[id]);
            let (depth, slot) = match parent {
                None if id == 0 && status == NodeStatus::Root => (0, 0),
                Some(p) if (p as usize) < id && status != NodeStatus::Root => {
                    let parent_node = &mut nodes[p as usize];
                    if !parent_node.status.is_expandable() {
                        return Err(bad(format!(
                            "node {id} has parent {p}, which cannot have children"
                        )));
                    }
                    let slot = parent_node.arms.push(id as NodeId, 0.0);
                    if status != NodeStatus::Cancelled {
                        parent_node.expansions += 1;
                    }
                    (parent_node.depth + 1, slot)
                }
                _ => return Err(bad(format!("node {id} has an invalid parent or status"))),
            };
            // Selection terms are recomputed from the restored statistics on first use.
            let mut node = Node::new(parent, depth, status, Arms::STALE);
            node.slot = slot;
            if let Some(latency) = c.latency_us[id] {
                node.own_reward = (self.reference_latency_us / latency).ln();
            }
            node.latency_us = c.latency_us[id];
            node.spread_us = c.spread_us[id];
            node.visits = c.visits[id];
            node.passed = c.passed[id];
            node.reward_sum = c.reward_sum[id];
            node.best_reward = c.best_reward[id];
            node.best_below = c.best_below[id];
            node.in_flight = c.in_flight[id];
            node.reserved = c.reserved[id];
            nodes.push(node);
        }
        Ok(Tree {
            config: self.config,
            reference_latency_us: self.reference_latency_us,
            rng: self.rng,
            nodes,
            reward_min: self.reward_min,
            reward_max: self.reward_max,
            best: self.best,
            epoch: 0,
        })
    }
}

impl Tree {
    /// The whole tree as JSON bytes (deterministic: equal trees give equal bytes).
    pub fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(&TreeSnapshot::from(self))
            .expect("a tree of plain numbers always serialises")
    }

    /// Rebuilds a tree from [`Tree::snapshot`] bytes.
    pub fn restore(data: &[u8]) -> Result<Self, SearchError> {
        let snapshot: TreeSnapshot = serde_json::from_slice(data)
            .map_err(|e| SearchError::InvalidSnapshot(e.to_string()))?;
        snapshot.into_tree()
    }
}

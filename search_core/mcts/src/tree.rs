//! The search tree: ask for parents (UCT with progressive widening and virtual loss), tell
//! results, and answer the lineage queries a proposer needs.

use crate::node::{Node, NodeId, NodeStatus, NodeView};
use crate::{SearchConfig, SearchError, SplitMix64};

/// An MCTS tree over kernel revisions, minimising latency.
///
/// A passed candidate's reward is `ln(reference / latency)`: scale-free, 0 for the baseline,
/// positive when faster. Selection normalises rewards by the range seen so far, so the
/// exploration constant does not depend on the kernel's absolute speed.
#[derive(Clone, Debug, PartialEq)]
pub struct Tree {
    pub(crate) config: SearchConfig,
    pub(crate) reference_latency_us: f64,
    pub(crate) rng: SplitMix64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) reward_min: f64,
    pub(crate) reward_max: f64,
    pub(crate) best: Option<NodeId>,
}

pub(crate) const ROOT: NodeId = 0;

impl Tree {
    /// A tree holding only the root, the eager baseline measured at `reference_latency_us`.
    pub fn new(config: SearchConfig, reference_latency_us: f64) -> Result<Self, SearchError> {
        config.validate()?;
        check_latency("reference_latency_us", reference_latency_us)?;
        let mut root = Node::new(None, 0, NodeStatus::Root);
        root.latency_us = Some(reference_latency_us);
        root.visits = 1;
        root.passed = 1;
        root.best_reward = Some(0.0);
        let rng = SplitMix64::new(config.seed);
        Ok(Self {
            config,
            reference_latency_us,
            rng,
            nodes: vec![root],
            reward_min: 0.0,
            reward_max: 0.0,
            best: None,
        })
    }

    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    pub fn reference_latency_us(&self) -> f64 {
        self.reference_latency_us
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        false // the root always exists
    }

    /// Picks `n` parents to expand (a node may repeat) and puts a virtual loss on each path, so
    /// parallel evaluators spread over the tree. Undo an unused pick with [`Tree::release`].
    pub fn ask(&mut self, n: usize) -> Vec<NodeId> {
        (0..n)
            .map(|_| {
                let parent = self.select();
                self.nodes[parent as usize].reserved += 1;
                self.add_in_flight(parent, 1);
                parent
            })
            .collect()
    }

    /// Gives back a parent returned by [`Tree::ask`] that will not be expanded.
    pub fn release(&mut self, parent: NodeId) -> Result<(), SearchError> {
        let node = self.node_ref(parent)?;
        if node.reserved == 0 {
            return Err(SearchError::InvalidState(format!(
                "node {parent} has no parent pick from ask to release"
            )));
        }
        self.nodes[parent as usize].reserved -= 1;
        self.add_in_flight(parent, -1);
        Ok(())
    }

    /// Adds a pending candidate under `parent`, consuming one pick of `ask` for it if any (else
    /// the virtual loss is applied now).
    pub fn add_child(&mut self, parent: NodeId) -> Result<NodeId, SearchError> {
        let node = self.node_ref(parent)?;
        if !node.status.is_expandable() {
            let status = status_name(node.status);
            return Err(SearchError::InvalidState(format!(
                "node {parent} is {status}; only the root and passed nodes can be revised"
            )));
        }
        let depth = node.depth + 1;
        let reserved = node.reserved > 0;
        let child = NodeId::try_from(self.nodes.len()).map_err(|_| {
            SearchError::InvalidState("the tree holds the maximum number of nodes".into())
        })?;
        let parent_node = &mut self.nodes[parent as usize];
        if reserved {
            parent_node.reserved -= 1;
        }
        parent_node.expansions += 1;
        parent_node.children.push(child);
        if !reserved {
            self.add_in_flight(parent, 1);
        }
        let mut node = Node::new(Some(parent), depth, NodeStatus::Pending);
        node.in_flight = 1;
        self.nodes.push(node);
        Ok(child)
    }

    /// Records the evaluation of a pending node: `latency_us` (and optionally its `spread_us`)
    /// when it passed, neither when it failed. Releases its virtual loss.
    pub fn tell(
        &mut self,
        id: NodeId,
        passed: bool,
        latency_us: Option<f64>,
        spread_us: Option<f64>,
    ) -> Result<(), SearchError> {
        self.pending(id, "told")?;
        let latency = if passed {
            let Some(latency) = latency_us else {
                return Err(SearchError::InvalidArgument(format!(
                    "node {id} passed, so it needs a latency_us"
                )));
            };
            check_latency("latency_us", latency)?;
            Some(latency)
        } else {
            if latency_us.is_some() || spread_us.is_some() {
                return Err(SearchError::InvalidArgument(format!(
                    "node {id} failed, so it has no latency_us or spread_us"
                )));
            }
            None
        };
        if let Some(spread) = spread_us {
            if !(spread.is_finite() && spread >= 0.0) {
                return Err(SearchError::InvalidArgument(format!(
                    "spread_us must be finite and >= 0, got {spread}"
                )));
            }
        }
        self.add_in_flight(id, -1);
        let node = &mut self.nodes[id as usize];
        node.status = if passed {
            NodeStatus::Passed
        } else {
            NodeStatus::Failed
        };
        node.latency_us = latency;
        node.spread_us = spread_us;
        self.backpropagate(id, latency);
        Ok(())
    }

    /// The evaluation of a pending node was lost (e.g. its sandbox died): it becomes a failed
    /// child that was never evaluated, adds no visit, and releases its virtual loss.
    pub fn cancel(&mut self, id: NodeId) -> Result<(), SearchError> {
        self.pending(id, "cancelled")?;
        self.add_in_flight(id, -1);
        self.nodes[id as usize].status = NodeStatus::Cancelled;
        if let Some(parent) = self.nodes[id as usize].parent {
            self.nodes[parent as usize].expansions -= 1;
        }
        Ok(())
    }

    /// The passed candidate with the lowest latency (the earliest on a tie), if any.
    pub fn best(&self) -> Option<NodeId> {
        self.best
    }

    pub fn node(&self, id: NodeId) -> Result<NodeView, SearchError> {
        let node = self.node_ref(id)?;
        Ok(NodeView {
            id,
            parent: node.parent,
            depth: node.depth,
            status: node.status,
            latency_us: node.latency_us,
            spread_us: node.spread_us,
            visits: node.visits,
            value: (node.passed > 0).then(|| node.reward_sum / node.passed as f64),
            best_reward: node.best_reward,
            in_flight: node.in_flight,
        })
    }

    /// The parent, grandparent, ... up to the root, nearest first.
    pub fn ancestors(&self, id: NodeId) -> Result<Vec<NodeId>, SearchError> {
        let mut out = Vec::with_capacity(self.node_ref(id)?.depth as usize);
        let mut cursor = self.nodes[id as usize].parent;
        while let Some(parent) = cursor {
            out.push(parent);
            cursor = self.nodes[parent as usize].parent;
        }
        Ok(out)
    }

    /// The fastest passed node strictly below `id` (the earliest on a tie), if any.
    pub fn best_descendant(&self, id: NodeId) -> Result<Option<NodeId>, SearchError> {
        Ok(self.node_ref(id)?.best_below)
    }

    /// Failed (or cancelled) children of `id`'s parent other than `id`, oldest first.
    pub fn failed_siblings(&self, id: NodeId) -> Result<Vec<NodeId>, SearchError> {
        let Some(parent) = self.node_ref(id)?.parent else {
            return Ok(Vec::new());
        };
        let siblings = &self.nodes[parent as usize].children;
        Ok(siblings
            .iter()
            .copied()
            .filter(|&s| {
                s != id
                    && matches!(
                        self.nodes[s as usize].status,
                        NodeStatus::Failed | NodeStatus::Cancelled
                    )
            })
            .collect())
    }

    pub fn children(&self, id: NodeId) -> Result<Vec<NodeId>, SearchError> {
        Ok(self.node_ref(id)?.children.clone())
    }

    /// Reward of a latency: `ln(reference / latency)`.
    pub fn reward(&self, latency_us: f64) -> f64 {
        (self.reference_latency_us / latency_us).ln()
    }

    /// Descends from the root by UCT. At each node the options are its passed children (valued
    /// by their subtree's rewards) and, while progressive widening allows another child, revising
    /// the node itself (valued by its own reward); it stops at a node whose revision wins or that
    /// has no passed child.
    fn select(&mut self) -> NodeId {
        let c = self.config.exploration;
        let vl = self.config.virtual_loss;
        let lambda = self.config.max_weight;
        let range = self.reward_max - self.reward_min;
        let mut current = ROOT;
        let mut ties: Vec<NodeId> = Vec::new();
        loop {
            let node = &self.nodes[current as usize];
            let effective = node.visits as f64 + vl * f64::from(node.in_flight);
            let limit = (self.config.widen_k * effective.powf(self.config.widen_alpha)).max(1.0);
            let may_widen = f64::from(node.expansions + node.reserved + 1) <= limit;
            let log_parent = effective.ln();
            let mut best_score = f64::NEG_INFINITY;
            ties.clear();
            if may_widen {
                // Revising this node is one more option: its own reward stands in for its future
                // children, and the picks already made on it for their visits.
                let own = self.reward(node.latency_us.unwrap_or(self.reference_latency_us));
                let made = f64::from(node.expansions + 1);
                let made_effective = made + vl * f64::from(node.reserved);
                let own_part = if range > 0.0 {
                    (own - self.reward_min) / range
                } else {
                    0.0
                };
                best_score =
                    own_part * made / made_effective + c * (log_parent / made_effective).sqrt();
                ties.push(current);
            }
            for &child_id in &node.children {
                let child = &self.nodes[child_id as usize];
                if child.status != NodeStatus::Passed {
                    continue;
                }
                let visits = child.visits as f64;
                let child_effective = visits + vl * f64::from(child.in_flight);
                let (mean_part, best_part) = if range > 0.0 {
                    let best_reward = child.best_reward.unwrap_or(self.reward_min);
                    (
                        (child.reward_sum - child.passed as f64 * self.reward_min) / range,
                        (best_reward - self.reward_min) / range,
                    )
                } else {
                    (0.0, 0.0)
                };
                let q =
                    ((1.0 - lambda) * mean_part + lambda * best_part * visits) / child_effective;
                let score = q + c * (log_parent / child_effective).sqrt();
                if score > best_score {
                    best_score = score;
                    ties.clear();
                    ties.push(child_id);
                } else if score == best_score {
                    ties.push(child_id);
                }
            }
            let chosen = match ties.len() {
                0 => return current,
                1 => ties[0],
                n => ties[self.rng.below(n)],
            };
            if chosen == current {
                return current;
            }
            current = chosen;
        }
    }

    fn backpropagate(&mut self, id: NodeId, latency: Option<f64>) {
        let reward = latency.map(|l| self.reward(l));
        if let Some(r) = reward {
            self.reward_min = self.reward_min.min(r);
            self.reward_max = self.reward_max.max(r);
            let is_better = |best: Option<NodeId>, nodes: &[Node]| match best {
                None => true,
                Some(b) => nodes[b as usize]
                    .latency_us
                    .is_some_and(|bl| latency.is_some_and(|l| l < bl)),
            };
            if is_better(self.best, &self.nodes) {
                self.best = Some(id);
            }
            let mut cursor = self.nodes[id as usize].parent;
            while let Some(ancestor) = cursor {
                if is_better(self.nodes[ancestor as usize].best_below, &self.nodes) {
                    self.nodes[ancestor as usize].best_below = Some(id);
                }
                cursor = self.nodes[ancestor as usize].parent;
            }
        }
        let mut cursor = Some(id);
        while let Some(current) = cursor {
            let node = &mut self.nodes[current as usize];
            node.visits += 1;
            if let Some(r) = reward {
                node.passed += 1;
                node.reward_sum += r;
                node.best_reward = Some(node.best_reward.map_or(r, |b| b.max(r)));
            }
            cursor = node.parent;
        }
    }

    fn add_in_flight(&mut self, id: NodeId, delta: i32) {
        let mut cursor = Some(id);
        while let Some(current) = cursor {
            let node = &mut self.nodes[current as usize];
            node.in_flight = node.in_flight.wrapping_add_signed(delta);
            cursor = node.parent;
        }
    }

    fn pending(&self, id: NodeId, verb: &str) -> Result<(), SearchError> {
        let status = self.node_ref(id)?.status;
        if status == NodeStatus::Pending {
            Ok(())
        } else {
            Err(SearchError::InvalidState(format!(
                "node {id} is {}; only a pending node can be {verb}",
                status_name(status)
            )))
        }
    }

    pub(crate) fn node_ref(&self, id: NodeId) -> Result<&Node, SearchError> {
        self.nodes
            .get(id as usize)
            .ok_or(SearchError::UnknownNode(u64::from(id)))
    }
}

pub(crate) fn status_name(status: NodeStatus) -> &'static str {
    match status {
        NodeStatus::Root => "the root",
        NodeStatus::Pending => "pending",
        NodeStatus::Passed => "passed",
        NodeStatus::Failed => "failed",
        NodeStatus::Cancelled => "cancelled",
    }
}

fn check_latency(name: &str, value: f64) -> Result<(), SearchError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(SearchError::InvalidArgument(format!(
            "{name} must be a finite number > 0, got {value}"
        )))
    }
}

//! The search tree: ask for parents (UCT with progressive widening and virtual loss), tell
//! results, and answer the lineage queries a proposer needs.

use crate::node::{Node, NodeId, NodeStatus, NodeView};
use crate::selection::Arms;
use crate::{SearchConfig, SearchError, SplitMix64};

/// An MCTS tree over kernel revisions, minimising latency.
///
/// A passed candidate's reward is `ln(reference / latency)`: scale-free, 0 for the baseline,
/// positive when faster. Selection normalises rewards by the range seen so far, so the
/// exploration constant does not depend on the kernel's absolute speed.
#[derive(Clone, Debug)]
pub struct Tree {
    pub(crate) config: SearchConfig,
    pub(crate) reference_latency_us: f64,
    pub(crate) rng: SplitMix64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) reward_min: f64,
    pub(crate) reward_max: f64,
    pub(crate) best: Option<NodeId>,
    /// Counts changes of `reward_min`/`reward_max`: child values computed in an older epoch
    /// used another normalisation and are recomputed before they are read.
    pub(crate) epoch: u64,
}

/// Trees are equal when their search state is; the selection caches are derived from it.
impl PartialEq for Tree {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config
            && self.reference_latency_us == other.reference_latency_us
            && self.rng == other.rng
            && self.nodes == other.nodes
            && self.reward_min == other.reward_min
            && self.reward_max == other.reward_max
            && self.best == other.best
    }
}

pub(crate) const ROOT: NodeId = 0;

impl Tree {
    /// A tree holding only the root, the eager baseline measured at `reference_latency_us`.
    pub fn new(config: SearchConfig, reference_latency_us: f64) -> Result<Self, SearchError> {
        config.validate()?;
        check_latency("reference_latency_us", reference_latency_us)?;
        let mut root = Node::new(None, 0, NodeStatus::Root, 0);
        root.latency_us = Some(reference_latency_us);
        root.visits = 1;
        root.passed = 1;
        root.best_reward = Some(0.0);
        let rng = SplitMix64::new(config.seed);
        let mut tree = Self {
            config,
            reference_latency_us,
            rng,
            nodes: vec![root],
            reward_min: 0.0,
            reward_max: 0.0,
            best: None,
            epoch: 0,
        };
        tree.nodes[ROOT as usize].own_reward = tree.reward(reference_latency_us);
        Ok(tree)
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
        let slot = parent_node.arms.push(child, 0.0);
        if !reserved {
            self.add_in_flight(parent, 1);
        }
        let mut node = Node::new(Some(parent), depth, NodeStatus::Pending, self.epoch);
        node.in_flight = 1;
        node.slot = slot;
        self.nodes.push(node);
        self.refresh_arm(child);
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
        let own_reward = latency.map(|l| self.reward(l));
        let node = &mut self.nodes[id as usize];
        node.status = if passed {
            NodeStatus::Passed
        } else {
            NodeStatus::Failed
        };
        node.latency_us = latency;
        node.spread_us = spread_us;
        if let Some(own) = own_reward {
            node.own_reward = own;
        }
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
        Ok(self.nodes[parent as usize]
            .arms
            .ids()
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
        Ok(self.node_ref(id)?.arms.ids().collect())
    }

    /// Reward of a latency: `ln(reference / latency)`.
    pub fn reward(&self, latency_us: f64) -> f64 {
        (self.reference_latency_us / latency_us).ln()
    }

    /// Descends from the root by UCT. At each node the options are its passed children (valued
    /// by their subtree's rewards) and, while progressive widening allows another child, revising
    /// the node itself (valued by its own reward); it stops at a node whose revision wins or that
    /// has no passed child. Exact ties are broken by the PRNG, in the order [node, children...].
    fn select(&mut self) -> NodeId {
        let c = self.config.exploration;
        let vl = self.config.virtual_loss;
        let widen_k = self.config.widen_k;
        let alpha = self.widen_alpha();
        let range = self.reward_max - self.reward_min;
        let mut current = ROOT;
        loop {
            self.refresh_arms(current);
            let node = &mut self.nodes[current as usize];
            let effective = node.visits as f64 + vl * f64::from(node.in_flight);
            let wanted = f64::from(node.expansions + node.reserved + 1);
            let (log_parent, may_widen) =
                node.cache.parent_terms(effective, alpha, widen_k, wanted);
            let mut floor = f64::NEG_INFINITY;
            if may_widen {
                // Revising this node is one more option: its own reward stands in for its future
                // children, and the picks already made on it for their visits.
                let made = f64::from(node.expansions + 1);
                let made_effective = made + vl * f64::from(node.reserved);
                let own_part = if range > 0.0 {
                    (node.own_reward - self.reward_min) / range
                } else {
                    0.0
                };
                floor = own_part * made / made_effective + c * (log_parent / made_effective).sqrt();
            }
            let scan = node.arms.scan(log_parent, c, floor, may_widen);
            let ties = scan.child_ties + usize::from(scan.own_tied);
            let child_tie = match ties {
                0 => return current,
                1 if scan.own_tied => return current,
                1 => 0,
                n => {
                    let pick = self.rng.below(n);
                    match (scan.own_tied, pick) {
                        (true, 0) => return current,
                        (true, pick) => pick - 1,
                        (false, pick) => pick,
                    }
                }
            };
            let arms = &self.nodes[current as usize].arms;
            let index = if child_tie == 0 {
                scan.first
            } else {
                arms.nth_tie(&scan, log_parent, c, child_tie)
            };
            current = arms.id(index);
        }
    }

    /// The widening exponent now: `widen_alpha`, or annealed towards `widen_alpha_end` over the
    /// first `widen_anneal_evaluations` evaluations.
    fn widen_alpha(&self) -> f64 {
        let start = self.config.widen_alpha;
        match self.config.widen_alpha_end {
            None => start,
            Some(end) => {
                let span = self.config.widen_anneal_evaluations;
                let done = (self.nodes[ROOT as usize].visits - 1).min(span);
                start + (end - start) * (done as f64 / span as f64)
            }
        }
    }

    /// The numerator of a child's `Q` (its normalised best and mean rewards, weighted), so
    /// that `Q = numerator / effective visits`; NaN unless the child passed.
    fn q_numerator(&self, node: &Node) -> f64 {
        if node.status != NodeStatus::Passed {
            return f64::NAN;
        }
        let lambda = self.config.max_weight;
        let visits = node.visits as f64;
        let range = self.reward_max - self.reward_min;
        let (mean_part, best_part) = if range > 0.0 {
            let best_reward = node.best_reward.unwrap_or(self.reward_min);
            (
                (node.reward_sum - node.passed as f64 * self.reward_min) / range,
                (best_reward - self.reward_min) / range,
            )
        } else {
            (0.0, 0.0)
        };
        (1.0 - lambda) * mean_part + lambda * best_part * visits
    }

    fn effective_visits(&self, node: &Node) -> f64 {
        node.visits as f64 + self.config.virtual_loss * f64::from(node.in_flight)
    }

    /// Brings the copy of `id`'s statistics in its parent's arms up to date after its rewards
    /// or visits changed (a stale parent is recomputed in full when selection next reads it).
    fn refresh_arm(&mut self, id: NodeId) {
        let node = &self.nodes[id as usize];
        let Some(parent) = node.parent else {
            return;
        };
        if self.nodes[parent as usize].arms.epoch != self.epoch {
            return;
        }
        let numerator = self.q_numerator(node);
        self.nodes[id as usize].cache.q_numerator = numerator;
        self.set_arm(id, parent, numerator);
    }

    /// As [`Tree::refresh_arm`] when only `id`'s virtual losses changed: its `Q` numerator stands.
    fn refresh_arm_in_flight(&mut self, id: NodeId) {
        let node = &self.nodes[id as usize];
        let Some(parent) = node.parent else {
            return;
        };
        if self.nodes[parent as usize].arms.epoch != self.epoch {
            return;
        }
        self.set_arm(id, parent, node.cache.q_numerator);
    }

    fn set_arm(&mut self, id: NodeId, parent: NodeId, numerator: f64) {
        let node = &self.nodes[id as usize];
        let (slot, effective) = (node.slot, self.effective_visits(node));
        self.nodes[parent as usize]
            .arms
            .set(slot, effective, numerator / effective);
    }

    /// Recomputes every arm of `id` if they were computed under another reward normalisation.
    fn refresh_arms(&mut self, id: NodeId) {
        if self.nodes[id as usize].arms.epoch == self.epoch {
            return;
        }
        let mut arms = std::mem::replace(&mut self.nodes[id as usize].arms, Arms::new(self.epoch));
        for arm in arms.iter_mut() {
            let child = &self.nodes[arm.id as usize];
            let numerator = self.q_numerator(child);
            arm.effective = self.effective_visits(child);
            arm.value = numerator / arm.effective;
            self.nodes[arm.id as usize].cache.q_numerator = numerator;
        }
        arms.epoch = self.epoch;
        self.nodes[id as usize].arms = arms;
    }

    fn backpropagate(&mut self, id: NodeId, latency: Option<f64>) {
        let reward = latency.map(|l| self.reward(l));
        if let Some(r) = reward {
            if r < self.reward_min || r > self.reward_max {
                self.epoch += 1;
            }
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
            self.refresh_arm(current);
        }
    }

    fn add_in_flight(&mut self, id: NodeId, delta: i32) {
        let mut cursor = Some(id);
        while let Some(current) = cursor {
            let node = &mut self.nodes[current as usize];
            node.in_flight = node.in_flight.wrapping_add_signed(delta);
            cursor = node.parent;
            self.refresh_arm_in_flight(current);
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

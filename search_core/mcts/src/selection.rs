//! The data one UCT step reads, kept where it is cheap to read.
//!
//! Selection descends 60–90 levels on a large tree and scores every child at each level. Reading
//! each child's [`Node`](crate::node::Node) costs a cache miss per child, so every node keeps
//! the terms of its children's scores in one contiguous array ([`Arms`]), updated whenever a
//! child's statistics change, and caches its own `ln N` and widening limit ([`WidenCache`]).
//! Both hold derived values only: every value is computed by the same expression, in the same
//! order, as an uncached computation would, so the choices are bit for bit the same.

use crate::node::NodeId;

/// Relative widening of the rejection test in [`Arms::scan`]; a score's rounding error is a
/// few units of 2⁻⁵³.
const REJECT_SLACK: f64 = 1e-9;

/// Smallest gap the rejection test trusts: its square and products stay normal numbers, whose
/// rounding is relative.
const MIN_MARGIN: f64 = 1e-100;

/// One child as selection sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Arm {
    /// Exploitation term `Q` of the child; NaN when the child is not passed, so its score is NaN,
    /// which neither beats nor ties any score (exactly as skipping the child).
    pub value: f64,
    /// Visits plus weighted virtual losses of the child.
    pub effective: f64,
    pub id: NodeId,
}

/// What a scan found: the best score and every option that reached it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    pub best: f64,
    /// Whether revising the node itself is among the best (it was offered and no child beat it).
    pub own_tied: bool,
    /// Children scoring exactly `best`.
    pub child_ties: usize,
    /// Index of the first child scoring `best` (meaningful when `child_ties > 0`).
    pub first: usize,
}

/// A node's children in creation order, with the terms of their UCT scores.
#[derive(Clone, Debug)]
pub(crate) struct Arms {
    arms: Vec<Arm>,
    /// The reward normalisation epoch the values were computed in; [`Arms::STALE`] after a
    /// restore. Stale values are recomputed before the next scan.
    pub epoch: u64,
}

impl Arms {
    pub const STALE: u64 = u64::MAX;

    pub fn new(epoch: u64) -> Self {
        Self {
            arms: Vec::new(),
            epoch,
        }
    }

    pub fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.arms.iter().map(|arm| arm.id)
    }

    pub fn id(&self, index: usize) -> NodeId {
        self.arms[index].id
    }

    /// Appends a new child; its value stays NaN until it passes.
    pub fn push(&mut self, id: NodeId, effective: f64) -> u32 {
        let slot = u32::try_from(self.arms.len()).expect("fewer children than node ids");
        self.arms.push(Arm {
            value: f64::NAN,
            effective,
            id,
        });
        slot
    }

    pub fn set(&mut self, slot: u32, effective: f64, value: f64) {
        let arm = &mut self.arms[slot as usize];
        arm.effective = effective;
        arm.value = value;
    }

    /// Scores every child, `value + c·sqrt(log_parent / effective)`, against `floor` (the
    /// score of revising the node itself, or −∞ when widening forbids it). Ties are kept in the
    /// order an option list [own, children...] would have them.
    ///
    /// Most children cannot reach the best score seen so far, and that is decidable without the
    /// division and square root: for `best > v`, `v + c·sqrt(L/e) < best ⇔ c²·L < (best − v)²·e`.
    /// The test is widened by [`REJECT_SLACK`], orders of magnitude above the rounding of a
    /// score, so it never passes over a child whose exact score would beat or tie the best; any
    /// child it cannot rule out is scored exactly as before.
    pub fn scan(&self, log_parent: f64, c: f64, floor: f64, own_offered: bool) -> Scan {
        let c_squared = c * c;
        let bonus_squared = c_squared * log_parent * (1.0 + 4.0 * REJECT_SLACK);
        // The relative error argument needs normal numbers (or an exact zero bonus).
        let can_reject = c == 0.0
            || log_parent == 0.0
            || (c_squared.is_normal()
                && (c_squared * log_parent).is_normal()
                && bonus_squared.is_finite());
        let mut best = floor;
        let mut beaten = false;
        let mut child_ties = 0;
        let mut first = 0;
        for (index, arm) in self.arms.iter().enumerate() {
            if can_reject {
                let margin =
                    (best - arm.value) * (1.0 - REJECT_SLACK) - REJECT_SLACK * arm.value.abs();
                if margin > MIN_MARGIN && bonus_squared < margin * margin * arm.effective {
                    continue;
                }
            }
            if arm.value.is_nan() {
                continue;
            }
            let score = arm.value + c * (log_parent / arm.effective).sqrt();
            if score > best {
                best = score;
                beaten = true;
                child_ties = 1;
                first = index;
            } else if score == best {
                if child_ties == 0 {
                    first = index;
                }
                child_ties += 1;
            }
        }
        Scan {
            best,
            own_tied: own_offered && !beaten,
            child_ties,
            first,
        }
    }

    /// The index of the `nth` child (0-based) scoring exactly `scan.best`.
    pub fn nth_tie(&self, scan: &Scan, log_parent: f64, c: f64, nth: usize) -> usize {
        let mut seen = 0;
        for (index, arm) in self.arms.iter().enumerate().skip(scan.first) {
            if arm.value + c * (log_parent / arm.effective).sqrt() == scan.best {
                if seen == nth {
                    return index;
                }
                seen += 1;
            }
        }
        unreachable!("a scan counted more ties than the arms hold")
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Arm> {
        self.arms.iter_mut()
    }
}

/// Two nodes are equal when their children are: the scores are derived from the tree.
impl PartialEq for Arms {
    fn eq(&self, other: &Self) -> bool {
        self.ids().eq(other.ids())
    }
}

/// Values a node caches for selection: as a parent, `ln N` and its widening limit
/// `max(1, k·N^α)` for the last `N` and `α` it was asked about; as a child, the numerator of
/// its `Q`. `N` changes only when the subtree's visits or virtual losses do, so selections
/// through an unchanged node skip `ln` and `powf`, and a changed `N` mostly skips `powf` too.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeCache {
    log_key: u64,
    log_effective: f64,
    limit_key: f64,
    alpha_key: u64,
    limit: f64,
    /// `Q · effective` of this node as a child (NaN unless passed), valid while its parent's
    /// arms are of the current epoch.
    pub q_numerator: f64,
}

/// Relative error allowed for `powf` and the product `k·N^α` when a widening decision is taken
/// from a cached limit; libm's `pow` is within one unit of 2⁻⁵³.
const LIMIT_SLACK: f64 = 1e-9;

impl Default for NodeCache {
    fn default() -> Self {
        Self {
            // No computed `N` is NaN, so the first lookups always compute.
            log_key: f64::NAN.to_bits(),
            log_effective: 0.0,
            limit_key: f64::NAN,
            alpha_key: 0,
            limit: 0.0,
            q_numerator: f64::NAN,
        }
    }
}

/// A cache of pure functions never makes two trees differ.
impl PartialEq for NodeCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl NodeCache {
    /// `ln effective`, and whether `wanted` children fit under `max(1, widen_k·effective^alpha)`
    /// (`wanted <= limit`, the limit computed exactly as written).
    pub fn parent_terms(
        &mut self,
        effective: f64,
        alpha: f64,
        widen_k: f64,
        wanted: f64,
    ) -> (f64, bool) {
        if self.log_key != effective.to_bits() {
            self.log_key = effective.to_bits();
            self.log_effective = effective.ln();
        }
        (
            self.log_effective,
            self.may_widen(effective, alpha, widen_k, wanted),
        )
    }

    fn may_widen(&mut self, effective: f64, alpha: f64, widen_k: f64, wanted: f64) -> bool {
        if wanted <= 1.0 {
            return true; // the limit is at least 1
        }
        if self.alpha_key == alpha.to_bits() {
            if effective == self.limit_key {
                return wanted <= self.limit;
            }
            // k·N^α does not decrease with N (α >= 0), so a cached limit bounds the limit at
            // another N, up to the rounding of `powf` and the product.
            if effective > self.limit_key && wanted <= self.limit * (1.0 - LIMIT_SLACK) {
                return true;
            }
            if effective < self.limit_key && wanted > self.limit * (1.0 + LIMIT_SLACK) {
                return false;
            }
        }
        self.limit_key = effective;
        self.alpha_key = alpha.to_bits();
        self.limit = (widen_k * effective.powf(alpha)).max(1.0);
        wanted <= self.limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arms(values: &[(f64, f64)]) -> Arms {
        let mut arms = Arms::new(0);
        for (id, &(value, effective)) in values.iter().enumerate() {
            let slot = arms.push(id as NodeId, effective);
            arms.set(slot, effective, value);
        }
        arms
    }

    #[test]
    fn ties_keep_the_order_of_the_options() {
        // Scores with c = 0 are the values themselves.
        let arms = arms(&[
            (0.5, 1.0),
            (0.7, 1.0),
            (f64::NAN, 1.0),
            (0.7, 2.0),
            (0.7, 1.0),
        ]);
        let scan = arms.scan(1.0, 0.0, 0.7, true);
        assert!(scan.own_tied);
        assert_eq!((scan.child_ties, scan.first), (3, 1));
        assert_eq!(arms.nth_tie(&scan, 1.0, 0.0, 1), 3);
        assert_eq!(arms.nth_tie(&scan, 1.0, 0.0, 2), 4);
        let beaten = arms.scan(1.0, 0.0, 0.6, true);
        assert!(!beaten.own_tied && beaten.child_ties == 3);
    }

    #[test]
    fn children_that_are_not_passed_never_score() {
        let arms = arms(&[(f64::NAN, 1.0), (f64::NAN, 3.0)]);
        let scan = arms.scan(2.0, 1.0, f64::NEG_INFINITY, false);
        assert_eq!(scan.child_ties, 0);
        assert!(!scan.own_tied);
    }

    #[test]
    fn widening_decisions_match_the_limit_computed_each_time() {
        let mut cache = NodeCache::default();
        let mut rng = crate::SplitMix64::new(7);
        for _ in 0..20_000 {
            let effective = 1.0 + (rng.next_u64() % 400) as f64 + [0.0, 0.5, 0.25][rng.below(3)];
            let alpha = [0.0, 0.3, 0.5, 1.0][rng.below(4)];
            let wanted = 1.0 + (rng.next_u64() % 30) as f64;
            let limit = (2.5 * effective.powf(alpha)).max(1.0);
            let (log, may_widen) = cache.parent_terms(effective, alpha, 2.5, wanted);
            assert_eq!(log.to_bits(), effective.ln().to_bits());
            assert_eq!(
                may_widen,
                wanted <= limit,
                "N={effective} alpha={alpha} m={wanted}"
            );
        }
    }

    #[test]
    fn the_rejection_test_never_changes_a_scan() {
        // Against a scan that scores every child: values on a coarse grid make exact ties and
        // near-ties common; exploration constants span zero, tiny and huge.
        let mut rng = crate::SplitMix64::new(11);
        for round in 0..5_000 {
            let count = 1 + rng.below(12);
            let grid = [1.0, 0.5, 1e-3][round % 3];
            let values: Vec<(f64, f64)> = (0..count)
                .map(|_| {
                    let value = if rng.below(6) == 0 {
                        f64::NAN
                    } else {
                        (rng.below(8) as f64) * grid / 7.0
                    };
                    (value, 1.0 + rng.below(6) as f64 + [0.0, 0.5][rng.below(2)])
                })
                .collect();
            let arms = arms(&values);
            let c = [0.0, 0.1, 1.0, 1e-160, 1e200][rng.below(5)];
            let log_parent = [0.0, 0.7, 3.2][rng.below(3)];
            let own = rng.below(2) == 0;
            let floor = if own {
                (rng.below(8) as f64) * grid / 7.0
            } else {
                f64::NEG_INFINITY
            };
            let scan = arms.scan(log_parent, c, floor, own);
            let mut best = floor;
            let mut ties: Vec<Option<usize>> = if own { vec![None] } else { vec![] };
            for (index, &(value, effective)) in values.iter().enumerate() {
                if value.is_nan() {
                    continue;
                }
                let score = value + c * (log_parent / effective).sqrt();
                if score > best {
                    best = score;
                    ties = vec![Some(index)];
                } else if score == best {
                    ties.push(Some(index));
                }
            }
            let children: Vec<usize> = ties.iter().flatten().copied().collect();
            assert_eq!(scan.own_tied, ties.first() == Some(&None));
            assert_eq!(scan.child_ties, children.len());
            for (nth, &index) in children.iter().enumerate() {
                assert_eq!(arms.nth_tie(&scan, log_parent, c, nth), index);
            }
        }
    }
}

//! Search parameters, fixed for the life of a tree.

use serde::{Deserialize, Serialize};

use crate::SearchError;

/// Largest count an `f64` holds exactly, so the annealing fraction rounds as in Python.
const MAX_ANNEAL_EVALUATIONS: u64 = 1 << 53;

/// Parameters of selection. Values are scale-free: rewards are normalised to `[0, 1]` by the
/// range seen so far, so `exploration` means the same on a 5 µs kernel and a 50 ms one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchConfig {
    /// Seeds the tie-breaking PRNG.
    pub seed: u64,
    /// UCT exploration constant `c` in `Q + c·sqrt(ln N_parent / N_child)`.
    pub exploration: f64,
    /// Progressive widening: a node with `N` visits may have at most `max(1, k·N^α)` children.
    pub widen_k: f64,
    /// Progressive widening exponent `α` in `[0, 1]` (its starting value when annealed).
    pub widen_alpha: f64,
    /// When set, `α` moves linearly from `widen_alpha` to this value over the first
    /// `widen_anneal_evaluations` evaluations, then stays there: e.g. wide early, while little
    /// is known, and deep later. `None` keeps `α` fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub widen_alpha_end: Option<f64>,
    /// Evaluations (passed or failed results) over which `α` is annealed; at least 1 when
    /// `widen_alpha_end` is set, 0 otherwise.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub widen_anneal_evaluations: u64,
    /// Weight of one in-flight evaluation, counted as a visit with the worst reward.
    pub virtual_loss: f64,
    /// Weight in `[0, 1]` of a subtree's best reward against its mean reward in a node's value;
    /// optimisation wants the best kernel, not the best average, so some weight belongs on the max.
    pub max_weight: f64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            exploration: 0.1,
            widen_k: 4.0,
            widen_alpha: 0.3,
            widen_alpha_end: None,
            widen_anneal_evaluations: 0,
            virtual_loss: 1.0,
            max_weight: 1.0,
        }
    }
}

impl SearchConfig {
    pub fn validate(&self) -> Result<(), SearchError> {
        let check = |name: &str, value: f64, ok: bool, domain: &str| {
            if value.is_finite() && ok {
                Ok(())
            } else {
                Err(SearchError::InvalidArgument(format!(
                    "{name} must be {domain}, got {value}"
                )))
            }
        };
        check(
            "exploration",
            self.exploration,
            self.exploration >= 0.0,
            "a finite number >= 0",
        )?;
        check(
            "widen_k",
            self.widen_k,
            self.widen_k > 0.0,
            "a finite number > 0",
        )?;
        check(
            "widen_alpha",
            self.widen_alpha,
            (0.0..=1.0).contains(&self.widen_alpha),
            "in [0, 1]",
        )?;
        check(
            "virtual_loss",
            self.virtual_loss,
            self.virtual_loss >= 0.0,
            "a finite number >= 0",
        )?;
        check(
            "max_weight",
            self.max_weight,
            (0.0..=1.0).contains(&self.max_weight),
            "in [0, 1]",
        )?;
        if self.widen_anneal_evaluations > MAX_ANNEAL_EVALUATIONS {
            return Err(SearchError::InvalidArgument(format!(
                "widen_anneal_evaluations must be an integer in [0, 2**53], got {}",
                self.widen_anneal_evaluations
            )));
        }
        match self.widen_alpha_end {
            Some(end) => {
                check(
                    "widen_alpha_end",
                    end,
                    (0.0..=1.0).contains(&end),
                    "in [0, 1]",
                )?;
                if self.widen_anneal_evaluations == 0 {
                    return Err(SearchError::InvalidArgument(
                        "widen_anneal_evaluations must be >= 1 when widen_alpha_end is set, got 0"
                            .into(),
                    ));
                }
            }
            None if self.widen_anneal_evaluations != 0 => {
                return Err(SearchError::InvalidArgument(format!(
                    "widen_anneal_evaluations must be 0 without widen_alpha_end, got {}",
                    self.widen_anneal_evaluations
                )));
            }
            None => {}
        }
        Ok(())
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

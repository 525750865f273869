"""Search parameters, fixed for the life of a tree."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from search_core.errors import InvalidArgumentError

_U64_MAX = 2**64 - 1
_EXACT_INTEGER_MAX = 2**53
"""Largest count a float holds exactly: the annealing fraction rounds the same in Rust and Python."""


@dataclass(frozen=True)
class SearchConfig:
    """Parameters of selection (UCT with progressive widening and virtual loss).

    Rewards are ``ln(reference / latency)`` normalised to ``[0, 1]`` by the range seen so far, so
    the same ``exploration`` suits a 5 µs kernel and a 50 ms one.
    """

    seed: int = 0
    """Seeds the PRNG that breaks ties between equally scored children."""
    exploration: float = 0.1
    """UCT constant ``c`` in ``Q + c·sqrt(ln N_parent / N_child)``."""
    widen_k: float = 4.0
    """Progressive widening: a node with ``N`` visits has at most ``max(1, k·N^α)`` children."""
    widen_alpha: float = 0.3
    """Progressive widening exponent ``α`` in ``[0, 1]`` (its starting value when annealed)."""
    virtual_loss: float = 1.0
    """Weight of one in-flight evaluation, counted as a visit with the worst reward."""
    max_weight: float = 1.0
    """Weight in ``[0, 1]`` of a subtree's best reward against its mean reward."""
    widen_alpha_end: float | None = None
    """When set, ``α`` moves linearly from ``widen_alpha`` to this value over the first
    ``widen_anneal_evaluations`` evaluations, then stays there (e.g. wide early, while little is
    known, and deep later). ``None`` keeps ``α`` fixed."""
    widen_anneal_evaluations: int = 0
    """Evaluations (passed or failed results) over which ``α`` is annealed: at least 1 when
    ``widen_alpha_end`` is set, 0 otherwise."""

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= _U64_MAX:
            raise InvalidArgumentError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        _check("exploration", self.exploration, lambda v: v >= 0, "a finite number >= 0")
        _check("widen_k", self.widen_k, lambda v: v > 0, "a finite number > 0")
        _check("widen_alpha", self.widen_alpha, lambda v: 0 <= v <= 1, "in [0, 1]")
        _check("virtual_loss", self.virtual_loss, lambda v: v >= 0, "a finite number >= 0")
        _check("max_weight", self.max_weight, lambda v: 0 <= v <= 1, "in [0, 1]")
        evaluations = self.widen_anneal_evaluations
        is_count = isinstance(evaluations, int) and not isinstance(evaluations, bool)
        if not is_count or not 0 <= evaluations <= _EXACT_INTEGER_MAX:
            raise InvalidArgumentError(
                f"widen_anneal_evaluations must be an integer in [0, 2**53], got {evaluations!r}"
            )
        if self.widen_alpha_end is not None:
            _check("widen_alpha_end", self.widen_alpha_end, lambda v: 0 <= v <= 1, "in [0, 1]")
            if evaluations == 0:
                raise InvalidArgumentError("widen_anneal_evaluations must be >= 1 when widen_alpha_end is set, got 0")
        elif evaluations != 0:
            raise InvalidArgumentError(f"widen_anneal_evaluations must be 0 without widen_alpha_end, got {evaluations}")

    def widen_alpha_after(self, evaluations: int) -> float:
        """The widening exponent once ``evaluations`` results have been told."""
        if self.widen_alpha_end is None:
            return self.widen_alpha
        span = self.widen_anneal_evaluations
        return self.widen_alpha + (self.widen_alpha_end - self.widen_alpha) * (min(evaluations, span) / span)


def _check(name: str, value: object, ok: Callable[[float], bool], domain: str) -> None:
    valid = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and ok(value)
    if not valid:
        raise InvalidArgumentError(f"{name} must be {domain}, got {value!r}")

"""Search parameters, fixed for the life of a tree."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from search_core.errors import InvalidArgumentError

_U64_MAX = 2**64 - 1


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
    """Progressive widening exponent ``α`` in ``[0, 1]``."""
    virtual_loss: float = 1.0
    """Weight of one in-flight evaluation, counted as a visit with the worst reward."""
    max_weight: float = 1.0
    """Weight in ``[0, 1]`` of a subtree's best reward against its mean reward."""

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= _U64_MAX:
            raise InvalidArgumentError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        _check("exploration", self.exploration, lambda v: v >= 0, "a finite number >= 0")
        _check("widen_k", self.widen_k, lambda v: v > 0, "a finite number > 0")
        _check("widen_alpha", self.widen_alpha, lambda v: 0 <= v <= 1, "in [0, 1]")
        _check("virtual_loss", self.virtual_loss, lambda v: v >= 0, "a finite number >= 0")
        _check("max_weight", self.max_weight, lambda v: 0 <= v <= 1, "in [0, 1]")


def _check(name: str, value: object, ok: Callable[[float], bool], domain: str) -> None:
    valid = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and ok(value)
    if not valid:
        raise InvalidArgumentError(f"{name} must be {domain}, got {value!r}")

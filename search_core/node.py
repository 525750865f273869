"""A read-only view of one node of the search tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

NodeStatus = Literal["root", "pending", "passed", "failed"]


@dataclass(frozen=True)
class NodeView:
    """One candidate: its result and the statistics of its subtree.

    ``value`` and ``best_reward`` are rewards ``ln(reference / latency)`` (0 is eager speed,
    positive is faster): the mean over passed evaluations in the subtree and the best one.
    """

    id: int
    parent: int | None
    depth: int
    status: NodeStatus
    latency_us: float | None
    spread_us: float | None
    visits: int
    """Evaluations in the subtree, failures included."""
    value: float | None
    in_flight: int
    """Evaluations in flight in the subtree, plus unexpanded parent picks from ``ask``."""
    cancelled: bool = False
    """A failed node whose evaluation was lost rather than rejected."""
    best_reward: float | None = None

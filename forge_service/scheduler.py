"""Which cards a run searches and how much budget each gets: where the model's time is.

A card's priority is its share of eager time times its headroom (how far eager is from the
card's memory-bandwidth floor on the sandbox's device). Cards dominated by vendor libraries
(convolution, matmul, attention) are left to eager unless the run asks for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from forge_service.config import RunConfig
from kforge_domain.card import OperatorCard
from kforge_domain.floor import memory_floor_us

MIN_HEADROOM = 0.05
NOT_IN_TOP = "outside the {k} cards with the most eager time"


@dataclass(frozen=True)
class CardPlan:
    card: OperatorCard
    rank: int
    selected: bool
    reason: str
    budget: int
    floor_us: float | None
    score: float


def _matches(card: OperatorCard, targets: Sequence[str]) -> bool:
    return any(t in (card.id, card.op) or card.op.endswith(t) for t in targets)


def plan_cards(cards: Sequence[OperatorCard], config: RunConfig, copy_bandwidth_gbps: float) -> list[CardPlan]:
    """Rank every card and select the ones the run will search, each with its evaluation budget."""
    scored: list[tuple[float, OperatorCard, str, float | None]] = []
    for card in cards:
        floor = memory_floor_us(card.inputs, card.outputs, copy_bandwidth_gbps)
        reason = ""
        if not card.optimisable:
            reason = card.reason or "not optimisable"
        elif card.degenerate:
            reason = f"degenerate: {card.degenerate}"
        elif config.target_cards and not _matches(card, config.target_cards):
            reason = "not a target card"
        elif card.vendor_op and not config.include_vendor_ops and not config.target_cards:
            reason = "vendor-library op (convolution, matmul, attention) left to eager"
        headroom = 1.0
        if floor is not None and card.eager_us:
            headroom = max(MIN_HEADROOM, 1.0 - floor / card.eager_us)
        scored.append((card.time_share * headroom, card, reason, floor))
    scored.sort(key=lambda s: (-s[0], s[1].id))
    plans = []
    picked = 0
    for rank, (score, card, reason, floor) in enumerate(scored):
        selected = not reason and picked < config.max_cards
        if not reason and not selected:
            reason = NOT_IN_TOP.format(k=config.max_cards)
        picked += selected
        plans.append(CardPlan(card, rank, selected, reason, config.budget_per_card if selected else 0, floor, score))
    return plans

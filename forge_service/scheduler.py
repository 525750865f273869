"""Which cards a run searches and how much budget each gets: where the model's time is.

A card's priority is its share of eager time times its headroom (how far eager is from the
card's memory-bandwidth floor on the sandbox's device). Cards dominated by vendor libraries
(convolution, matmul, attention) are left to eager unless the run asks for them. A card the
proposer has nothing for never takes a slot, and a module card that wraps exactly one
searchable aten card is that card: the aten card is searched in its place, at its priority.
An aten card that runs only inside a module card selected above it is not searched while that
module's kernel may replace its calls: its slot goes to the next card, and the run searches it
after all if the module card's search ends without a passing kernel. Compiled-only cards (layouts
only torch.compile's graphs make) have slots of their own: their kernels serve no eager call, so
they never take an eager card's place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from forge_service.config import RunConfig
from kforge_domain.card import OperatorCard
from kforge_domain.floor import CopyBandwidth, memory_floor_us

MIN_HEADROOM = 0.05
NOT_IN_TOP = "outside the {k} cards with the most eager time"
NOT_IN_TOP_COMPILED = "outside the {k} compiled-only cards with the most eager time"
NOT_PROPOSABLE = "the proposer has nothing for this card: {why}"
SERVED_BY_ATEN_CARD = "served by the one aten card it runs, {op} ({card_id})"
RUNS_ONLY_INSIDE_MODULE_CARD = "runs only inside the selected module card {op} ({card_id})"

#: Why the run's proposer cannot write a kernel for a card ("" when it can). Asked before any
#: budget is given, so it must be cheap: the offline proposer asks its template catalog.
RefusalFn = Callable[[OperatorCard], str]


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


def slots(config: RunConfig, card: OperatorCard) -> int:
    """How many cards of ``card``'s pool (eager or compiled-only) the run searches."""
    return config.compiled_slots if card.compiled_only else config.max_cards


def not_in_top(config: RunConfig, card: OperatorCard) -> str:
    """Why ``card`` waits: its pool's slots went to cards ranked above it."""
    if card.compiled_only:
        return NOT_IN_TOP_COMPILED.format(k=config.compiled_slots)
    return NOT_IN_TOP.format(k=config.max_cards)


def _not_searched(card: OperatorCard, config: RunConfig) -> str:
    """Why the run leaves ``card`` to eager whatever its priority; "" when it may be searched."""
    if not card.optimisable:
        return card.reason or "not optimisable"
    if card.degenerate:
        return f"degenerate: {card.degenerate}"
    if config.target_cards and not _matches(card, config.target_cards):
        return "not a target card"
    if card.vendor_op and not config.include_vendor_ops and not config.target_cards:
        return "vendor-library op (convolution, matmul, attention) left to eager"
    return ""


def _within(path: str, module: OperatorCard) -> bool:
    """Whether module path ``path`` lies within a path ``module`` was called at ("" is the root)."""
    return any(path == where or not where or path.startswith(where + ".") for where in module.module_paths)


def _runs_inside(card: OperatorCard, module: OperatorCard) -> bool:
    """Whether ``card`` ran inside one of the module paths ``module`` was called at."""
    return any(_within(path, module) for path in card.module_paths)


def runs_only_inside(card: OperatorCard, module: OperatorCard) -> bool:
    """Whether every call of ``card`` ran inside ``module``: a module kernel then replaces them all
    (the coverage benches count such a card as served by a covered module card)."""
    return bool(card.module_paths) and all(_within(path, module) for path in card.module_paths)


def plan_cards(cards: Sequence[OperatorCard], config: RunConfig, copy_bandwidth: CopyBandwidth | float,
               refusal: RefusalFn | None = None) -> list[CardPlan]:
    """Rank every card and select the ones the run will search, each with its evaluation budget.

    ``refusal`` says why the proposer cannot serve a card; None means it serves every card (an
    LLM). The ``max_cards`` slots go only to cards it can serve. A module card whose calls ran
    exactly one searchable aten card (the rest views, vendor ops or nothing) computes what that
    card computes, so searching both would spend the budget twice on one kernel: the aten card,
    which the op templates serve, takes the module's place if that ranks it higher. An aten card
    whose every call ran inside a module card selected above it would never run once that
    module's kernel is in place: it is passed over and its slot goes to the next card.
    """
    reasons: dict[str, str] = {}
    scores: dict[str, float] = {}
    floors: dict[str, float | None] = {}
    for card in cards:
        floor = memory_floor_us(card.inputs, card.outputs, copy_bandwidth, eager_us=card.eager_us)
        # Headroom reads the bound itself: eager at or under it (the floor then judges no timing)
        # leaves the least to gain, not the most.
        bound = memory_floor_us(card.inputs, card.outputs, copy_bandwidth)
        headroom = 1.0
        if bound is not None and card.eager_us:
            headroom = max(MIN_HEADROOM, 1.0 - bound / card.eager_us)
        reasons[card.id] = _not_searched(card, config)
        scores[card.id] = card.time_share * headroom
        floors[card.id] = floor
    refused = {c.id: refusal(c) for c in cards if not reasons[c.id]} if refusal is not None else {}
    searchable = [c for c in cards if c.kind == "aten" and not reasons[c.id] and not refused.get(c.id)]
    for module in cards:
        if module.kind != "module" or reasons[module.id]:
            continue
        inner = [c for c in searchable if _runs_inside(c, module)]
        if len(inner) == 1:
            (aten,) = inner
            reasons[module.id] = SERVED_BY_ATEN_CARD.format(op=aten.op, card_id=aten.id)
            scores[aten.id] = max(scores[aten.id], scores[module.id])
    for card_id, why in refused.items():
        if why and not reasons[card_id]:
            reasons[card_id] = NOT_PROPOSABLE.format(why=why)
    ranked = sorted(cards, key=lambda c: (-scores[c.id], c.id))
    plans = []
    picked = {False: 0, True: 0}  # by compiled_only
    modules: list[OperatorCard] = []  # the module cards selected so far
    for rank, card in enumerate(ranked):
        reason = reasons[card.id]
        if not reason and card.kind == "aten":
            host = next((m for m in modules if runs_only_inside(card, m)), None)
            if host is not None:
                reason = RUNS_ONLY_INSIDE_MODULE_CARD.format(op=host.op, card_id=host.id)
        selected = not reason and picked[card.compiled_only] < slots(config, card)
        if not reason and not selected:
            reason = not_in_top(config, card)
        picked[card.compiled_only] += selected
        if selected and card.kind == "module":
            modules.append(card)
        plans.append(CardPlan(card, rank, selected, reason, config.budget_per_card if selected else 0,
                              floors[card.id], scores[card.id]))
    return plans

"""What the forge answers about a stored run, as plain values; the servicer only converts them.

Each function reads one run store: a run's progress, its cards with their best kernels, a card's
revision tree with the search's statistics per node, one candidate with its exchanges. Values are
domain types (:mod:`kforge_domain`); this module imports no generated proto code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from forge_service.config import RunConfig
from forge_service.store import CandidateRow, RunStore, audit_class, best_candidate
from forge_service.tree_log import TreeLogError, candidate_nodes
from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import CandidateStatus
from servicekit.errors import FailedPrecondition, NotFound


@dataclass(frozen=True)
class RunSummary:
    """A run's state: status, progress against its budget, cost, the measured end-to-end speedup."""

    run_id: str
    config: RunConfig
    status: str
    error: str
    created_at: float
    updated_at: float
    model_name: str
    run_dir: str
    cards_total: int  # selected cards
    cards_done: int
    evaluations_done: int
    evaluations_budget: int
    cost: Cost
    best_e2e_speedup: float | None


@dataclass(frozen=True)
class CardSummary:
    """A card of the run and its best kernel (the best_* fields are None while none passed)."""

    card: OperatorCard
    status: str
    reason: str
    evaluations: int
    cost: Cost
    budget: int
    floor_us: float | None
    audit_class: str
    best_candidate_id: str | None = None
    best_latency_us: float | None = None
    eager_latency_us: float | None = None
    eager_spread_us: float | None = None  # the interquartile range of eager_latency_us's series
    best_spread_us: float | None = None  # the interquartile range of best_latency_us's series
    speedup: float | None = None


@dataclass(frozen=True)
class TreeNodeView:
    """A candidate in its card's revision tree, with the search's statistics for its subtree."""

    candidate_id: str
    parent_id: str
    depth: int
    description: str
    visits: int | None
    value: float | None
    status: CandidateStatus | None  # None while not evaluated
    latency_us: float | None
    speedup: float | None


@dataclass(frozen=True)
class CardTreeView:
    card_id: str
    nodes: tuple[TreeNodeView, ...]
    best_candidate_id: str | None


@dataclass(frozen=True)
class CandidateDetail:
    row: CandidateRow
    exchanges: list[LlmExchange]
    result: CandidateResult | None


def run_summary(store: RunStore) -> RunSummary:
    row = store.run_row()
    selected = [c for c in store.cards() if c.selected]
    e2e = (json.loads(row["report_json"]).get("end_to_end") or {}) if row["report_json"] else {}
    return RunSummary(
        run_id=row["id"], config=RunConfig.model_validate_json(row["config_json"]), status=row["status"],
        error=row["error"], created_at=row["created_at"], updated_at=row["updated_at"], model_name=row["model_name"],
        run_dir=str(store.run_dir), cards_total=len(selected), cards_done=sum(c.status == "done" for c in selected),
        evaluations_done=store.evaluation_count(), evaluations_budget=sum(c.budget for c in selected),
        cost=store.total_cost(), best_e2e_speedup=e2e.get("cast_speedup"),
    )


def card_summaries(store: RunStore) -> list[CardSummary]:
    """Every card in rank order, with its best kernel by speedup (its class "fallback" while none passed)."""
    out = []
    for row in store.cards():
        cand, result = best_candidate(store, row.id) or (None, None)
        out.append(CardSummary(
            card=OperatorCard.from_json(row.card_json), status=row.status, reason=row.reason,
            evaluations=store.evaluation_count(row.id), cost=store.total_cost(row.id), budget=row.budget,
            floor_us=row.floor_us, audit_class=audit_class(result),
            best_candidate_id=cand.id if cand else None,
            best_latency_us=result.latency_us if result else None,
            eager_latency_us=result.eager_latency_us if result else None,
            eager_spread_us=result.eager_spread_us if result else None,
            best_spread_us=result.latency_spread_us if result else None,
            speedup=result.speedup if result else None,
        ))
    return out


def card_tree(store: RunStore, card_id: str) -> CardTreeView:
    """The card's candidates in creation order, each with its depth, verdict and replayed statistics.

    Raises NotFound for a card the run lacks, FailedPrecondition when its tree log does not replay.
    """
    run_id = store.run_row()["id"]
    if card_id not in {c.id for c in store.cards()}:
        raise NotFound(f"run {run_id} has no card {card_id!r}")
    results = store.results(card_id)
    seed = RunConfig.model_validate_json(store.run_row()["config_json"]).seed
    try:
        views = candidate_nodes(store, card_id, seed)
    except TreeLogError as exc:
        raise FailedPrecondition(f"run {run_id}: {exc}") from exc
    depth: dict[str, int] = {}
    nodes = []
    for cand in store.candidates(card_id):
        depth[cand.id] = depth.get(cand.parent_id, 0) + 1 if cand.parent_id else 1
        view, result = views.get(cand.id), results.get(cand.id)
        nodes.append(TreeNodeView(
            candidate_id=cand.id, parent_id=cand.parent_id, depth=depth[cand.id], description=cand.description,
            visits=view.visits if view is not None else None, value=view.value if view is not None else None,
            status=result.status if result is not None else None,
            latency_us=result.latency_us if result is not None else None,
            speedup=result.speedup if result is not None else None,
        ))
    best = best_candidate(store, card_id)
    return CardTreeView(card_id=card_id, nodes=tuple(nodes), best_candidate_id=best[0].id if best else None)


def candidate_detail(store: RunStore, candidate_id: str) -> CandidateDetail:
    """One candidate, its LLM exchanges and its result. Raises NotFound for an unknown id."""
    try:
        row = store.candidate(candidate_id)
    except LookupError as exc:
        raise NotFound(str(exc)) from exc
    return CandidateDetail(row=row, exchanges=store.llm_calls(row.id), result=store.result(row.id))

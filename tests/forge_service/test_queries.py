"""What the forge answers about a stored run, read from a run written through its own store."""

from __future__ import annotations

from pathlib import Path

import pytest

from forge_service import queries
from forge_service.store import RunStore
from kforge_domain.cost import Cost
from kforge_domain.verdict import CandidateStatus
from servicekit.errors import NotFound
from tests.ui.seeding import BEST_US, EAGER_US, FLOOR_US, LLM_RUN_ID, SERIES_SPREAD_US, seed_llm_run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def llm_run(tmp_path: Path) -> tuple[RunStore, dict[str, str]]:
    ids = seed_llm_run(tmp_path, str(ROOT / "examples" / "small_cnn.py"))
    return RunStore(tmp_path / LLM_RUN_ID), ids


def test_a_run_summary_counts_progress_cost_and_the_measured_speedup(llm_run) -> None:
    store, _ = llm_run
    run = queries.run_summary(store)
    assert (run.run_id, run.status, run.cards_total, run.cards_done) == (LLM_RUN_ID, "done", 1, 1)
    assert (run.evaluations_done, run.evaluations_budget, run.best_e2e_speedup) == (3, 3, 1.25)
    assert run.cost == Cost(prompt_tokens=3600, completion_tokens=900, usd=pytest.approx(0.0375),  # type: ignore[arg-type]
                            llm_calls=3)


def test_a_card_summary_names_its_best_kernel_by_speedup(llm_run) -> None:
    store, ids = llm_run
    (card,) = queries.card_summaries(store)
    assert (card.card.id, card.best_candidate_id, card.audit_class) == (ids["card"], ids["best"], "custom")
    assert (card.best_latency_us, card.eager_latency_us, card.speedup, card.floor_us) == (
        BEST_US, EAGER_US, 2.0, FLOOR_US)
    assert card.eager_spread_us == SERIES_SPREAD_US  # the spread of the series the speedup comes from
    assert card.best_spread_us == 2.0  # the best kernel's own, from the same series


def test_the_card_tree_gives_depths_verdicts_and_replayed_visits(llm_run) -> None:
    store, ids = llm_run
    tree = queries.card_tree(store, ids["card"])
    nodes = {n.candidate_id: n for n in tree.nodes}
    assert tree.best_candidate_id == ids["best"]
    assert [nodes[ids[k]].depth for k in ("first", "broken", "best")] == [1, 2, 2]
    assert nodes[ids["broken"]].status == CandidateStatus.COMPILE_ERROR and nodes[ids["broken"]].latency_us is None
    assert nodes[ids["best"]].speedup == 2.0 and nodes[ids["first"]].visits == 3
    with pytest.raises(NotFound, match="has no card 'nope'"):
        queries.card_tree(store, "nope")


def test_a_candidate_comes_with_its_exchanges_and_result(llm_run) -> None:
    store, ids = llm_run
    detail = queries.candidate_detail(store, ids["broken"])
    assert detail.row.parent_id == ids["first"] and len(detail.exchanges) == 1
    assert detail.exchanges[0].cost == Cost(prompt_tokens=1200, completion_tokens=300, usd=0.0125, llm_calls=1)
    assert detail.row.cost == Cost(usd=0.0125, llm_calls=1)
    assert detail.result is not None and detail.result.status == CandidateStatus.COMPILE_ERROR
    assert detail.result.figures is None and detail.result.log_tail
    with pytest.raises(NotFound, match="no candidate 'nope'"):
        queries.candidate_detail(store, "nope")

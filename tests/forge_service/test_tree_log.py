"""A card's tree lives only in the run store's operation log: a search that dies anywhere replays
into the tree it had, resumes it, and the replayed tree gives every candidate its visits and value."""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path
from typing import Any

import pytest

from forge_service.card_search import CardSearch, SearchSettings
from forge_service.clients import Proposal
from forge_service.config import RunConfig
from forge_service.parent_policy import pick_parents
from forge_service.store import CardRow, RunStore
from forge_service.tree_log import (
    TreeLogError,
    add_child_op,
    ask_op,
    candidate_nodes,
    new_card_tree,
    pick_op,
    replay,
    tell_op,
)
from kforge_domain.cost import Cost
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest
from kforge_domain.propose_request import ProposeRequest
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures
from tests.forge_service.conftest import make_card

SEED, BUDGET, EAGER_US = 7, 12, 10.0


class Crash(Exception):
    """Stands for the process dying at this point: nothing after it reaches the store."""


class ScriptedAgent:
    """Proposes a source for most requests and nothing for some; dies on its ``crash_at``-th call."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.calls = 0
        self.crash_at = crash_at

    async def propose(self, request: ProposeRequest) -> Proposal:
        self.calls += 1
        call = self.calls
        await asyncio.sleep(0)
        if call == self.crash_at:
            raise Crash("agent")
        if request.seed % 7 == 3:
            return Proposal(source=None, description="nothing new", knobs={}, cost=Cost())
        return Proposal(source=f"// revision {request.seed}", description=f"revision {request.seed}", knobs={},
                        cost=Cost())


class ScriptedSandboxes:
    """Passes most candidates with a seeded latency, fails some; dies on its ``crash_at``-th call."""

    def __init__(self, crash_at: int | None = None) -> None:
        self.calls = 0
        self.crash_at = crash_at
        self.rng = random.Random(5)

    async def evaluate(self, request: EvaluateRequest, blobs: Any, on_lost: Any) -> CandidateResult:
        self.calls += 1
        call = self.calls
        await asyncio.sleep(0)
        if call == self.crash_at:
            raise Crash("sandbox")
        if self.rng.random() < 0.25:
            failure = BuildFailure(CandidateStatus.COMPILE_ERROR, "scripted failure")
            return CandidateResult(request.candidate_id, failure)
        latency = self.rng.uniform(4.0, 14.0)
        return CandidateResult(request.candidate_id, RunFigures(CandidateStatus.PASSED, latency_us=latency,
                                                                latency_spread_us=0.1, eager_latency_us=EAGER_US))


async def _quiet(*args: Any, **kwargs: Any) -> None:
    return None


def open_store(run_dir: Path) -> tuple[RunStore, Any]:
    card = make_card(eager_us=EAGER_US)
    store = RunStore(run_dir)
    if not store.cards():
        store.create_run("r1", RunConfig(model_spec="m.py", seed=SEED).model_dump_json(), "m")
        store.put_cards([CardRow(card.id, card.to_json(), 0, True, "searching", "", BUDGET, None)])
    return store, card


def searcher(store: RunStore, card: Any, agent: ScriptedAgent, sandboxes: ScriptedSandboxes,
             policy: str = "mcts") -> CardSearch:
    settings = SearchSettings(budget=BUDGET, parallel=3, backend="cpu", proposer="offline", api_base="", seed=SEED,
                              run_id="r1", patience=BUDGET, max_idle_proposals=BUDGET, policy=policy)
    return CardSearch(card, store, agent, sandboxes, DeviceInfo(arch="cpu-x86_64"), {},  # type: ignore[arg-type]
                      settings, _quiet)


def replayed_snapshot(store: RunStore, card_id: str) -> bytes:
    tree = new_card_tree(SEED, card_id, EAGER_US)
    replay(card_id, tree, store.tree_ops(card_id))
    return tree.snapshot()


@pytest.mark.parametrize(("agent_crash", "sandbox_crash"), [(None, 3), (5, None), (None, 8), (9, 9)])
def test_a_search_that_dies_replays_into_its_tree_and_resumes(tmp_path: Path, agent_crash: int | None,
                                                               sandbox_crash: int | None) -> None:
    store, card = open_store(tmp_path)
    first = searcher(store, card, ScriptedAgent(agent_crash), ScriptedSandboxes(sandbox_crash))
    with pytest.raises(Crash):
        asyncio.run(first.run())
    # the process died right after an ask too: its picks are logged before any child exists
    parents = first.tree.ask(2)
    store.log_tree_op(card.id, *ask_op(2, parents))
    assert replayed_snapshot(store, card.id) == first.tree.snapshot()
    store.close()

    store, card = open_store(tmp_path)
    evaluated = dict(store.results(card.id))
    second = searcher(store, card, ScriptedAgent(), ScriptedSandboxes())
    unfinished, unexpanded = second._replay()
    assert second.tree.snapshot() == first.tree.snapshot() and unexpanded == parents
    assert all(row.state in ("proposing", "proposed") for row in unfinished)
    second.tree = new_card_tree(SEED, card.id, EAGER_US)
    asyncio.run(second.run())
    # nothing evaluated before the crash was evaluated again, and the budget was spent exactly
    after = store.results(card.id)
    assert all(after[cid] == result for cid, result in evaluated.items())
    assert store.evaluation_count(card.id) == BUDGET
    assert replayed_snapshot(store, card.id) == second.tree.snapshot()


@pytest.mark.parametrize("policy", ["greedy", "beam"])
def test_a_search_by_another_policy_resumes_from_the_picks_it_logged(tmp_path: Path, policy: str) -> None:
    store, card = open_store(tmp_path)
    first = searcher(store, card, ScriptedAgent(), ScriptedSandboxes(crash_at=7), policy)
    with pytest.raises(Crash):
        asyncio.run(first.run())
    parents = pick_parents(policy, first.tree, 2)
    store.log_tree_op(card.id, *pick_op(2, parents))
    ops = [op for op, _ in store.tree_ops(card.id)]
    assert "pick" in ops and "ask" not in ops  # the tree chose none of them
    store.close()

    store, card = open_store(tmp_path)
    second = searcher(store, card, ScriptedAgent(), ScriptedSandboxes(), policy)
    _, unexpanded = second._replay()
    assert unexpanded == parents and second.tree.snapshot() == first.tree.snapshot()
    second.tree = new_card_tree(SEED, card.id, EAGER_US)
    asyncio.run(second.run())
    assert store.evaluation_count(card.id) == BUDGET
    assert replayed_snapshot(store, card.id) == second.tree.snapshot()


def test_every_candidate_gets_the_visits_and_value_of_its_subtree(tmp_path: Path) -> None:
    store, card = open_store(tmp_path)
    asyncio.run(searcher(store, card, ScriptedAgent(), ScriptedSandboxes()).run())
    views = candidate_nodes(store, card.id, SEED)
    rows = store.candidates(card.id)
    results = store.results(card.id)
    assert set(views) == {row.id for row in rows}

    children: dict[str, list[str]] = {}
    for row in rows:
        children.setdefault(row.parent_id, []).append(row.id)

    def subtree(cid: str) -> list[str]:
        return [cid, *(d for child in children.get(cid, []) for d in subtree(child))]

    for row in rows:
        told = [results[c] for c in subtree(row.id) if c in results]
        rewards = [math.log(EAGER_US / r.latency_us) for r in told if r.passed and r.latency_us]
        view = views[row.id]
        assert view.visits == len(told)
        assert view.value == (pytest.approx(sum(rewards) / len(rewards)) if rewards else None)
    assert sum(views[c].visits for c in children[""]) == BUDGET
    assert any(v.value for v in views.values())


def test_a_log_that_does_not_replay_names_the_card_and_the_operation(tmp_path: Path) -> None:
    store, card = open_store(tmp_path)
    store.add_candidate("c1", card.id, "", 1, "offline", add_child_op(0, 1, "c1"))
    store.log_tree_op(card.id, *tell_op(2, True, 5.0, None))
    with pytest.raises(TreeLogError, match=rf"card {card.id}: tree operation 2 \(tell"):
        candidate_nodes(store, card.id, SEED)

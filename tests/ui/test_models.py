from __future__ import annotations

import pytest

from kernel_forge.common.v1 import types_pb2
from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from tests.ui import factories
from ui.models import CandidateDetail, CardSummary, CardTree, RunEvent, RunSummary, status_name


def test_run_summary_reads_progress_cost_and_an_absent_speedup_as_none() -> None:
    msg = forge_pb2.Run(run_id="r", status="running", evaluations_done=3, evaluations_budget=12,
                        cost=types_pb2.Cost(usd=0.5, llm_calls=4),
                        config=forge_pb2.RunConfig(model_spec="m.py", backend="cpu", proposer="openai/gpt-4.1"))
    run = RunSummary.from_proto(msg)
    assert (run.progress, run.cost_usd, run.llm_calls, run.proposer) == (0.25, 0.5, 4, "openai/gpt-4.1")
    assert run.best_e2e_speedup is None and run.budget_usd is None
    assert run.active and run.model == "m.py"
    msg.best_e2e_speedup = 1.4
    msg.config.budget_usd = 2.0
    assert RunSummary.from_proto(msg).best_e2e_speedup == 1.4
    assert RunSummary.from_proto(msg).budget_usd == 2.0


@pytest.mark.parametrize(("status", "done", "budget", "expected"), [
    ("done", 0, 0, 1.0), ("pending", 0, 0, 0.0), ("running", 30, 10, 1.0), ("running", 5, 10, 0.5),
])
def test_progress_stays_within_zero_and_one(status: str, done: int, budget: int, expected: float) -> None:
    assert factories.run(status=status, evaluations_done=done, evaluations_budget=budget).progress == expected


def test_card_summary_prefers_the_sandbox_eager_time_and_falls_back_to_the_captured_one() -> None:
    msg = forge_pb2.RunCard(card=types_pb2.OperatorCard(id="c", op="aten::add.Tensor", eager_us=7.0, time_share=0.3),
                            status="pending")
    card = CardSummary.from_proto(msg)
    assert card.eager_us == 7.0 and card.best_us is None and card.audit_class == "fallback"
    msg.eager_latency_us, msg.best_latency_us, msg.floor_us = 8.0, 4.0, 1.0
    card = CardSummary.from_proto(msg)
    assert card.eager_us == 8.0 and card.pct_of_floor == 25.0


def test_card_summary_takes_the_spread_of_the_eager_time_it_shows() -> None:
    msg = forge_pb2.RunCard(card=types_pb2.OperatorCard(id="c", eager_us=7.0, eager_spread_us=0.7))
    card = CardSummary.from_proto(msg)
    assert (card.eager_us, card.eager_spread_us, card.model_eager_spread_us) == (7.0, 0.7, 0.7)
    msg.eager_latency_us = 8.0  # timed beside a kernel, whose series recorded no spread
    card = CardSummary.from_proto(msg)
    assert (card.eager_us, card.eager_spread_us, card.model_eager_spread_us) == (8.0, None, 0.7)
    msg.eager_spread_us = 0.2
    assert CardSummary.from_proto(msg).eager_spread_us == 0.2
    assert CardSummary.from_proto(forge_pb2.RunCard(card=types_pb2.OperatorCard(eager_us=7.0))).eager_spread_us is None


def test_card_summary_takes_the_spread_of_the_best_time() -> None:
    msg = forge_pb2.RunCard(card=types_pb2.OperatorCard(id="c", eager_us=7.0), best_latency_us=3.0, best_spread_us=0.3)
    assert (CardSummary.from_proto(msg).best_us, CardSummary.from_proto(msg).best_spread_us) == (3.0, 0.3)
    msg.ClearField("best_spread_us")
    assert CardSummary.from_proto(msg).best_spread_us is None


def test_best_lineage_runs_from_the_best_candidate_to_its_first_ancestor() -> None:
    assert factories.tree("k3").best_lineage() == ["k3", "k1"]
    assert factories.tree("").best_lineage() == []
    looped = CardTree("c", (factories.node("a", "b"), factories.node("b", "a")), "a")
    assert looped.best_lineage() == ["a", "b"]


def test_a_best_no_faster_than_eager_has_no_lineage() -> None:
    slower = CardTree("c", (factories.node("a", speedup=0.87), factories.node("b", "a", speedup=1.0)), "a")
    assert not slower.best_beats_eager and slower.best_lineage() == []
    assert slower.nodes[0].slower_than_eager and not factories.node("c", speedup=1.01).slower_than_eager


def test_tree_nodes_carry_the_order_the_search_expanded_the_tree_in() -> None:
    tree = CardTree.from_proto(forge_pb2.CardTree(card_id="c", nodes=[
        forge_pb2.TreeNode(candidate_id=cid) for cid in ("x", "y", "z")]))
    assert [n.order for n in tree.nodes] == [1, 2, 3]


def test_run_event_carries_its_candidates_verdict_when_there_is_one() -> None:
    event = RunEvent.from_proto(forge_pb2.RunEvent(
        seq=4, timestamp=10.5, kind="candidate", message="unroll: passed", card_id="c", candidate_id="k",
        status="running", result=types_pb2.CandidateResult(status=types_pb2.PASSED, speedup=0.87)))
    assert (event.kind, event.candidate_status, event.speedup, event.run_status) == (
        "candidate", "PASSED", 0.87, "running")
    note = RunEvent.from_proto(forge_pb2.RunEvent(seq=5, kind="log", message="budget raised"))
    assert note.candidate_status == "" and note.speedup is None


def test_tree_and_candidate_name_unevaluated_candidates_pending() -> None:
    assert status_name(types_pb2.CANDIDATE_STATUS_UNSPECIFIED) == "PENDING"
    tree = CardTree.from_proto(forge_pb2.CardTree(card_id="c", nodes=[
        forge_pb2.TreeNode(candidate_id="x", status=types_pb2.PASSED, speedup=1.5),
        forge_pb2.TreeNode(candidate_id="y", parent_id="x")]))
    assert [(n.status, n.speedup) for n in tree.nodes] == [("PASSED", 1.5), ("PENDING", None)]
    cand = CandidateDetail.from_proto(forge_pb2.Candidate(candidate_id="y", source="int x;"))
    assert not cand.evaluated and cand.latency_us is None


def test_candidate_detail_carries_llm_exchanges_and_cost() -> None:
    cost = types_pb2.Cost(prompt_tokens=10, completion_tokens=5, usd=0.01)
    msg = forge_pb2.Candidate(
        candidate_id="k", cost=cost,
        result=types_pb2.CandidateResult(status=types_pb2.WRONG_RESULT, rel_l2_error=0.3, error_message="off"),
        exchanges=[types_pb2.LlmExchange(model="m", prompt="p", response="r", cost=cost, latency_s=1.0)])
    cand = CandidateDetail.from_proto(msg)
    assert (cand.status, cand.rel_l2_error, cand.error_message, cand.usd) == ("WRONG_RESULT", 0.3, "off", 0.01)
    assert cand.exchanges[0].prompt == "p" and cand.exchanges[0].completion_tokens == 5

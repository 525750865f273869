"""The card search describes its requests in domain terms, and on the wire they are exactly what the
search sent when it built the messages itself.

``_wire_propose_request`` and ``_wire_evaluate_request`` are that earlier code, kept here as the
reference: a scripted search records, for every request, the domain request the search now builds
and the message the reference builds from the same store and tree at the same moment.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from forge_service.card_search import CardSearch, SearchSettings
from forge_service.clients import Proposal
from forge_service.config import RunConfig
from forge_service.runs import card_refusal
from forge_service.store import CandidateRow, CardRow, RunStore
from forge_service.tree_log import card_seed
from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2 as sandbox_pb2
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.evaluate_request import EvaluateRequest
from kforge_domain.propose_request import ProposeRequest
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures
from servicekit.convert import (
    device_from_proto,
    evaluate_request_from_proto,
    evaluate_request_to_proto,
    propose_request_from_proto,
    propose_request_to_proto,
    status_to_proto,
)
from tests.forge_service.conftest import make_card

SEED, BUDGET, EAGER_US = 11, 14, 10.0
DEVICE = types_pb2.DeviceInfo(
    backend="cpu", name="Test CPU", arch="cpu-x86_64", sm_count=8, l2_bytes=1 << 21, copy_bandwidth_gbps=20.0,
    toolchain="g++ 12.2.0", sandbox_id="sandbox-a", memory_bytes=1 << 34, candidate_slots=2,
    copy_bandwidth_by_size=[types_pb2.CopyBandwidthAtSize(working_set_bytes=1 << 20, gbps=80.0),
                            types_pb2.CopyBandwidthAtSize(working_set_bytes=1 << 24, gbps=40.0)],
)


class Agent:
    """Proposes a source with its own knob set for most requests and nothing for some; each call costs ``usd``."""

    def __init__(self, usd: float) -> None:
        self.usd = usd

    async def propose(self, request: ProposeRequest) -> Proposal:
        await asyncio.sleep(0)
        cost = Cost(usd=self.usd, llm_calls=1)
        exchanges = (LlmExchange(model="openai/kf-test", prompt="write it", cost=cost),) if self.usd else ()
        if request.seed % 9 == 4:
            return Proposal(source=None, description="nothing new", knobs={}, cost=cost, exchanges=exchanges)
        knobs = {"vec": request.seed % 4, "unroll": request.seed % 3 == 0, "name": f"k{request.seed}"}
        return Proposal(source=f"// revision {request.seed}", description=f"revision {request.seed}", knobs=knobs,
                        cost=cost, exchanges=exchanges)


class Sandboxes:
    """Fails some candidates (build failures, rejected runs) and times the others, every other one
    without an eager time."""

    def __init__(self) -> None:
        self.rng = random.Random(3)
        self.timed = 0

    async def evaluate(self, request: EvaluateRequest, blobs: Any, on_lost: Any) -> CandidateResult:
        await asyncio.sleep(0)
        draw = self.rng.random()
        latency = self.rng.uniform(4.0, 14.0)
        if draw < 0.2:
            return CandidateResult(request.candidate_id, BuildFailure(CandidateStatus.COMPILE_ERROR, "error: nope"))
        if draw < 0.3:
            return CandidateResult(request.candidate_id, RunFigures(CandidateStatus.REJECTED, "under the floor",
                                                                    latency_us=latency))
        self.timed += 1
        eager = None if self.timed % 2 else EAGER_US
        return CandidateResult(request.candidate_id, RunFigures(CandidateStatus.PASSED, latency_us=latency,
                                                                eager_latency_us=eager))


def _wire_propose_request(search: CardSearch, device: types_pb2.DeviceInfo,
                          row: CandidateRow) -> agent_pb2.ProposeRequest:
    """The request message as the search built it before it spoke in domain terms."""
    request = agent_pb2.ProposeRequest(
        card_json=search.card.to_json(), device=device, backend=search.settings.backend,
        proposer=search.settings.proposer, api_base=search.settings.api_base, run_id=search.settings.run_id,
        seed=card_seed(search.settings.seed, search.card.id) + row.seq,
    )
    usd_left = search._usd_left()
    if usd_left is not None:
        request.budget_usd_remaining = max(usd_left, 0.0)
    results = search.store.results(search.card.id)
    for other in search.store.candidates(search.card.id):
        if other.source and other.id != row.id:
            request.tried_knobs_json.append(json.dumps(other.knobs, sort_keys=True))
    if row.parent_id:
        parent = search.store.candidate(row.parent_id)
        parent_result = results.get(parent.id)
        msg = agent_pb2.ParentCandidate(candidate_id=parent.id, source=parent.source or "",
                                        description=parent.description,
                                        knobs_json=json.dumps(parent.knobs, sort_keys=True))
        if parent_result is not None and parent_result.latency_us is not None:
            msg.latency_us = parent_result.latency_us
            msg.eager_latency_us = parent_result.eager_latency_us or 0.0
        request.parent.CopyFrom(msg)
        for node in [*search.tree.ancestors(parent.node_id), parent.node_id]:
            if node in search.node_to_candidate:
                request.lineage.append(_wire_revision(search, search.node_to_candidate[node], results))
    for sibling in search.tree.failed_siblings(row.node_id):
        if sibling in search.node_to_candidate:
            request.failed_siblings.append(_wire_revision(search, search.node_to_candidate[sibling], results))
    if request.failed_siblings:
        last = request.failed_siblings[-1]
        request.feedback.CopyFrom(agent_pb2.Feedback(status=last.status, error_message=last.error_message))
    return request


def _wire_revision(search: CardSearch, candidate_id: str, results: dict[str, CandidateResult]) -> agent_pb2.Revision:
    row = search.store.candidate(candidate_id)
    rev = agent_pb2.Revision(candidate_id=row.id, description=row.description,
                             knobs_json=json.dumps(row.knobs, sort_keys=True))
    result = results.get(row.id)
    if result is not None:
        rev.status = status_to_proto(result.status)
        rev.error_message = result.error_message
        if result.latency_us is not None:
            rev.latency_us = result.latency_us
    return rev


def _wire_evaluate_request(search: CardSearch, row: CandidateRow) -> sandbox_pb2.EvaluateRequest:
    assert row.source is not None
    return sandbox_pb2.EvaluateRequest(
        candidate_id=row.id, card_json=search.card.to_json(), source=row.source, backend=search.settings.backend,
        options=sandbox_pb2.EvaluationOptions(remeasure=search.settings.remeasure,
                                              best_speedup=search._best_speedup()),
    )


@dataclass
class Recorded:
    proposals: list[tuple[ProposeRequest, agent_pb2.ProposeRequest]]
    evaluations: list[tuple[EvaluateRequest, sandbox_pb2.EvaluateRequest]]
    usd_spent: float = 0.0


class RecordingSearch(CardSearch):
    """A card search that records each request beside the reference message for the same moment."""

    recorded: Recorded

    def _propose_request(self, row: CandidateRow) -> ProposeRequest:
        request = super()._propose_request(row)
        self.recorded.proposals.append((request, _wire_propose_request(self, DEVICE, row)))
        return request

    def _evaluate_request(self, row: CandidateRow) -> EvaluateRequest:
        request = super()._evaluate_request(row)
        self.recorded.evaluations.append((request, _wire_evaluate_request(self, row)))
        return request


def _search(tmp_path: Path, settings: SearchSettings, usd: float) -> Recorded:
    """Search a card to its end, then ask once more for every candidate, as the finished tree stands."""
    card = make_card(eager_us=EAGER_US)
    store = RunStore(tmp_path)
    store.create_run(settings.run_id, RunConfig(model_spec="m.py", seed=SEED).model_dump_json(), "m")
    store.put_cards([CardRow(card.id, card.to_json(), 0, True, "searching", "", BUDGET, None)])

    async def quiet(*args: Any, **kwargs: Any) -> None:
        return None

    search = RecordingSearch(card, store, Agent(usd), Sandboxes(), device_from_proto(DEVICE), {},  # type: ignore[arg-type]
                             settings, quiet)
    search.recorded = Recorded([], [])
    try:
        asyncio.run(search.run())
        for row in store.candidates(card.id):
            search._propose_request(row)
        search.recorded.usd_spent = store.total_cost().usd
    finally:
        store.close()
    return search.recorded


def _same_wire(domain_message: Any, reference: Any) -> bool:
    """Equal messages that also serialise to the same bytes (set optional fields included)."""
    return bool(domain_message == reference) and (domain_message.SerializeToString(deterministic=True)
                                                  == reference.SerializeToString(deterministic=True))


SETTINGS = {
    "offline, remeasured": (SearchSettings(budget=BUDGET, parallel=3, backend="cpu", proposer="offline", api_base="",
                                           seed=SEED, run_id="r1", patience=BUDGET, max_idle_proposals=BUDGET), 0.0),
    "llm with a dollar budget, not remeasured": (
        SearchSettings(budget=BUDGET, parallel=3, backend="cpu", proposer="openai/kf-test", api_base="http://llm:1",
                       seed=SEED, run_id="r2", patience=BUDGET, max_idle_proposals=BUDGET, remeasure=False,
                       budget_usd=3.0), 0.4),
}


@pytest.mark.parametrize("name", SETTINGS)
def test_every_request_of_a_search_goes_on_the_wire_as_the_search_built_it_before(tmp_path: Path, name: str) -> None:
    settings, usd = SETTINGS[name]
    recorded = _search(tmp_path, settings, usd)
    assert recorded.proposals and recorded.evaluations
    for request, reference in recorded.proposals:
        assert _same_wire(propose_request_to_proto(request), reference), request
        assert propose_request_from_proto(reference) == request
    for evaluation, wire in recorded.evaluations:
        assert _same_wire(evaluate_request_to_proto(evaluation), wire), evaluation
        assert evaluate_request_from_proto(wire) == evaluation
    wires = [reference for _, reference in recorded.proposals]
    assert {w.HasField("budget_usd_remaining") for w in wires} == {settings.budget_usd is not None}
    if settings.budget_usd is not None:
        assert any(0.0 < w.budget_usd_remaining < settings.budget_usd for w in wires)
        assert recorded.usd_spent > settings.budget_usd and wires[-1].budget_usd_remaining == 0.0  # clamped
    assert {w.options.remeasure for _, w in recorded.evaluations} == {settings.remeasure}
    assert any(w.options.best_speedup > 0 for _, w in recorded.evaluations)


def test_the_search_compared_requests_with_and_without_a_parent_lineage_and_feedback(tmp_path: Path) -> None:
    wires = [reference for _, reference in _search(tmp_path, *SETTINGS["offline, remeasured"]).proposals]
    assert any(not w.HasField("parent") for w in wires)
    assert any(w.HasField("parent") and w.parent.eager_latency_us == 10.0 for w in wires)
    # a parent timed without an eager time still sends one, 0
    assert any(w.HasField("parent") and w.parent.HasField("eager_latency_us") and w.parent.eager_latency_us == 0.0
               for w in wires)
    assert any(len(w.lineage) > 1 for w in wires)
    assert any(w.HasField("feedback") and w.feedback.error_message for w in wires)
    assert {r.status for w in wires for r in w.failed_siblings} >= {types_pb2.COMPILE_ERROR, types_pb2.REJECTED}
    assert any(r.HasField("latency_us") for w in wires for r in w.failed_siblings)  # a rejected run's time
    assert any(len(w.tried_knobs_json) > 1 for w in wires)


def _refused(details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(grpc.StatusCode.INVALID_ARGUMENT, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                details=details)


class RefusingSandboxes:
    """Refuses the card on its second evaluation; the others take a while."""

    def __init__(self) -> None:
        self.calls = 0

    async def evaluate(self, request: EvaluateRequest, blobs: Any, on_lost: Any) -> CandidateResult:
        self.calls += 1
        if self.calls == 2:
            raise _refused("card c cannot be replayed: unknown operator 'mylib::fused'")
        await asyncio.sleep(30)
        raise AssertionError("an evaluation outlived its card's failure")


def test_a_card_the_sandbox_refuses_ends_with_nothing_of_it_left_running(tmp_path: Path) -> None:
    card = make_card(eager_us=EAGER_US)
    store = RunStore(tmp_path)
    store.create_run("r", RunConfig(model_spec="m.py", seed=SEED).model_dump_json(), "m")
    store.put_cards([CardRow(card.id, card.to_json(), 0, True, "searching", "", BUDGET, None)])

    async def quiet(*args: Any, **kwargs: Any) -> None:
        return None

    settings = SearchSettings(budget=BUDGET, parallel=3, backend="cpu", proposer="offline", api_base="", seed=SEED,
                              run_id="r", patience=BUDGET, max_idle_proposals=BUDGET)
    search = CardSearch(card, store, Agent(0.0), RefusingSandboxes(), device_from_proto(DEVICE), {},  # type: ignore[arg-type]
                        settings, quiet)

    async def run() -> set[asyncio.Task[Any]]:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await asyncio.wait_for(search.run(), timeout=20)
        assert card_refusal(refused.value) == ("the sandbox cannot evaluate this card: card c cannot be replayed: "
                                               "unknown operator 'mylib::fused'")
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    try:
        assert asyncio.run(run()) == set()
    finally:
        store.close()


def test_only_a_refused_card_is_the_cards_own_failure() -> None:
    assert card_refusal(_refused("card c declares no outputs")) == (
        "the sandbox cannot evaluate this card: card c declares no outputs")
    unavailable = grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details="connection refused")
    assert card_refusal(unavailable) is None  # the service's failure ends the run

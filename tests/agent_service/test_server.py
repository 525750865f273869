"""AgentService over real gRPC on 127.0.0.1:0: Propose, ListProviders, GetUsage, bad input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
import torch

from agent_service import server as agent_server
from agent_service.llm.settings import LlmSettings
from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.agent.v1 import service_pb2_grpc as agent_grpc
from kernel_forge.common.v1 import types_pb2
from servicekit.client import channel
from tests.agent_service.agent_cards import aten_card
from tests.agent_service.scripted_llm import Scripted, ScriptedLlmServer
from tests.agent_service.test_llm_proposer import _good_answer


def _serve(body: Callable[[agent_grpc.AgentServiceStub], Awaitable[Any]], settings: LlmSettings | None = None) -> Any:
    async def scenario() -> Any:
        bound = await agent_server.start("127.0.0.1:0", settings=settings)
        conn = channel(bound.address)
        try:
            return await body(agent_grpc.AgentServiceStub(conn))
        finally:
            await conn.close()
            await bound.stop(0)

    return asyncio.run(scenario())


def test_offline_propose_over_grpc_round_trips_knobs() -> None:
    card, _ = aten_card(torch.ops.aten._softmax.default, [torch.randn(4, 32), -1, False])
    device = types_pb2.DeviceInfo(backend="cpu", name="test", sm_count=2)

    async def body(stub: agent_grpc.AgentServiceStub) -> None:
        root = await stub.Propose(agent_pb2.ProposeRequest(card_json=card.to_json(), device=device, backend="cpu",
                                                           proposer="offline", seed=1))
        assert root.has_proposal and root.proposer == "offline" and "kf_launch" in root.source
        knobs = json.loads(root.knobs_json)
        assert knobs["family"] == "softmax"
        child = await stub.Propose(agent_pb2.ProposeRequest(
            card_json=card.to_json(), device=device, backend="cpu", proposer="offline", seed=1,
            parent=agent_pb2.ParentCandidate(candidate_id="c0", source=root.source, knobs_json=root.knobs_json,
                                             latency_us=3.0),
            tried_knobs_json=[root.knobs_json],
            lineage=[agent_pb2.Revision(candidate_id="c0", status=types_pb2.PASSED, knobs_json=root.knobs_json)],
        ))
        assert child.has_proposal and json.loads(child.knobs_json) != knobs
        matmul, _ = aten_card(torch.ops.aten.mm.default, [torch.randn(4, 4), torch.randn(4, 4)])
        none = await stub.Propose(agent_pb2.ProposeRequest(card_json=matmul.to_json(), backend="cpu",
                                                           proposer="offline"))
        assert not none.has_proposal and "aten::mm.default" in none.no_proposal_reason

    _serve(body)


def test_bad_requests_get_invalid_argument_naming_the_field() -> None:
    card, _ = aten_card(torch.ops.aten.relu.default, [torch.randn(4)])

    async def body(stub: agent_grpc.AgentServiceStub) -> None:
        cases = [
            (agent_pb2.ProposeRequest(card_json="{not json"), "card_json"),
            (agent_pb2.ProposeRequest(card_json=card.to_json(), backend="tpu"), "backend"),
            (agent_pb2.ProposeRequest(card_json=card.to_json(), tried_knobs_json=["[1, 2]"]), "tried_knobs_json[0]"),
            (agent_pb2.ProposeRequest(card_json=card.to_json(), proposer="   "), "proposer name is empty"),
        ]
        for request, needle in cases:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Propose(request)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and needle in (err.value.details() or "")

    _serve(body)


def test_providers_and_usage_add_up_across_llm_proposals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test")
    card, _ = aten_card(torch.ops.aten.relu.default, [torch.randn(16, 16)])
    settings = LlmSettings(timeout_s=5.0, backoff_s=0.01)
    script = [Scripted(content=_good_answer(card), prompt_tokens=100 * (i + 1), completion_tokens=10) for i in range(3)]
    with ScriptedLlmServer(script) as llm:
        async def body(stub: agent_grpc.AgentServiceStub) -> None:
            providers = await stub.ListProviders(agent_pb2.ListProvidersRequest())
            names = {p.name: p for p in providers.providers}
            assert not names["offline"].needs_api_key and "OPENAI_API_KEY" in names["openai/<model>"].env_vars
            spent = []
            for run_id in ("run-a", "run-a", "run-b"):
                response = await stub.Propose(agent_pb2.ProposeRequest(
                    card_json=card.to_json(), backend="cpu", proposer="openai/gpt-4o-mini", api_base=llm.api_base,
                    run_id=run_id))
                assert response.has_proposal and response.proposer == "openai/gpt-4o-mini"
                assert response.exchanges[0].response and response.cost.llm_calls == 1
                spent.append(response.cost)
            run_a = await stub.GetUsage(agent_pb2.GetUsageRequest(run_id="run-a"))
            total = await stub.GetUsage(agent_pb2.GetUsageRequest())
            assert run_a.cost.prompt_tokens == 300 and run_a.cost.llm_calls == 2
            assert run_a.cost.usd == pytest.approx(spent[0].usd + spent[1].usd)
            assert total.cost.usd == pytest.approx(sum(c.usd for c in spent)) and total.cost.prompt_tokens == 600

        _serve(body, settings)


def test_serve_arguments_start_a_server_with_llm_limits() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    agent_server.add_serve_arguments(parser)
    args = parser.parse_args(["--address", "127.0.0.1:0", "--llm-budget-per-run", "1.5", "--llm-repairs", "1"])
    settings = LlmSettings.from_args(args)
    assert settings.budget_usd_per_run == 1.5 and settings.repair_attempts == 1

    async def scenario() -> int:
        bound = await agent_server.start_from_args(args)
        conn = channel(bound.address)
        try:
            reply = await agent_grpc.AgentServiceStub(conn).ListProviders(agent_pb2.ListProvidersRequest())
            return len(reply.providers)
        finally:
            await conn.close()
            await bound.stop(0)

    assert asyncio.run(scenario()) > 5
    with pytest.raises(ValueError, match="budget_usd_per_card"):
        LlmSettings(budget_usd_per_card=-1)

"""AgentService over gRPC: converts messages and delegates to the proposers."""

from __future__ import annotations

import grpc

from agent_service.convert import proposal_to_message, request_from_message
from agent_service.llm.settings import LlmSettings
from agent_service.proposer import Proposer, make_proposer
from agent_service.providers import PROVIDERS
from agent_service.usage import UsageLedger
from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.agent.v1 import service_pb2_grpc as agent_grpc
from servicekit.convert import cost_to_proto


class AgentServicer(agent_grpc.AgentServiceServicer):
    """Thin: one proposer per (name, api_base), shared accounting in one ledger."""

    def __init__(self, settings: LlmSettings | None = None, ledger: UsageLedger | None = None) -> None:
        self.settings = settings or LlmSettings()
        self.ledger = ledger or UsageLedger()
        self._proposers: dict[tuple[str, str], Proposer] = {}

    def proposer(self, name: str, api_base: str) -> Proposer:
        key = (name, api_base)
        if key not in self._proposers:
            self._proposers[key] = make_proposer(name, api_base, ledger=self.ledger, settings=self.settings)
        return self._proposers[key]

    async def Propose(
        self, request: agent_pb2.ProposeRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ProposeResponse:
        domain = request_from_message(request)
        proposal = await self.proposer(domain.proposer, domain.api_base).propose(domain)
        return proposal_to_message(proposal)

    async def ListProviders(
        self, request: agent_pb2.ListProvidersRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.ListProvidersResponse:
        return agent_pb2.ListProvidersResponse(providers=[
            agent_pb2.Provider(name=p.name, description=p.description, needs_api_key=p.needs_api_key,
                               env_vars=list(p.env_vars))
            for p in PROVIDERS
        ])

    async def GetUsage(
        self, request: agent_pb2.GetUsageRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.Usage:
        return agent_pb2.Usage(cost=cost_to_proto(self.ledger.spent(request.run_id or None)))

"""Messages of kernel_forge.agent.v1 to and from the domain (the servicer's only job).

A request is read by the shared ``servicekit.convert.propose_request_from_proto``; this module adds
only what the agent assumes of an unset field (the backend, the proposer) and writes the answer.
"""

from __future__ import annotations

import json
from dataclasses import replace

from agent_service.models import Proposal
from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kforge_domain.backends import BACKENDS
from kforge_domain.propose_request import ProposeRequest
from servicekit.convert import cost_to_proto, exchange_to_proto, propose_request_from_proto
from servicekit.errors import InvalidArgument


def request_from_message(msg: agent_pb2.ProposeRequest) -> ProposeRequest:
    """A validated domain request; any malformed field raises InvalidArgument naming it.

    An unset backend is the device's, else cpu (and the device's backend is set to it); an unset
    proposer is the offline one.
    """
    request = propose_request_from_proto(msg)
    backend = request.backend or request.device.backend or "cpu"
    if backend not in BACKENDS:
        raise InvalidArgument(f"backend must be 'cpu' or 'cuda', got {backend!r}")
    return replace(request, backend=backend, device=replace(request.device, backend=backend),
                   proposer=request.proposer or "offline")


def proposal_to_message(proposal: Proposal) -> agent_pb2.ProposeResponse:
    return agent_pb2.ProposeResponse(
        has_proposal=proposal.has_proposal, source=proposal.source, description=proposal.description,
        knobs_json=json.dumps(proposal.knobs, sort_keys=True), no_proposal_reason=proposal.no_proposal_reason,
        cost=cost_to_proto(proposal.cost), exchanges=[exchange_to_proto(e) for e in proposal.exchanges],
        proposer=proposal.proposer,
    )

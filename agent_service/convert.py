"""Messages of kernel_forge.agent.v1 to and from the domain models (the servicer's only job)."""

from __future__ import annotations

import json
from typing import Any

from agent_service.models import (
    Backend,
    DeviceDescription,
    Feedback,
    ParentCandidate,
    Proposal,
    ProposalRequest,
    Revision,
)
from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.common.v1 import types_pb2
from kforge_domain.backends import BACKENDS
from servicekit.convert import card_from_json, cost_to_proto, exchange_to_proto
from servicekit.errors import InvalidArgument


def _knobs(text: str, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidArgument(f"{what} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _status(value: int) -> str:
    return types_pb2.CandidateStatus.Name(value) if value else ""


def _revision(msg: agent_pb2.Revision) -> Revision:
    return Revision(
        candidate_id=msg.candidate_id, description=msg.description, status=_status(msg.status),
        latency_us=msg.latency_us if msg.HasField("latency_us") else None,
        knobs=_knobs(msg.knobs_json, f"knobs_json of revision {msg.candidate_id!r}"), error_message=msg.error_message,
    )


def request_from_message(msg: agent_pb2.ProposeRequest) -> ProposalRequest:
    """A validated domain request; any malformed field raises InvalidArgument naming it."""
    card = card_from_json(msg.card_json)
    backend_name = msg.backend or msg.device.backend or "cpu"
    if backend_name not in BACKENDS:
        raise InvalidArgument(f"backend must be 'cpu' or 'cuda', got {backend_name!r}")
    backend: Backend = "cuda" if backend_name == "cuda" else "cpu"
    d = msg.device
    device = DeviceDescription(backend=backend, name=d.name, arch=d.arch, sm_count=d.sm_count, l2_bytes=d.l2_bytes,
                               copy_bandwidth_gbps=d.copy_bandwidth_gbps, toolchain=d.toolchain)
    parent = None
    if msg.HasField("parent"):
        p = msg.parent
        parent = ParentCandidate(
            candidate_id=p.candidate_id, source=p.source, description=p.description,
            latency_us=p.latency_us if p.HasField("latency_us") else None,
            eager_latency_us=p.eager_latency_us if p.HasField("eager_latency_us") else None,
            knobs=_knobs(p.knobs_json, "parent.knobs_json"),
        )
    feedback = None
    if msg.HasField("feedback"):
        feedback = Feedback(status=_status(msg.feedback.status), error_message=msg.feedback.error_message,
                            log_tail=msg.feedback.log_tail)
    return ProposalRequest(
        card=card, device=device, backend=backend, proposer=msg.proposer or "offline", api_base=msg.api_base or None,
        parent=parent, lineage=[_revision(r) for r in msg.lineage],
        failed_siblings=[_revision(r) for r in msg.failed_siblings], feedback=feedback,
        tried_knobs=[_knobs(t, f"tried_knobs_json[{i}]") for i, t in enumerate(msg.tried_knobs_json)],
        seed=msg.seed, run_id=msg.run_id,
        budget_usd_remaining=msg.budget_usd_remaining if msg.HasField("budget_usd_remaining") else None,
    )


def proposal_to_message(proposal: Proposal) -> agent_pb2.ProposeResponse:
    return agent_pb2.ProposeResponse(
        has_proposal=proposal.has_proposal, source=proposal.source, description=proposal.description,
        knobs_json=json.dumps(proposal.knobs, sort_keys=True), no_proposal_reason=proposal.no_proposal_reason,
        cost=cost_to_proto(proposal.cost), exchanges=[exchange_to_proto(e) for e in proposal.exchanges],
        proposer=proposal.proposer,
    )

"""The proposer interface's data: what a proposer is asked and what it answers.

These are plain domain objects (no gRPC); :mod:`agent_service.convert` converts them to and
from ``kernel_forge.agent.v1`` messages. A proposal's cost and LLM exchanges are the shared
:mod:`kforge_domain.cost` types. Knob sets are dicts of JSON scalars so that they can be
compared, stored in the run store and sent back as ``tried_knobs``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kforge_domain.card import OperatorCard
from kforge_domain.cost import Cost, LlmExchange

Backend = Literal["cpu", "cuda"]
Knobs = dict[str, Any]


class DeviceDescription(BaseModel):
    """What the candidate will run on; templates size grids by it, prompts quote it."""

    model_config = ConfigDict(frozen=True)

    backend: Backend = "cpu"
    name: str = ""
    arch: str = ""
    sm_count: int = 0
    l2_bytes: int = 0
    copy_bandwidth_gbps: float = 0.0
    toolchain: str = ""


class Revision(BaseModel):
    """One already evaluated candidate of the card's tree, summarised."""

    candidate_id: str = ""
    description: str = ""
    status: str = ""
    latency_us: float | None = None
    knobs: Knobs = Field(default_factory=dict)
    error_message: str = ""


class ParentCandidate(BaseModel):
    """The candidate a revision starts from."""

    candidate_id: str = ""
    source: str = ""
    description: str = ""
    latency_us: float | None = None
    eager_latency_us: float | None = None
    knobs: Knobs = Field(default_factory=dict)


class Feedback(BaseModel):
    """Why the previous attempt failed (compile error, runtime error, numerics), for repair."""

    status: str = ""
    error_message: str = ""
    log_tail: str = ""


class ProposalRequest(BaseModel):
    """Everything a proposer may use to write one candidate for one card."""

    card: OperatorCard
    device: DeviceDescription = Field(default_factory=DeviceDescription)
    backend: Backend = "cpu"
    proposer: str = "offline"
    api_base: str | None = None
    parent: ParentCandidate | None = None
    lineage: list[Revision] = Field(default_factory=list)
    failed_siblings: list[Revision] = Field(default_factory=list)
    feedback: Feedback | None = None
    tried_knobs: list[Knobs] = Field(default_factory=list)
    seed: int = 0
    run_id: str = ""
    budget_usd_remaining: float | None = None


class Proposal(BaseModel):
    """A candidate source with a one-line description of the change, or an honest refusal."""

    has_proposal: bool
    source: str = ""
    description: str = ""
    knobs: Knobs = Field(default_factory=dict)
    no_proposal_reason: str = ""
    cost: Cost = Field(default_factory=Cost)
    exchanges: list[LlmExchange] = Field(default_factory=list)
    proposer: str = ""

    @classmethod
    def refuse(cls, reason: str, proposer: str = "", **extra: Any) -> Proposal:
        return cls(has_proposal=False, no_proposal_reason=reason, proposer=proposer, **extra)

"""What a proposer answers: a :class:`Proposal`.

What it is asked is the shared :class:`kforge_domain.propose_request.ProposeRequest` (read by
``servicekit.convert.propose_request_from_proto``); :mod:`agent_service.convert` writes a proposal as a
``kernel_forge.agent.v1.ProposeResponse``. A proposal's cost and LLM exchanges are the shared
:mod:`kforge_domain.cost` types. Knob sets are dicts of JSON scalars so that they can be
compared, stored in the run store and sent back as ``tried_knobs``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from kforge_domain.cost import Cost, LlmExchange

Knobs = dict[str, Any]


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

"""What the forge asks the agent for one candidate of a card: where it starts and what was tried.

``servicekit.convert`` holds the converter pair to and from ``kernel_forge.agent.v1.ProposeRequest``;
each field is the message's field of the same name, but for the card (``card_json``) and knob sets
(``*knobs_json``: a knob set travels as JSON with sorted keys). A value that may be unset on the
wire is ``None`` here when unset. Knob sets are dicts of JSON scalars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kforge_domain.device import DeviceInfo

if TYPE_CHECKING:  # the card needs pydantic; this module keeps to the standard library
    from kforge_domain.card import OperatorCard
    from kforge_domain.verdict import CandidateStatus

Knobs = dict[str, Any]


@dataclass(frozen=True)
class Revision:
    """A candidate already in the card's tree, summarised; no status while it has no result."""

    candidate_id: str = ""
    description: str = ""
    knobs: Knobs = field(default_factory=dict)
    status: CandidateStatus | None = None
    error_message: str = ""
    latency_us: float | None = None


@dataclass(frozen=True)
class ParentCandidate:
    """The candidate the proposal revises, with its timing when it was timed."""

    candidate_id: str = ""
    source: str = ""
    description: str = ""
    knobs: Knobs = field(default_factory=dict)
    latency_us: float | None = None
    eager_latency_us: float | None = None


@dataclass(frozen=True)
class Feedback:
    """Why the previous attempt failed, for the repair loop."""

    status: CandidateStatus | None = None
    error_message: str = ""
    log_tail: str = ""


@dataclass(frozen=True)
class ProposeRequest:
    """Everything the agent is told to write one candidate for ``card``."""

    card: OperatorCard
    device: DeviceInfo = field(default_factory=DeviceInfo)
    backend: str = "cpu"  # "cpu" | "cuda"
    proposer: str = "offline"  # "offline" or a litellm model string
    api_base: str = ""  # "": the provider's own
    run_id: str = ""
    seed: int = 0
    parent: ParentCandidate | None = None
    lineage: tuple[Revision, ...] = ()  # the parent's ancestors and the parent, root first
    failed_siblings: tuple[Revision, ...] = ()
    feedback: Feedback | None = None
    budget_usd_remaining: float | None = None  # None: the run has no dollar budget
    tried_knobs: tuple[Knobs, ...] = ()  # knob sets already proposed for this card: do not repeat

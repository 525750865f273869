"""The offline proposer: template families, no network, deterministic given card, parent and seed."""

from __future__ import annotations

import asyncio

from agent_service.models import Proposal
from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.knobs import describe_change, next_knobs
from kforge_domain.card import OperatorCard
from kforge_domain.propose_request import ProposeRequest

NAME = "offline"


def offline_refusal(card: OperatorCard, backend: str) -> str:
    """Why no template family covers ``card`` on ``backend``, or "" when one does.

    It builds the family's plan without rendering a source (milliseconds), so a run can ask it
    of every card before it spends any budget; a refusal only rendering finds still comes back
    from :func:`propose_offline` during the search.
    """
    try:
        plan_for_card(card, backend)
    except UnsupportedCard as exc:
        return str(exc)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return f"card {card.id} ({card.op}) is malformed: {exc!r}"
    return ""


def propose_offline(request: ProposeRequest) -> Proposal:
    """A candidate from the card's template family: the default knobs at the root, a knob change below it."""
    try:
        plan = plan_for_card(request.card, request.backend)
        space = plan.knob_space(request.backend, request.device)
    except UnsupportedCard as exc:
        return Proposal.refuse(str(exc), proposer=NAME)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return Proposal.refuse(f"card {request.card.id} ({request.card.op}) is malformed: {exc!r}", proposer=NAME)

    def ours(knobs: dict[str, object]) -> bool:
        """Knob sets of this family (not an LLM candidate's or another family's)."""
        return knobs.get("family", plan.family) == plan.family and bool(set(knobs) & set(space.choices))

    parent_knobs = request.parent.knobs if request.parent is not None and ours(request.parent.knobs) else None
    tried = [k for k in [*request.tried_knobs, *(r.knobs for r in request.failed_siblings)] if ours(k)]
    knobs = next_knobs(space, parent_knobs, tried, request.seed)
    if knobs is None:
        return Proposal.refuse(f"every knob set of the {plan.family} template was tried", proposer=NAME)
    try:
        source = plan.render(request.backend, knobs, request.device)
    except UnsupportedCard as exc:
        return Proposal.refuse(str(exc), proposer=NAME)
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        return Proposal.refuse(f"card {request.card.id} ({request.card.op}) is malformed: {exc!r}", proposer=NAME)
    parent = space.normalise(parent_knobs) if parent_knobs is not None else None
    return Proposal(
        has_proposal=True,
        source=source,
        description=f"{plan.family} ({request.backend}): {describe_change(parent, knobs)}",
        knobs={"family": plan.family, **knobs},
        proposer=NAME,
    )


class OfflineProposer:
    """Proposer over the template families; rendering runs off the event loop."""

    name = NAME

    async def propose(self, request: ProposeRequest) -> Proposal:
        return await asyncio.to_thread(propose_offline, request)

"""The proposer interface and how a proposer is chosen by name.

``"offline"`` is the template proposer; any other name is a litellm model string (for example
``openai/gpt-4o`` or ``ollama/qwen2.5-coder`` with ``api_base`` pointing at a local server).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agent_service.models import Proposal
from agent_service.offline.proposer import OfflineProposer
from agent_service.usage import UsageLedger
from kforge_domain.propose_request import ProposeRequest
from servicekit.errors import InvalidArgument

if TYPE_CHECKING:
    from agent_service.llm.settings import LlmSettings


@runtime_checkable
class Proposer(Protocol):
    """Writes one candidate kernel for a card (or says honestly why it cannot)."""

    async def propose(self, request: ProposeRequest) -> Proposal: ...


def make_proposer(
    name: str, api_base: str | None = None, *, ledger: UsageLedger | None = None,
    settings: LlmSettings | None = None,
) -> Proposer:
    """The proposer called ``name``: ``"offline"`` or a litellm model string.

    ``ledger`` is where LLM spending is recorded (and read back for per-run and per-card
    budgets); ``settings`` holds timeouts, retries, the repair bound and budgets.
    """
    name = name.strip()
    if not name:
        raise InvalidArgument("proposer name is empty: use 'offline' or a litellm model string like 'openai/gpt-4o'")
    if name == OfflineProposer.name:
        return OfflineProposer()
    from agent_service.llm.proposer import LlmProposer
    from agent_service.llm.settings import LlmSettings

    return LlmProposer(model=name, api_base=api_base or None, ledger=ledger or UsageLedger(),
                       settings=settings or LlmSettings())

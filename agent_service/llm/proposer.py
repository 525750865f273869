"""The LLM proposer: prompt, call, parse, repair, within budgets, keeping every exchange.

Repair happens at two levels. Within one ``propose`` call, an answer that cannot be used (no or
several code blocks, no ``kf_launch``, a forbidden include) — or one that an optional ``check``
callback rejects (for example a local compile) — is sent back with the problem, up to
``repair_attempts`` extra calls. Across calls, the forge passes the sandbox's verdict on a failed
candidate as ``Feedback`` and the failed siblings, which the next prompt includes. The first
keeps the conversation; the second keeps the service stateless and the sandbox authoritative.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

from agent_service.llm.client import LlmCallFailed, complete
from agent_service.llm.parse import AnswerFormatError, parse_answer
from agent_service.llm.prompt import build_messages, repair_message
from agent_service.llm.settings import LlmSettings
from agent_service.models import Proposal
from agent_service.usage import UsageLedger
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.propose_request import Feedback, ProposeRequest

Check = Callable[[str], Awaitable[Feedback | None]]


def _total(exchanges: list[LlmExchange]) -> Cost:
    total = Cost()
    for exchange in exchanges:
        total = total + exchange.cost
    return total


class LlmProposer:
    """Proposes kernels written by ``model`` through litellm (``api_base`` for local servers)."""

    def __init__(self, model: str, api_base: str | None = None, ledger: UsageLedger | None = None,
                 settings: LlmSettings | None = None) -> None:
        self.model = model
        self.api_base = api_base
        self.ledger = ledger or UsageLedger()
        self.settings = settings or LlmSettings()

    def budget_left(self, request: ProposeRequest, spent_now: float = 0.0) -> float | None:
        """Dollars this proposal may still spend (None: unlimited)."""
        limits = []
        if request.budget_usd_remaining is not None:
            limits.append(request.budget_usd_remaining - spent_now)
        if self.settings.budget_usd_per_run is not None:
            limits.append(self.settings.budget_usd_per_run - self.ledger.spent(request.run_id or None).usd)
        if self.settings.budget_usd_per_card is not None:
            card_spent = self.ledger.spent_on_card(request.run_id, request.card.id).usd
            limits.append(self.settings.budget_usd_per_card - card_spent)
        return min(limits) if limits else None

    def _refuse(self, reason: str, exchanges: list[LlmExchange]) -> Proposal:
        return Proposal.refuse(reason, proposer=self.model, cost=_total(exchanges), exchanges=exchanges)

    async def propose(self, request: ProposeRequest, check: Check | None = None) -> Proposal:
        left = self.budget_left(request)
        if left is not None and left <= 0:
            return self._refuse(f"LLM budget reached for this card or run (${-left:.4f} over or at the limit)", [])
        version = self.settings.prompt_version
        messages = build_messages(request, version)
        exchanges: list[LlmExchange] = []
        problem = ""
        for attempt in range(self.settings.repair_attempts + 1):
            try:
                text, made = await complete(self.model, self.api_base, messages, self.settings)
            except LlmCallFailed as exc:
                self._record(request, exc.exchanges)
                exchanges += exc.exchanges
                return self._refuse(f"LLM call failed: {exc}", exchanges)
            self._record(request, made)
            exchanges += made
            try:
                parsed = parse_answer(text)
                feedback = await check(parsed.source) if check is not None else None
            except AnswerFormatError as exc:
                problem, details = str(exc), ""
            else:
                if feedback is None:
                    return Proposal(
                        has_proposal=True, source=parsed.source, description=parsed.description,
                        knobs={"proposer": self.model,
                               "source_sha256": hashlib.sha256(parsed.source.encode()).hexdigest()[:16]},
                        cost=_total(exchanges), exchanges=exchanges, proposer=self.model,
                    )
                problem = f"{feedback.status.value if feedback.status else 'check failed'}: {feedback.error_message}"
                details = f"```\n{feedback.log_tail.strip()[-4000:]}\n```" if feedback.log_tail else ""
            left = self.budget_left(request, _total(exchanges).usd)
            if left is not None and left <= 0:
                return self._refuse(f"LLM budget reached after {attempt + 1} answers; last problem: {problem}",
                                    exchanges)
            if attempt < self.settings.repair_attempts:
                messages = [*messages, {"role": "assistant", "content": text},
                            repair_message(version, problem, details)]
        return self._refuse(f"no usable kernel after {self.settings.repair_attempts + 1} answers: {problem}",
                            exchanges)

    def _record(self, request: ProposeRequest, exchanges: list[LlmExchange]) -> None:
        self.ledger.record(_total(exchanges), run_id=request.run_id, card_id=request.card.id)

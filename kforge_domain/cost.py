"""What proposing a candidate cost: tokens and dollars, and each LLM exchange kept for audit.

``servicekit.convert`` holds the converter pairs to and from ``kernel_forge.common.v1.Cost`` and
``kernel_forge.common.v1.LlmExchange``. An offline proposal costs nothing: a zero :class:`Cost`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Cost:
    """Tokens and dollars spent by proposer work, over ``llm_calls`` calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    usd: float = 0.0
    llm_calls: int = 0

    def __add__(self, other: Cost) -> Cost:
        """The two spent together."""
        return Cost(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                    self.usd + other.usd, self.llm_calls + other.llm_calls)


@dataclass(frozen=True)
class LlmExchange:
    """One prompt and its answer (or the error instead), with what it cost and how long it took."""

    model: str
    prompt: str
    response: str = ""
    cost: Cost = field(default_factory=Cost)
    latency_s: float = 0.0
    error: str = ""

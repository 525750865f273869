"""How the LLM proposer calls models: timeouts, retries, the repair bound and budgets."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class LlmSettings:
    """Limits of LLM work; budgets in US dollars, ``None`` meaning unlimited."""

    timeout_s: float = 300.0
    max_retries: int = 4  # per call, on rate limits, timeouts and connection errors
    backoff_s: float = 2.0  # first wait; doubles each retry, capped at max_backoff_s
    max_backoff_s: float = 60.0
    repair_attempts: int = 3  # extra calls after an unusable answer
    max_tokens: int = 16384
    temperature: float | None = None
    budget_usd_per_card: float | None = None
    budget_usd_per_run: float | None = None
    prompt_version: str = "v1"

    def __post_init__(self) -> None:
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.max_retries < 0 or self.repair_attempts < 0:
            raise ValueError("max_retries and repair_attempts must be zero or more")
        for name in ("budget_usd_per_card", "budget_usd_per_run"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be zero or more, got {value}")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("LLM proposer")
        group.add_argument("--llm-timeout", type=float, default=LlmSettings.timeout_s, help="seconds per LLM call")
        group.add_argument("--llm-retries", type=int, default=LlmSettings.max_retries,
                           help="retries of one call on rate limits, timeouts and connection errors")
        group.add_argument("--llm-repairs", type=int, default=LlmSettings.repair_attempts,
                           help="extra calls that repair an unusable answer")
        group.add_argument("--llm-max-tokens", type=int, default=LlmSettings.max_tokens)
        group.add_argument("--llm-budget-per-card", type=float, default=None, help="US dollars per card")
        group.add_argument("--llm-budget-per-run", type=float, default=None, help="US dollars per run")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LlmSettings:
        return cls(timeout_s=args.llm_timeout, max_retries=args.llm_retries, repair_attempts=args.llm_repairs,
                   max_tokens=args.llm_max_tokens, budget_usd_per_card=args.llm_budget_per_card,
                   budget_usd_per_run=args.llm_budget_per_run)

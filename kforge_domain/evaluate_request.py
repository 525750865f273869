"""What the forge asks a sandbox to judge: one candidate's source for one card.

``servicekit.convert`` holds the converter pair to and from ``kernel_forge.sandbox.v1.EvaluateRequest``;
each field is the message's field of the same name, but for the card (``card_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the card needs pydantic; this module keeps to the standard library
    from kforge_domain.card import OperatorCard


@dataclass(frozen=True)
class EvaluationOptions:
    """Per-request knobs of an evaluation; a zero count or timeout means the sandbox's default."""

    fresh_input_sets: int = 0  # newly drawn input sets besides the captured samples
    timing_runs: int = 0  # timed calls per variant
    compile_timeout_s: float = 0.0
    run_timeout_s: float = 0.0
    remeasure: bool = False  # re-time a passing candidate in a fresh process
    # The card's best speedup so far (0: none yet): a candidate clearly slower stops timing early,
    # and only one that beats it is re-measured.
    best_speedup: float = 0.0


@dataclass(frozen=True)
class EvaluateRequest:
    """One candidate for one card; the card's sample blobs must be on the sandbox first."""

    candidate_id: str
    card: OperatorCard
    source: str
    backend: str  # "cpu" | "cuda"
    options: EvaluationOptions = field(default_factory=EvaluationOptions)

"""In-memory records of captured variants, before they become cards.

Each distinct variant key gets one :class:`VariantRecord`. Its first call is kept with the exact
layout on the capture device (it is what timing re-runs and the first reference sample); up to
``samples - 1`` further calls are kept as CPU copies while the sample budget allows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from capture_service.layout import nbytes
from kforge_domain.card import TensorSpec
from packager.variant import VariantKey


@dataclass
class CallSample:
    """The tensors of one call: inputs in template order, outputs in return order."""

    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(nbytes(t) for t in (*self.inputs, *self.outputs))


@dataclass
class VariantRecord:
    """Everything capture learned about one variant."""

    key: VariantKey
    kind: Literal["aten", "module"]
    op: str
    outputs: list[TensorSpec]
    # The call bound to the given inputs (template order), its arguments decoded once, so that
    # timing it measures the call alone; None when it cannot be replayed.
    eager_call: Callable[[Sequence[torch.Tensor]], Callable[[], Any]] | None
    # What the bound call reads besides its inputs (a live module's parameters and buffers):
    # evicted with the inputs before each timed call on the cpu.
    eager_state: list[torch.Tensor] = field(default_factory=list)
    call_count: int = 0
    module_paths: list[str] = field(default_factory=list)
    samples: list[CallSample] = field(default_factory=list)
    mutated_inputs: list[int] = field(default_factory=list)
    optimisable: bool = True
    reason: str = ""
    degenerate: str = ""
    vendor_op: bool = False
    program_blob: str | None = None
    program_graph: dict[str, Any] | None = None  # capture_service.program_graph
    eager_us: float | None = None  # median of the timed calls (capture_service.timing)
    eager_spread_us: float | None = None  # their interquartile range
    # A layout only compiled graphs give the call (capture_service.compiled_variants): eager never ran it.
    compiled_only: bool = False

    def add_path(self, path: str) -> None:
        if path not in self.module_paths:
            self.module_paths.append(path)

    def mark_not_optimisable(self, reason: str) -> None:
        """Keep the first reason: it is the most basic one."""
        if self.optimisable:
            self.optimisable = False
            self.reason = reason


class SamplePolicy:
    """How many reference samples to keep per variant, within a byte budget for the extras.

    The first sample of every variant is always kept (timing needs it); whether it fits the
    budget is decided when blobs are written. Extra samples are taken only while the first
    samples of optimisable variants plus extras stay within the budget.
    """

    def __init__(self, samples_per_card: int, budget_bytes: int) -> None:
        self.samples_per_card = samples_per_card
        self.budget_bytes = budget_bytes
        self.first_bytes = 0
        self.extra_bytes = 0

    def wants_extra(self, record: VariantRecord) -> bool:
        return (
            record.optimisable
            and 0 < len(record.samples) < self.samples_per_card
            and self.first_bytes + self.extra_bytes < self.budget_bytes
        )

    def add(self, record: VariantRecord, sample: CallSample) -> None:
        if record.samples:
            size = sample.nbytes
            if self.first_bytes + self.extra_bytes + size > self.budget_bytes:
                return
            self.extra_bytes += size
        elif record.optimisable:
            self.first_bytes += sample.nbytes
        record.samples.append(sample)


def cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A contiguous CPU copy of the values (extra samples need no layout: the card has it)."""
    return tensor.detach().to("cpu", copy=True).contiguous()

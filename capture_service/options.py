"""Capture options, validated once before any user code runs."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from capture_service.errors import InvalidCaptureOptions

GRAD_MODES: dict[str, Callable[[], AbstractContextManager[object]]] = {
    "inference": torch.inference_mode,
    "no_grad": torch.no_grad,
    "grad": torch.enable_grad,
}
DEVICES = ("cpu", "cuda")
DEFAULT_SAMPLES = 2
DEFAULT_BUDGET_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class CaptureOptions:
    """Where and how to capture.

    ``grad_mode`` is the mode the model will be served in (the set of aten ops depends on it);
    ``samples`` reference samples are kept per card within ``budget_bytes`` in total, the cards
    carrying the most eager time first. A card left without a sample fails the capture, unless
    ``allow_unsampled``: then it is kept, not optimisable, with the reason. ``trace_compiled`` also
    traces the model as torch.compile does, and adds a card for each layout its graphs give a
    captured call that eager never ran (:mod:`capture_service.compiled_variants`).
    """

    device: str = "cpu"
    grad_mode: str = "inference"
    samples: int = DEFAULT_SAMPLES
    budget_bytes: int = DEFAULT_BUDGET_BYTES
    allow_unsampled: bool = False
    trace_compiled: bool = False

    def validated(self) -> CaptureOptions:
        if self.device not in DEVICES:
            raise InvalidCaptureOptions(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.grad_mode not in GRAD_MODES:
            raise InvalidCaptureOptions(f"grad mode must be one of {', '.join(GRAD_MODES)}, got {self.grad_mode!r}")
        if self.samples < 0:
            raise InvalidCaptureOptions(f"samples per card must be >= 0, got {self.samples}")
        if self.budget_bytes < 0:
            raise InvalidCaptureOptions(f"sample budget must be >= 0 bytes, got {self.budget_bytes}")
        return self

    def grad_context(self) -> AbstractContextManager[object]:
        """The grad mode the model runs (and is timed) under."""
        return GRAD_MODES[self.grad_mode]()

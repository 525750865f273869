"""Capturing the GPU benchmarks' example models on the cpu, quickly, for tests of what they capture."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from capture_service.timing import TimingPolicy
from kforge_domain.card import CardSet, OperatorCard

#: One short timing per op: these tests look at which cards a model gives, not at their times.
FAST = TimingPolicy(warmup=0, min_reps=1, max_reps=2, budget_s=0.0)


def capture_model(model: ModuleType, out_dir: Path) -> CardSet:
    """The cards of a benchmark model module (its ``get_model()`` on ``get_inputs()``), one sample each."""
    loaded = LoadedModel(model.get_model(), model.get_inputs())
    return capture_loaded(model.__name__.rsplit(".", 1)[-1], loaded, CaptureOptions(samples=1), out_dir, timing=FAST)


def card_of(cards: CardSet, op: str) -> OperatorCard:
    """The first card of aten ``op``."""
    return next(card for card in cards.cards if card.op == op)

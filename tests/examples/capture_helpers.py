"""Reading captured cards in example tests: variants by shape, module cards by class."""

from __future__ import annotations

from pathlib import Path

import pytest

from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import load_model_spec
from capture_service.timing import TimingPolicy
from kforge_domain.card import CardSet, OperatorCard

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QUICK = TimingPolicy(warmup=1, min_reps=3, max_reps=3, budget_s=0.0)


def capture_example(name: str, out_dir: Path) -> CardSet:
    """Capture ``examples/<name>.py`` in this process (tiny size, quick timing, one sample)."""
    spec = str(EXAMPLES / f"{name}.py")
    return capture_loaded(spec, load_model_spec(spec), CaptureOptions(samples=1), out_dir, timing=QUICK)


def variants(cards: CardSet, op: str) -> dict[tuple[tuple[int, ...], ...], int]:
    """Input shapes -> call count of the aten cards of ``op`` (variants equal in shape add up)."""
    found: dict[tuple[tuple[int, ...], ...], int] = {}
    for card in cards.cards:
        if card.kind == "aten" and card.op == op:
            shapes = tuple(tuple(t.shape) for t in card.inputs)
            found[shapes] = found.get(shapes, 0) + card.call_count
    return found


def module_cards(cards: CardSet) -> dict[str, list[OperatorCard]]:
    """Module cards by class name (without its module path)."""
    found: dict[str, list[OperatorCard]] = {}
    for card in cards.cards:
        if card.kind == "module":
            found.setdefault(card.op.rsplit(".", 1)[1], []).append(card)
    return found


def calls(cards: list[OperatorCard]) -> int:
    return sum(c.call_count for c in cards)


def check_common_invariants(cards: CardSet) -> None:
    """What every capture owes its readers: shares, timings, samples and programs."""
    aten = [c for c in cards.cards if c.kind == "aten"]
    assert sum(c.time_share for c in aten) == pytest.approx(1.0)
    for card in cards.cards:
        if card.optimisable:
            assert card.eager_us is not None and card.eager_us > 0, card.op
            assert len(card.samples) == 1, card.op
        if card.kind == "module" and card.optimisable:
            assert card.module_program_blob, card.op
    assert len({c.id for c in cards.cards}) == len(cards.cards)

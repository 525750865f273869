"""Helpers for the paper model tests: pick a size/variant and capture a spec in process."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest
import torch

from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import load_model_spec
from capture_service.timing import TimingPolicy
from examples.paper.settings import DEVICE_ENV, SIZE_ENV, VARIANT_ENV
from kforge_domain.card import CardSet

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "paper"

# One timed call per variant: the tests check which cards exist, not how fast they are.
QUICK_TIMING = TimingPolicy(warmup=0, min_reps=1, max_reps=1, budget_s=0.0)


@contextmanager
def example_env(size: str = "tiny", variant: str = "", device: str = "cpu") -> Iterator[None]:
    """Set the example knobs for the duration of the block."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(SIZE_ENV, size)
        patch.setenv(DEVICE_ENV, device)
        if variant:
            patch.setenv(VARIANT_ENV, variant)
        else:
            patch.delenv(VARIANT_ENV, raising=False)
        yield


def spec_module(name: str) -> ModuleType:
    return importlib.import_module(f"examples.paper.{name}")


def run_spec(name: str, variant: str = "") -> torch.Tensor:
    """Build the tiny model and run it once on its inputs."""
    with example_env(variant=variant):
        spec = spec_module(name)
        model, inputs = spec.get_model(), spec.get_inputs()
    with torch.inference_mode():
        return model(*inputs)


def capture_spec(name: str, out_dir: Path, variant: str = "") -> CardSet:
    """Capture the tiny spec by path, as ``kforge capture examples/paper/<name>.py`` does."""
    path = SPEC_DIR / f"{name}.py"
    with example_env(variant=variant):
        loaded = load_model_spec(str(path))
    return capture_loaded(str(path), loaded, CaptureOptions(samples=1), out_dir, timing=QUICK_TIMING)


def ops_of(cards: CardSet) -> set[str]:
    return {card.op for card in cards.cards}


def meta_model(name: str, variant: str = "") -> torch.nn.Module:
    """The paper-size model with weights on the meta device: its structure without the memory."""
    with example_env(size="gpu", variant=variant, device="meta"):
        return spec_module(name).get_model()

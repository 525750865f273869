"""How a paper model spec is sized, varied and placed, read from the environment.

The specs are loaded by file path (``kforge capture examples/paper/resnet50.py``), so their
knobs cannot be function arguments: ``KF_EXAMPLE_SIZE`` picks ``tiny`` (CPU-fast, for CI) or
``gpu`` (the paper's sizes), ``KF_EXAMPLE_VARIANT`` picks a spec's variant (batch and dtype,
prefill or decode), and ``KF_EXAMPLE_DEVICE`` builds weights and inputs directly on a device
(random initialisation of a billion parameters is minutes on CPU and seconds on a GPU).
Values are read when a spec builds its model, never at import, so one process can build
several sizes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal

import torch

SIZE_ENV = "KF_EXAMPLE_SIZE"
VARIANT_ENV = "KF_EXAMPLE_VARIANT"
DEVICE_ENV = "KF_EXAMPLE_DEVICE"

Size = Literal["tiny", "gpu"]
SIZES: tuple[Size, ...] = ("tiny", "gpu")

#: Weights and inputs are drawn from this seed, so two builds of a spec agree.
SEED = 0


class ExampleSettingError(ValueError):
    """An environment knob holds a value the spec does not offer."""


def example_size() -> Size:
    """``tiny`` (default) or ``gpu``, from ``KF_EXAMPLE_SIZE``."""
    value = os.environ.get(SIZE_ENV, "tiny").strip().lower() or "tiny"
    if value == "tiny":
        return "tiny"
    if value == "gpu":
        return "gpu"
    raise ExampleSettingError(f"{SIZE_ENV}={value!r} is not one of {', '.join(SIZES)}")


def example_variant(variants: Sequence[str]) -> str:
    """The spec's variant from ``KF_EXAMPLE_VARIANT``; the first of ``variants`` when unset."""
    value = os.environ.get(VARIANT_ENV, "").strip().lower()
    if not value:
        return variants[0]
    if value not in variants:
        raise ExampleSettingError(f"{VARIANT_ENV}={value!r} is not one of {', '.join(variants)}")
    return value


def example_device() -> torch.device:
    """Where weights and inputs are created, from ``KF_EXAMPLE_DEVICE`` (default ``cpu``)."""
    value = os.environ.get(DEVICE_ENV, "cpu").strip() or "cpu"
    try:
        device = torch.device(value)
    except RuntimeError as exc:
        raise ExampleSettingError(f"{DEVICE_ENV}={value!r} is not a torch device") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ExampleSettingError(f"{DEVICE_ENV}={value!r} but CUDA is not available")
    return device


@contextmanager
def seeded_build(dtype: torch.dtype = torch.float32, seed: int = SEED) -> Iterator[None]:
    """Build weights on the example device in ``dtype``, seeded, leaving the caller's RNG as it was.

    Constructing in the serving dtype is what ``from_pretrained(torch_dtype=...)`` does, so
    buffers computed at construction (positional tables, rotary frequencies) match a loaded model.
    """
    device = example_device()
    devices = [torch.cuda.current_device() if device.index is None else device.index] if device.type == "cuda" else []
    previous_dtype = torch.get_default_dtype()
    with torch.random.fork_rng(devices=devices), device:
        torch.manual_seed(seed)
        torch.set_default_dtype(dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous_dtype)


def input_generator(seed: int = SEED + 1) -> torch.Generator:
    """A generator on the example device for drawing a spec's inputs reproducibly."""
    generator = torch.Generator(device=example_device())
    generator.manual_seed(seed)
    return generator

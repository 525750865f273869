"""Sizes of the example model specs: ``KF_EXAMPLE_SIZE=tiny`` (default, CPU-fast) or ``gpu``.

Specs are loaded by file path, so their knobs come from the environment, read when a spec
builds its model or inputs (never at import). ``gpu`` sizes run in bfloat16.
"""

from __future__ import annotations

import os
from typing import Literal, TypeVar

import torch

SIZE_ENV = "KF_EXAMPLE_SIZE"
Size = Literal["tiny", "gpu"]
T = TypeVar("T")


def example_size() -> Size:
    value = os.environ.get(SIZE_ENV, "tiny").strip().lower() or "tiny"
    if value not in ("tiny", "gpu"):
        raise ValueError(f"{SIZE_ENV}={value!r} must be 'tiny' or 'gpu'")
    return "gpu" if value == "gpu" else "tiny"


def pick(tiny: T, gpu: T) -> T:
    """``tiny`` or ``gpu`` by the current size."""
    return gpu if example_size() == "gpu" else tiny


def example_dtype() -> torch.dtype:
    """float32 for tiny (CPU kernels and references), bfloat16 for GPU sizes."""
    return pick(torch.float32, torch.bfloat16)


def generator(seed: int = 0) -> torch.Generator:
    """A seeded CPU generator, so two builds of a spec draw the same inputs."""
    return torch.Generator().manual_seed(seed)

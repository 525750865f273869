"""Eager latency of a captured call, re-run from its sample after capture.

On CUDA each call is timed with device events around the call, synchronising before reading
them; on CPU with ``perf_counter``. The median per call is reported, after warm-up.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TimingPolicy:
    """How long to spend per variant: warm-up calls, then reps until ``budget_s`` or ``max_reps``."""

    warmup: int = 2
    min_reps: int = 5
    max_reps: int = 50
    budget_s: float = 0.05


DEFAULT_TIMING = TimingPolicy()


def median_call_us(call: Callable[[], object], device: torch.device, policy: TimingPolicy = DEFAULT_TIMING) -> float:
    """Median microseconds of one ``call()`` on ``device``."""
    for _ in range(policy.warmup):
        call()
    if device.type == "cuda":
        return _median_cuda_us(call, device, policy)
    samples: list[float] = []
    deadline = time.perf_counter() + policy.budget_s
    while len(samples) < policy.max_reps and (len(samples) < policy.min_reps or time.perf_counter() < deadline):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def _median_cuda_us(call: Callable[[], object], device: torch.device, policy: TimingPolicy) -> float:
    samples: list[float] = []
    torch.cuda.synchronize(device)
    deadline = time.perf_counter() + policy.budget_s
    while len(samples) < policy.max_reps and (len(samples) < policy.min_reps or time.perf_counter() < deadline):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize(device)
        samples.append(start.elapsed_time(end) * 1e3)
    return statistics.median(samples)

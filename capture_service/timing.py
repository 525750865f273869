"""Eager latency of a captured call, re-run from its sample after capture.

On CUDA, device events bracket a batch of back-to-back calls (enough to span ``cuda_batch_us``),
as a model issues them: a lone call between events would mostly measure an idle GPU waiting
for the launch. The device is synchronised before the end event is read. On CPU each call is
timed with ``perf_counter``. The median per call is reported, after warm-up.
"""

from __future__ import annotations

import math
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
    cuda_batch_us: float = 200.0
    max_batch: int = 64


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
    batch = max(1, min(policy.max_batch, math.ceil(policy.cuda_batch_us / max(_cuda_batch_us(call, device, 1), 1e-3))))
    samples: list[float] = []
    deadline = time.perf_counter() + policy.budget_s
    while len(samples) < policy.max_reps and (len(samples) < policy.min_reps or time.perf_counter() < deadline):
        samples.append(_cuda_batch_us(call, device, batch) / batch)
    return statistics.median(samples)


def _cuda_batch_us(call: Callable[[], object], device: torch.device, batch: int) -> float:
    """Microseconds of ``batch`` back-to-back calls between two device events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(batch):
        call()
    end.record()
    torch.cuda.synchronize(device)
    return float(start.elapsed_time(end)) * 1e3

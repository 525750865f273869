"""Eager latency of a captured call, re-run from its sample after capture.

Each call is timed by :class:`kforge_torch.timing.Timer`, as the sandbox's harness times eager
and candidates: the last-level cache flushed before every call (by the same cache size the
sandbox's device probe reports; on the cpu, the call's operands evicted instead, as every
measurement in the sandbox does), device work only (on cuda, events on a stream of the timer's
own, the host's launch hidden behind the flush), warm-up first, then the median and the
interquartile range of the calls (:class:`kforge_torch.timing.Summary`). A card's eager time at
capture and in the sandbox can then differ by what the machine did, never by how it was timed.
Two things of the harness's do not apply here: there is no candidate to interleave with, and
one sample to time on (rotating inputs among buffers defeats a cache, which the flush already
empties).

Capture times every card of a model, so each gets a budget (:class:`TimingPolicy`): a few
warm-up calls, then timed calls until ``budget_s`` of wall clock (flushes included) has passed,
no fewer than ``min_reps`` and no more than ``max_reps``.

A busy machine makes such a figure wrong rather than noisy: on the cpu another process that takes
the core for a few milliseconds can slow every one of a card's few calls alike, so a small spread
does not vouch for it. :meth:`EagerTimer.watch` also counts the involuntary context switches the
process suffered while timed (the kernel preempting it for another runnable task), which says
directly whether it had the core to itself (:attr:`Watched.disturbed`).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kforge_torch.caches import last_level_cache_bytes
from kforge_torch.eviction import machine_evictor
from kforge_torch.timing import Summary, Timer


@dataclass(frozen=True)
class TimingPolicy:
    """How long to spend per variant: warm-up calls, then reps until ``budget_s`` or ``max_reps``."""

    warmup: int = 2
    min_reps: int = 5
    max_reps: int = 50
    budget_s: float = 0.05

    def __post_init__(self) -> None:
        if self.warmup < 0 or not 1 <= self.min_reps <= self.max_reps or self.budget_s < 0:
            raise ValueError(f"a timing policy needs warmup >= 0, 1 <= min_reps <= max_reps and budget_s >= 0: {self}")


DEFAULT_TIMING = TimingPolicy()

#: Involuntary context switches during one card's timing that mark it disturbed. An idle machine
#: preempts a 50 ms timing not at all or once; with every core busy it is about a dozen times.
DISTURBED_PREEMPTIONS = 3
#: An interquartile range above this share of the median also marks a timing doubtful.
DOUBTFUL_SPREAD = 0.25


@dataclass(frozen=True)
class Watched:
    """A card's timing and how often another task took the cpu from the process meanwhile
    (always 0 on cuda, where the device's events time the work and the host only feeds it)."""

    summary: Summary
    preemptions: int

    @property
    def disturbed(self) -> bool:
        """Whether the figure may hold another process's time: preempted, or widely spread."""
        spread = self.summary.spread_us > DOUBTFUL_SPREAD * self.summary.median_us
        return self.preemptions >= DISTURBED_PREEMPTIONS or spread


def _involuntary_switches() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


class EagerTimer:
    """Times eager calls on one device under one policy; one flush buffer serves every card."""

    def __init__(self, device: torch.device, policy: TimingPolicy = DEFAULT_TIMING) -> None:
        self.device = device
        self.policy = policy
        self._stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        evictor = machine_evictor() if device.type == "cpu" else None
        self._timer = Timer(device.type, last_level_cache_bytes(device), self._stream, evictor)

    def time(self, call: Callable[[], object], operands: Sequence[torch.Tensor] | None = None) -> Summary:
        """The median and spread of ``call()`` in microseconds, within the policy's budget;
        ``operands`` (what the call reads and writes) are evicted before each call where the timer
        evicts (:class:`kforge_torch.timing.Timer`)."""
        policy = self.policy
        for _ in range(policy.warmup):
            call()
        if self._stream is not None:
            torch.cuda.synchronize(self.device)  # the sample and the warm-up are on the default stream
        samples_us: list[float] = []
        deadline = time.perf_counter() + policy.budget_s
        while len(samples_us) < policy.max_reps and (
            len(samples_us) < policy.min_reps or time.perf_counter() < deadline
        ):
            samples_us.append(self._timer.time_us(call, operands))
        return Summary.of(samples_us)

    def watch(self, call: Callable[[], object], operands: Sequence[torch.Tensor] | None = None) -> Watched:
        """:meth:`time`, with the preemptions the process suffered meanwhile on the cpu."""
        before = _involuntary_switches()
        summary = self.time(call, operands)
        preemptions = _involuntary_switches() - before if self.device.type == "cpu" else 0
        return Watched(summary, preemptions)

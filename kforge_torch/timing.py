"""How Kernel Forge times a call, the way DESIGN.md asks: cache flushed before each call, device
work only, the median of many with its interquartile range.

The sandbox's harness times candidates and eager with it, interleaved; capture times each card's
eager call with it. One method, so a card's eager time differs between the two only by what the
machine does, never by how it was measured.

cpu: ``perf_counter_ns`` around the call; where the caller names the call's operands and an
evictor is given (:mod:`kforge_torch.eviction`), the cold start evicts those operands and what the
previous call returned, instead of writing twice the last-level cache (19 ms a call on a 105 MiB
L3). cuda: events on the timer's stream, recorded with no
host wait between them (a host synchronisation inside the window would add its own tens of
microseconds to every call), plus an end event on the legacy default stream, which waits for
every blocking stream of the device: the time is the later of the two ends, so work a call puts
on another blocking stream is counted. The cache flush and a short spin before the start event
keep the device busy while the host launches the call, so launch latency stays outside the
window even for calls whose host-side dispatch takes longer than the flush.

Events see only the streams they wait for; :meth:`Timer.series` times back-to-back calls against
the host clock, ended by ``torch.cuda.synchronize``, which waits for every stream of the device
(the sandbox's ``escaped_work`` compares the two).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_leaves

from kforge_torch.eviction import Evictor

#: Device cycles spun after the flush (~50 µs at 2 GHz): longer than a slow host launch.
LAUNCH_COVER_CYCLES = 100_000
#: Back-to-back calls of the wall-clock series: enough that one synchronisation's cost spreads thin.
SERIES_CALLS = 20
#: The least a flush writes, whatever the cache size reported.
MIN_FLUSH_BYTES = 1 << 20
#: z of a two-sided 95% interval.
Z95 = 1.96


@dataclass(frozen=True)
class Summary:
    """Median and interquartile range of a series of calls, in microseconds."""

    median_us: float
    spread_us: float
    runs: int

    @classmethod
    def of(cls, samples_us: list[float]) -> Summary:
        """The summary of ``samples_us`` (at least one); one sample has no spread (0)."""
        if len(samples_us) < 2:
            return cls(samples_us[0], 0.0, len(samples_us))
        q1, _, q3 = statistics.quantiles(samples_us, n=4)
        return cls(statistics.median(samples_us), q3 - q1, len(samples_us))


def median_settled(samples_us: list[float], tolerance: float) -> bool:
    """Whether the 95% confidence interval of the samples' median lies within ``tolerance`` (a
    fraction) of it on either side: more samples would hardly move the figure.

    Distribution-free: the interval runs between the order statistics at ranks
    ``(n ∓ 1.96·√n) / 2`` (the median's binomial interval), so one slow outlier widens it only as
    far as it moves those ranks.
    """
    n = len(samples_us)
    if n < 4:
        return False
    ordered = sorted(samples_us)
    reach = Z95 * math.sqrt(n) / 2
    low = ordered[max(0, math.floor(n / 2 - reach))]
    high = ordered[min(n - 1, math.ceil(n / 2 + reach) - 1)]
    median = statistics.median(ordered)
    return median > 0 and median - low <= tolerance * median and high - median <= tolerance * median


@dataclass(frozen=True)
class Series:
    """Back-to-back calls from one device synchronisation to the next, in microseconds per call.

    ``wall_us``: the host clock over the whole series, ended by a synchronisation of every stream;
    ``stream_us``: events on the timer's stream around the calls; ``host_us``: the host clock
    until the last call returned.
    """

    calls: int
    wall_us: float
    stream_us: float
    host_us: float


class Timer:
    """Times one call on the backend's device, after flushing the last-level cache.

    ``l2_bytes`` is the cache to flush (:func:`kforge_torch.caches.last_level_cache_bytes`): the
    flush writes twice that. ``stream`` (cuda only, required there) is where the calls run.
    ``evictor`` (cpu only): calls timed with their operands named are started cold by evicting
    those instead; the flush buffer is then allocated only if a call comes without them.
    """

    def __init__(self, backend: str, l2_bytes: int, stream: torch.cuda.Stream | None = None,
                 evictor: Evictor | None = None) -> None:
        self.backend = backend
        self.stream = stream
        self.evictor = evictor if backend != "cuda" else None
        self._device = "cuda" if backend == "cuda" else "cpu"
        self._flush_bytes = max(2 * l2_bytes, MIN_FLUSH_BYTES)
        self._flush_buffer: torch.Tensor | None = None
        self._flush_value = 0
        self._returned: list[torch.Tensor] = []  # what the last evicting call returned, evicted before the next
        if backend == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._device_end = torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        """Evict the inputs and outputs from the cache by writing a buffer twice its size."""
        self._flush_value += 1
        if self._flush_buffer is None:
            self._flush_buffer = torch.empty(self._flush_bytes // 4, dtype=torch.int32, device=self._device)
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                self._flush_buffer.fill_(self._flush_value)
                torch.cuda._sleep(LAUNCH_COVER_CYCLES)
        else:
            self._flush_buffer.fill_(self._flush_value)

    @property
    def evicts(self) -> bool:
        """Whether calls timed with their operands start cold by eviction, not by the flush."""
        return self.evictor is not None

    @property
    def cold_start_words(self) -> str:
        """How a call timed with its operands starts cold, in words."""
        if self.evicts:
            return "evicting its operands from every cache level"
        return f"writing {self._flush_bytes / 2**20:.0f} MiB (twice the last-level cache)"

    def cold_start(self, operands: Sequence[torch.Tensor] | None = None) -> None:
        """Empty the caches for the next call: where the timer evicts and ``operands`` (every tensor
        the call reads or writes that it does not allocate) are named, evict them and what the last
        call returned; else flush. Always the one or the other for a given timer and caller: the
        flush leaves the cache full of dirty lines the call must write back first, which made the
        same eager call 1.1-3.2x slower than after eviction on the development CPU, so mixing the
        two would make figures of one card disagree."""
        if self.evictor is not None and operands is not None:
            self.evictor.evict([*operands, *self._returned])
            return
        self.flush()

    def time_us(self, call: Callable[[], object], operands: Sequence[torch.Tensor] | None = None) -> float:
        """Microseconds of one call, its caches emptied first (:meth:`cold_start`)."""
        self.cold_start(operands)
        if self.backend != "cuda":
            started = time.perf_counter_ns()
            returned = call()
            elapsed_ns = time.perf_counter_ns() - started
            if self.evictor is not None:
                self._returned = [t for t in tree_leaves(returned) if isinstance(t, torch.Tensor)]
            return elapsed_ns / 1e3
        assert self.stream is not None
        self._start.record(self.stream)
        with torch.cuda.stream(self.stream):
            call()
        self._end.record(self.stream)
        self._device_end.record(torch.cuda.default_stream())
        torch.cuda.synchronize()
        elapsed_ms = max(self._start.elapsed_time(self._end), self._start.elapsed_time(self._device_end))
        return float(elapsed_ms) * 1e3

    def series(self, call: Callable[[int], object], calls: int = SERIES_CALLS) -> Series:
        """``call(0)`` .. ``call(calls - 1)`` back to back on the timer's stream (cuda only), no flush."""
        assert self.stream is not None
        torch.cuda.synchronize()
        started = time.perf_counter_ns()
        self._start.record(self.stream)
        with torch.cuda.stream(self.stream):
            for k in range(calls):
                call(k)
        launched = time.perf_counter_ns()
        self._end.record(self.stream)
        torch.cuda.synchronize()
        ended = time.perf_counter_ns()
        return Series(calls=calls, wall_us=(ended - started) / 1e3 / calls,
                      stream_us=float(self._start.elapsed_time(self._end)) * 1e3 / calls,
                      host_us=(launched - started) / 1e3 / calls)

"""Timing a call the way DESIGN.md asks: cache flushed before each call, device work only.

cpu: ``perf_counter_ns`` around the call. cuda: events on the harness's stream, recorded with
no host wait between them (a host synchronisation inside the window would add its own tens of
microseconds to every call), plus an end event on the legacy default stream, which waits for
every blocking stream of the device: the time is the later of the two ends, so work a candidate
puts on another stream is counted. The cache flush and a short spin before the start event keep
the device busy while the host launches the call, so launch latency stays outside the window even
for calls whose host-side dispatch takes longer than the flush.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: Device cycles spun after the flush (~50 µs at 2 GHz): longer than a slow host launch.
LAUNCH_COVER_CYCLES = 100_000


@dataclass(frozen=True)
class Summary:
    """Median and interquartile range of a series of calls, in microseconds."""

    median_us: float
    spread_us: float
    runs: int

    @classmethod
    def of(cls, samples_us: list[float]) -> Summary:
        if len(samples_us) < 2:
            return cls(samples_us[0], 0.0, len(samples_us))
        q1, _, q3 = statistics.quantiles(samples_us, n=4)
        return cls(statistics.median(samples_us), q3 - q1, len(samples_us))


class Timer:
    """Times one call on the backend's device, after flushing the last-level cache."""

    def __init__(self, backend: str, l2_bytes: int, stream: torch.cuda.Stream | None = None) -> None:
        self.backend = backend
        self.stream = stream
        device = "cuda" if backend == "cuda" else "cpu"
        flush_bytes = max(2 * l2_bytes, 1 << 20)
        self._flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
        self._flush_value = 0
        if backend == "cuda":
            self._start = torch.cuda.Event(enable_timing=True)
            self._end = torch.cuda.Event(enable_timing=True)
            self._device_end = torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        """Evict the inputs and outputs from the cache by writing a buffer twice its size."""
        self._flush_value += 1
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                self._flush_buffer.fill_(self._flush_value)
                torch.cuda._sleep(LAUNCH_COVER_CYCLES)
        else:
            self._flush_buffer.fill_(self._flush_value)

    def time_us(self, call: Callable[[], object]) -> float:
        """Microseconds of one call, cache flushed first."""
        self.flush()
        if self.backend != "cuda":
            started = time.perf_counter_ns()
            call()
            return (time.perf_counter_ns() - started) / 1e3
        assert self.stream is not None
        self._start.record(self.stream)
        with torch.cuda.stream(self.stream):
            call()
        self._end.record(self.stream)
        self._device_end.record(torch.cuda.default_stream())
        torch.cuda.synchronize()
        elapsed_ms = max(self._start.elapsed_time(self._end), self._start.elapsed_time(self._device_end))
        return float(elapsed_ms) * 1e3

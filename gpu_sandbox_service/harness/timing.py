"""Timing a call the way DESIGN.md asks: cache flushed before each call, device work only.

cpu: ``perf_counter_ns`` around the call. cuda: events on the harness's stream, recorded with
no host wait between them (a host synchronisation inside the window would add its own tens of
microseconds to every call), plus an end event on the legacy default stream, which waits for
every blocking stream of the device: the time is the later of the two ends, so work a candidate
puts on another stream is counted. The cache flush and a short spin before the start event keep
the device busy while the host launches the call, so launch latency stays outside the window even
for calls whose host-side dispatch takes longer than the flush.

Events see only the streams they wait for: a candidate that works on a non-blocking stream of its
own escapes them (and work it starts while the flush still runs falls before the start event).
:func:`escaped_work` catches that against the host clock over back-to-back calls ended by
``torch.cuda.synchronize``, which waits for every stream of the device, non-blocking ones too.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

#: Device cycles spun after the flush (~50 µs at 2 GHz): longer than a slow host launch.
LAUNCH_COVER_CYCLES = 100_000
#: Back-to-back calls of the wall-clock check: enough that one synchronisation's cost spreads thin.
SERIES_CALLS = 20
#: Relative disagreement allowed between two figures of one call (clock changes, a warm cache).
NOISE_REL = 0.25
#: Absolute disagreement allowed per call, microseconds.
NOISE_US = 2.0
#: Host time a genuine call may take beyond its device time: descriptors, ctypes, a few launches.
LAUNCH_ALLOWANCE_US = 20.0


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


@dataclass(frozen=True)
class Series:
    """Back-to-back calls from one device synchronisation to the next, in microseconds per call.

    ``wall_us``: the host clock over the whole series, ended by a synchronisation of every stream;
    ``stream_us``: events on the harness's stream around the calls; ``host_us``: the host clock
    until the last call returned.
    """

    calls: int
    wall_us: float
    stream_us: float
    host_us: float


def escaped_work(median_us: float, candidate: Series, eager: Series) -> str | None:
    """Why the candidate's timed median misses device work it caused, or None when it does not.

    Eager keeps all its work on the harness's stream, so its series gives the fixed cost of the
    synchronisation (wall minus stream). A genuine candidate's wall time per call is then its
    stream time, and at most the larger of its timed median and its host time (a launch-bound
    call), the host time excused only up to :data:`LAUNCH_ALLOWANCE_US` beyond the median, since
    a call that waits inside ``kf_launch`` for work on a stream of its own also holds the host.
    """
    overhead_us = max(0.0, eager.wall_us - eager.stream_us) + NOISE_US
    where = (f"{candidate.wall_us:.3g} us a call by the wall clock over {candidate.calls} back-to-back calls "
             f"ended by a device synchronisation")
    if candidate.wall_us > candidate.stream_us * (1 + NOISE_REL) + overhead_us:
        return f"work outside the given stream: {where}, {candidate.stream_us:.3g} us on the harness's stream"
    accounted_us = max(median_us * (1 + NOISE_REL), min(candidate.host_us, median_us + LAUNCH_ALLOWANCE_US))
    if candidate.wall_us > accounted_us + overhead_us:
        return (f"work outside the given stream: {where}, {median_us:.3g} us timed "
                f"(the host held {candidate.host_us:.3g} us a call)")
    return None


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

    def series(self, call: Callable[[int], object], calls: int = SERIES_CALLS) -> Series:
        """``call(0)`` .. ``call(calls - 1)`` back to back on the harness's stream (cuda only), no flush."""
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

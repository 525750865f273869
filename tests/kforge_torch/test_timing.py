"""The timing method capture and the sandbox share: a summary's median and interquartile range,
and the cpu timer, which flushes the cache before each call and times the call alone."""

from __future__ import annotations

import random
import time

import pytest
import torch

from kforge_torch.timing import MIN_FLUSH_BYTES, Summary, Timer, median_settled


def test_a_summary_is_the_median_and_interquartile_range() -> None:
    summary = Summary.of([5.0, 1.0, 4.0, 2.0, 3.0, 100.0, 6.0])
    assert summary.median_us == 4.0 and summary.runs == 7
    assert summary.spread_us == pytest.approx(6.0 - 2.0)  # quartiles of the sorted calls, an outlier ignored


def test_one_call_has_no_spread() -> None:
    assert Summary.of([7.5]) == Summary(7.5, 0.0, 1)


def test_a_median_is_settled_when_its_interval_is_tight_whatever_a_few_outliers_do() -> None:
    rng = random.Random(1)
    quiet = [100.0 + rng.uniform(-0.5, 0.5) for _ in range(32)]
    assert median_settled(quiet, 0.01)
    assert median_settled([*quiet[:-3], 900.0, 1e4, 2e4], 0.01)  # three stalls move the ranks by little
    busy = [100.0 * rng.uniform(0.8, 1.3) for _ in range(32)]
    assert not median_settled(busy, 0.01)
    assert median_settled(busy, 0.2)
    assert not median_settled(quiet[:3], 0.5)  # too few to say


def test_the_flush_writes_twice_the_cache_and_no_less_than_a_mebibyte() -> None:
    timer, small = Timer("cpu", 3 * MIN_FLUSH_BYTES), Timer("cpu", 0)
    assert timer._flush_buffer is None, "allocated at the first flush: a timer that evicts never needs it"
    timer.flush()
    timer.flush()
    small.flush()
    assert timer._flush_buffer is not None and small._flush_buffer is not None
    assert timer._flush_buffer.numel() * 4 == 6 * MIN_FLUSH_BYTES
    assert small._flush_buffer.numel() * 4 == MIN_FLUSH_BYTES
    assert bool((timer._flush_buffer == 2).all())  # every byte written again, each time with a new value


def test_a_cpu_call_is_timed_alone_after_the_flush() -> None:
    timer = Timer("cpu", 32 * MIN_FLUSH_BYTES)
    flushed: list[int] = []

    def slow_call() -> None:
        flushed.append(timer._flush_value)
        time.sleep(0.002)

    slow = timer.time_us(slow_call)
    assert flushed == [1] and 1_900 < slow < 50_000
    fast = Summary.of([timer.time_us(lambda: None) for _ in range(5)])
    assert fast.median_us < 500 < slow  # the 64 MiB flush before each call stays outside the window


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times device work on a GPU")
def test_a_gpu_call_is_timed_on_the_timer_s_stream() -> None:
    stream = torch.cuda.Stream()
    timer = Timer("cuda", torch.cuda.get_device_properties(0).L2_cache_size, stream)
    x = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    ran_on: list[int] = []

    def small_call() -> None:
        ran_on.append(torch.cuda.current_stream().cuda_stream)
        x[:8].sum()

    x[:8].sum()  # the first launch of a kernel loads its module (lazy loading): milliseconds, not the call's
    (x @ x).sum()
    torch.cuda.synchronize()
    small = timer.time_us(small_call)
    large = Summary.of([timer.time_us(lambda: x @ x) for _ in range(5)])
    assert ran_on == [stream.cuda_stream] and 0 < small < large.median_us
    series = timer.series(lambda k: x @ x, calls=4)
    assert series.calls == 4 and series.stream_us > 0 and series.wall_us >= series.host_us > 0

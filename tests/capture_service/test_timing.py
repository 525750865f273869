"""Capture's eager timing: the shared method (cache flushed before each call), within the card's budget."""

import os
import subprocess
import sys
import time

import pytest
import torch

from capture_service.timing import DISTURBED_PREEMPTIONS, EagerTimer, TimingPolicy, Watched
from kforge_torch.caches import last_level_cache_bytes
from kforge_torch.timing import Summary

CPU = torch.device("cpu")


def test_the_median_and_spread_reflect_the_call() -> None:
    timer = EagerTimer(CPU, TimingPolicy(warmup=1, min_reps=5, max_reps=7, budget_s=0.01))
    fast = timer.time(lambda: None)
    slow = timer.time(lambda: time.sleep(0.002))
    assert fast.median_us < 500 and 1900 < slow.median_us < 20000
    assert 5 <= slow.runs <= 7 and slow.spread_us >= 0


def test_warm_up_runs_unflushed_then_each_timed_call_after_a_flush_until_max_reps() -> None:
    timer = EagerTimer(CPU, TimingPolicy(warmup=2, min_reps=3, max_reps=4, budget_s=10))
    flushes_before: list[int] = []
    summary = timer.time(lambda: flushes_before.append(timer._timer._flush_value))
    assert flushes_before == [0, 0, 1, 2, 3, 4] and summary.runs == 4
    # the flush is the sandbox harness's: twice the last-level cache the sandbox's probe reports
    assert timer._timer._flush_buffer.numel() * 4 == 2 * last_level_cache_bytes(CPU)


def test_the_budget_stops_timing_after_min_reps() -> None:
    timer = EagerTimer(CPU, TimingPolicy(warmup=0, min_reps=3, max_reps=50, budget_s=0.0))
    assert timer.time(lambda: None).runs == 3


def test_a_policy_that_times_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="min_reps"):
        TimingPolicy(min_reps=0)
    with pytest.raises(ValueError, match="min_reps"):
        TimingPolicy(min_reps=5, max_reps=4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times device work on a GPU")
def test_a_gpu_call_is_timed_with_its_spread() -> None:
    x = torch.randn(2048, 2048, device="cuda")
    timer = EagerTimer(torch.device("cuda"), TimingPolicy(warmup=1, min_reps=5, max_reps=10, budget_s=0.01))
    small, large = timer.time(lambda: x[:8].sum()), timer.time(lambda: x @ x)
    assert 5 <= large.runs <= 10 and 0 < small.median_us < large.median_us and large.spread_us >= 0


def test_a_timing_is_disturbed_when_preempted_or_widely_spread() -> None:
    steady = Summary(median_us=10.0, spread_us=1.0, runs=5)
    assert not Watched(steady, preemptions=DISTURBED_PREEMPTIONS - 1).disturbed
    assert Watched(steady, preemptions=DISTURBED_PREEMPTIONS).disturbed
    assert Watched(Summary(median_us=10.0, spread_us=5.0, runs=5), preemptions=0).disturbed


def test_another_process_on_the_same_core_marks_the_timing_disturbed() -> None:
    core = min(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True: pass"])
    try:
        os.sched_setaffinity(0, {core})
        time.sleep(0.3)  # the hog is running on the core
        timer = EagerTimer(CPU, TimingPolicy(warmup=0, min_reps=5, max_reps=50, budget_s=0.1))
        watched = timer.watch(lambda: sum(range(20_000)))
    finally:
        os.sched_setaffinity(0, allowed)
        hog.kill()
        hog.wait()
    assert watched.preemptions >= DISTURBED_PREEMPTIONS and watched.disturbed

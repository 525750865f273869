import time

import torch

from capture_service.timing import TimingPolicy, median_call_us


def test_median_reflects_the_call_duration() -> None:
    policy = TimingPolicy(warmup=1, min_reps=5, max_reps=7, budget_s=0.01)
    fast = median_call_us(lambda: None, torch.device("cpu"), policy)
    slow = median_call_us(lambda: time.sleep(0.002), torch.device("cpu"), policy)
    assert fast < 500 and 1900 < slow < 20000


def test_reps_stop_at_max_reps() -> None:
    calls = []
    policy = TimingPolicy(warmup=2, min_reps=3, max_reps=4, budget_s=10)
    median_call_us(lambda: calls.append(1), torch.device("cpu"), policy)
    assert len(calls) == 6

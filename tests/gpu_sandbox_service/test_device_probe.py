"""The cpu probe: copy bandwidth by working-set size, and a floor that the eager group norm of a
4 MB tensor does not beat (cache sizes: ``tests/kforge_torch/test_caches.py``)."""

from __future__ import annotations

import statistics

import torch

from gpu_sandbox_service.cardkit import tensor_spec
from gpu_sandbox_service.device import device_from_facts
from gpu_sandbox_service.device_probe import COPY_BYTES, copy_working_sets, cpu_facts
from kforge_domain.device import DeviceInfo
from kforge_domain.floor import CopyBandwidth, memory_floor_us
from kforge_torch.timing import Timer

MIB = 1024 * 1024


def test_working_sets_span_each_cache_and_dram() -> None:
    assert copy_working_sets({1: 32 * 1024, 2: MIB, 3: 32 * MIB}) == [MIB // 2, 16 * MIB, 64 * MIB, 128 * MIB]
    assert copy_working_sets({2: 512 * 1024})[-1] == COPY_BYTES // 2  # a small cache: DRAM still well beyond it


def _device() -> DeviceInfo:
    """The probe's facts read the way :func:`gpu_sandbox_service.device.describe_device` reads them."""
    return device_from_facts(cpu_facts(), "g++").info


def test_the_probe_measures_every_size_and_reports_dram_as_the_headline() -> None:
    device = _device()
    sizes = [p.working_set_bytes for p in device.copy_bandwidth_by_size]
    assert len(sizes) >= 2 and sizes == sorted(sizes) and sizes[-1] >= 2 * device.l2_bytes
    assert all(p.gbps > 0 for p in device.copy_bandwidth_by_size)
    assert device.copy_bandwidth_gbps == device.copy_bandwidth_by_size[-1].gbps


def test_eager_group_norm_of_4_mb_runs_above_its_floor() -> None:
    """The eager time the harness measures (cache flushed before each call) is not under the
    floor at the working set's size: the floor that rejected this card's kernels assumed DRAM."""
    device = _device()
    bandwidth = CopyBandwidth(device.copy_bandwidth_gbps, tuple(device.copy_bandwidth_by_size))
    x, weight, bias = torch.randn(1, 64, 128, 128), torch.randn(64), torch.randn(64)
    y = torch.nn.functional.group_norm(x, 32, weight, bias)
    timer = Timer("cpu", device.l2_bytes)
    eager_us = statistics.median(
        timer.time_us(lambda: torch.nn.functional.group_norm(x, 32, weight, bias)) for _ in range(15))
    floor = memory_floor_us([tensor_spec(t) for t in (x, weight, bias)], [tensor_spec(y)], bandwidth)
    assert floor is not None and 0 < floor < eager_us

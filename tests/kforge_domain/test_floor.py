"""The memory-bandwidth floor at the working set's size, and never above the card's eager time."""

import pytest

from kforge_domain.card import TensorSpec
from kforge_domain.floor import BandwidthAtSize, CopyBandwidth, memory_floor_us, working_set_bytes

KIB = 1024
MIB = 1024 * KIB
# Copy bandwidth (GB/s) measured by the cpu probe on a 2-core EPYC dev machine (1 MiB L2, 32 MiB L3):
# working sets that L2 and L3 hold copy ten times faster than the DRAM figure the floor used to assume.
EPYC = CopyBandwidth(16.9, (BandwidthAtSize(MIB // 2, 128.7), BandwidthAtSize(16 * MIB, 177.0),
                            BandwidthAtSize(64 * MIB, 30.4), BandwidthAtSize(128 * MIB, 16.9)))


def _spec(shape: list[int], dtype: str = "float32") -> TensorSpec:
    stride = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        stride[i] = stride[i + 1] * shape[i + 1]
    return TensorSpec(shape=shape, stride=stride, dtype=dtype)


def test_the_bandwidth_follows_the_working_set_through_the_caches() -> None:
    assert EPYC.at(8 * MIB) == 177.0  # L3-resident; the smaller L2 point measured slower: never below a larger set
    assert EPYC.at(64 * KIB) == 177.0
    assert EPYC.at(128 * MIB) == EPYC.at(4096 * MIB) == 16.9  # DRAM
    assert EPYC.at(32 * MIB) == pytest.approx((177.0 + 30.4) / 2)  # halfway between 16 and 64 MiB in log(size)
    assert CopyBandwidth(16.9).at(MIB) == 16.9  # no sizes measured (the cuda probe): one figure everywhere


def test_a_4_mib_group_norm_is_held_to_the_cache_not_to_dram() -> None:
    x, affine = _spec([1, 64, 128, 128]), _spec([64])
    moved = working_set_bytes([x, affine, affine], [x])
    assert moved == 8 * MIB + 512
    floor = memory_floor_us([x, affine, affine], [x], EPYC)
    dram = memory_floor_us([x, affine, affine], [x], EPYC.gbps)
    assert floor == pytest.approx(moved / 177.0e3) and floor == pytest.approx(47.4, abs=0.1)
    assert dram == pytest.approx(496.4, abs=0.1)  # what rejected the group norm's kernels


def test_a_floor_that_eager_beats_is_no_floor() -> None:
    x = _spec([1, 64, 128, 128])
    dram = CopyBandwidth(16.9)
    assert memory_floor_us([x], [x], dram, eager_us=600.0) == pytest.approx(496.4, abs=0.1)
    assert memory_floor_us([x], [x], dram, eager_us=300.0) is None
    assert memory_floor_us([x], [x], dram, eager_us=None) == memory_floor_us([x], [x], 16.9)


def test_no_floor_without_a_bandwidth() -> None:
    assert memory_floor_us([_spec([4])], [], CopyBandwidth(0.0, (BandwidthAtSize(MIB, 100.0),))) is None


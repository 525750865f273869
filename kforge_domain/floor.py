"""A card's memory-bandwidth floor: no kernel can run faster than moving its bytes once.

The scheduler ranks cards by their distance to it; the sandbox rejects a timing under it as
suspect. Both call :func:`memory_floor_us`, so the two can never disagree on the rule: the
bytes are moved at the copy bandwidth measured for a working set of their size (data that
stays in a cache moves faster than data from DRAM), and a floor the card's own eager time
beats is no floor at all.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from kforge_domain.dtypes import DTYPE_BYTES


class TensorLayout(Protocol):
    """What the floor reads of a tensor (``kforge_domain.card.TensorSpec`` has it)."""

    @property
    def shape(self) -> Sequence[int]: ...

    @property
    def stride(self) -> Sequence[int]: ...

    @property
    def dtype(self) -> str: ...


@dataclass(frozen=True)
class BandwidthAtSize:
    """Copy bandwidth (read + write, GB/s) measured with ``working_set_bytes`` of source and
    destination together."""

    working_set_bytes: int
    gbps: float


@dataclass(frozen=True)
class CopyBandwidth:
    """A device's copy bandwidth as a function of the working set's size.

    ``gbps`` is the bandwidth of working sets that only DRAM holds (the device's headline
    figure); ``by_size`` adds measurements at smaller working sets, which caches serve faster.
    Without them every size moves at ``gbps`` (the cuda probe: the harness flushes L2 before
    each timed call, so a GPU kernel reads from DRAM).
    """

    gbps: float
    by_size: tuple[BandwidthAtSize, ...] = ()

    def at(self, working_set_bytes: int) -> float:
        """The bandwidth for a working set of this size, in GB/s.

        Measured sizes are interpolated linearly in log(size); below the smallest the smallest's
        figure holds, above the largest ``gbps``. A smaller working set never gets less than a
        larger one (a noisy probe must not make the floor pessimistic).
        """
        points = sorted((p for p in self.by_size if p.working_set_bytes > 0 and p.gbps > 0),
                        key=lambda p: p.working_set_bytes)
        if not points or self.gbps <= 0:
            return self.gbps
        sizes = [p.working_set_bytes for p in points]
        rates = [p.gbps for p in points]
        rates[-1] = max(rates[-1], self.gbps)
        for i in range(len(rates) - 2, -1, -1):
            rates[i] = max(rates[i], rates[i + 1])
        if working_set_bytes >= sizes[-1]:
            return self.gbps
        if working_set_bytes <= sizes[0]:
            return rates[0]
        hi = bisect.bisect_right(sizes, working_set_bytes)
        lo = hi - 1
        t = math.log(working_set_bytes / sizes[lo]) / math.log(sizes[hi] / sizes[lo])
        return rates[lo] + t * (rates[hi] - rates[lo])


def touched_bytes(spec: TensorLayout) -> int | None:
    """Bytes a kernel must read or write of this tensor: its elements, a broadcast (stride-0)
    dimension counted once; ``None`` for a dtype of unknown size."""
    size = DTYPE_BYTES.get(spec.dtype)
    if size is None:
        return None
    n = 1
    for extent, step in zip(spec.shape, spec.stride, strict=True):
        n *= 1 if step == 0 and extent > 1 else extent
    return n * size


def working_set_bytes(inputs: Sequence[TensorLayout], outputs: Sequence[TensorLayout],
                      aliased_outputs: Collection[int] = ()) -> int | None:
    """Bytes the call reads and writes, each distinct element once; ``None`` if a dtype's size is unknown.

    An output in ``aliased_outputs`` (its index) is an input written in place, already counted
    with the inputs.
    """
    sizes = [touched_bytes(s) for s in inputs]
    sizes += [touched_bytes(s) for j, s in enumerate(outputs) if j not in aliased_outputs]
    if any(b is None for b in sizes):
        return None
    return sum(b for b in sizes if b is not None)


def memory_floor_us(inputs: Sequence[TensorLayout], outputs: Sequence[TensorLayout],
                    copy_bandwidth: CopyBandwidth | float, aliased_outputs: Collection[int] = (),
                    eager_us: float | None = None) -> float | None:
    """Time to read every input and write every output once at the copy bandwidth measured for
    a working set of that size (read + write, GB/s), in microseconds.

    ``None`` when the bandwidth is unknown (<= 0), a dtype's size is, or ``eager_us`` (the
    card's own eager time) is under the floor: eager running faster than the bound proves the
    bound wrong for this card on this device, and no lower figure is known to hold. Lowering the
    floor to the eager time instead would reject every candidate faster than eager by more than
    the sandbox's slack, which is what the search is for.
    """
    bandwidth = copy_bandwidth if isinstance(copy_bandwidth, CopyBandwidth) else CopyBandwidth(copy_bandwidth)
    moved = working_set_bytes(inputs, outputs, aliased_outputs)
    if bandwidth.gbps <= 0 or moved is None:
        return None
    floor = moved / (bandwidth.at(moved) * 1e3)
    if eager_us is not None and eager_us > 0 and eager_us < floor:
        return None
    return floor

"""A card's memory-bandwidth floor: no kernel can run faster than moving its bytes once.

The scheduler ranks cards by their distance to it; the sandbox rejects a timing under it as
suspect. Both call :func:`memory_floor_us`, so the two can never disagree.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
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


def memory_floor_us(inputs: Sequence[TensorLayout], outputs: Sequence[TensorLayout], copy_bandwidth_gbps: float,
                    aliased_outputs: Collection[int] = ()) -> float | None:
    """Time to read every input and write every output once at the measured copy bandwidth
    (read + write, GB/s), in microseconds.

    An output in ``aliased_outputs`` (its index) is an input written in place, already counted
    with the inputs. ``None`` when the bandwidth is unknown (<= 0) or a dtype's size is.
    """
    if copy_bandwidth_gbps <= 0:
        return None
    sizes = [touched_bytes(s) for s in inputs]
    sizes += [touched_bytes(s) for j, s in enumerate(outputs) if j not in aliased_outputs]
    if any(b is None for b in sizes):
        return None
    return sum(b for b in sizes if b is not None) / (copy_bandwidth_gbps * 1e3)

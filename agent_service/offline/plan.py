"""What every template family produces for a card: a plan that renders sources from knobs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from agent_service.offline.knobs import Knobs, KnobSpace
from kforge_domain.card import TensorSpec
from kforge_domain.device import DeviceInfo


class KernelPlan(Protocol):
    """A card understood by one template family: its constants fixed, its knobs open."""

    @property
    def family(self) -> str:
        """Template family name, recorded with the knobs."""
        ...

    @property
    def summary(self) -> str:
        """One line naming the op, shape and dtype, put in the source's header comment."""
        ...

    def knob_space(self, backend: str, device: DeviceInfo) -> KnobSpace:
        """The knobs this kernel exposes on ``backend`` and their allowed values."""
        ...

    def render(self, backend: str, knobs: Knobs, device: DeviceInfo) -> str:
        """One complete source file (kf_abi.h contract) for these knob values."""
        ...


#: Elements in a cpu kernel's largest tensor below which it starts on one thread: waking an
#: OpenMP team costs tens of µs, more than such a card's work (ATen's ``GRAIN_SIZE`` draws the
#: same line before it parallelises a loop).
CPU_SERIAL_BELOW = 32768


def cpu_thread_choices(device: DeviceInfo, tensors: Iterable[TensorSpec] = ()) -> tuple[int, ...]:
    """0 (the OpenMP default: every core) first, then powers of two up to the core count; for a
    card whose largest tensor is under :data:`CPU_SERIAL_BELOW` elements, one thread first."""
    cores = max(device.sm_count, 1)
    choices = [0]
    n = 1
    while n <= cores:
        choices.append(n)
        n *= 2
    if max((t.numel for t in tensors), default=CPU_SERIAL_BELOW) < CPU_SERIAL_BELOW:
        choices.remove(1)
        choices.insert(0, 1)
    return tuple(choices)


def multiprocessors(device: DeviceInfo) -> int:
    """The device's multiprocessors; an H100's or H200's 132 where the device did not say."""
    return device.sm_count if device.sm_count > 0 else 132


def cuda_grid_limit(device: DeviceInfo, block: int) -> int:
    """Blocks for one full wave of the device (grid-stride loops cover the rest)."""
    return multiprocessors(device) * max(1, 2048 // block)


def cuda_grid(device: DeviceInfo, block: int, waves: int, units: int) -> int:
    """Blocks for ``units`` blocks' worth of grid-stride work: all of them, or ``waves`` full waves
    of the device where that is fewer (``waves`` 0: no cap)."""
    return max(1, min(units, cuda_grid_limit(device, block) * waves or units))

"""Worker slots: one per visible GPU for running (timing is exclusive per GPU), more for compiling.

Each candidate gets a fresh process in its slot (forked from the slot's fork server, or started
cold), so a sticky CUDA error dies with the process that caused it and the next candidate starts
clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass


def visible_gpus(device_count: int) -> list[str]:
    """The GPU ids this sandbox may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``0..count-1``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(device_count)]


@dataclass(frozen=True)
class Slot:
    """One run slot: its number (which names its fork server) and the environment of its processes."""

    index: int
    env: dict[str, str]


class WorkerPool:
    """Hands out run slots (each with its process environment) and bounds parallel compiles."""

    def __init__(self, backend: str, device_count: int = 1, workers: int | None = None) -> None:
        if backend == "cuda":
            gpus = visible_gpus(device_count)
            if workers:
                gpus = gpus[:workers]
            slots = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in gpus] or [{}]
        else:
            slots = [{} for _ in range(max(1, workers or 1))]
        self.size = len(slots)
        self._free: asyncio.Queue[Slot] = asyncio.Queue()
        for index, env in enumerate(slots):
            self._free.put_nowait(Slot(index, env))
        self.compile_slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    @contextlib.asynccontextmanager
    async def run_slot(self) -> AsyncIterator[Slot]:
        """Exclusive use of one device slot."""
        slot = await self._free.get()
        try:
            yield slot
        finally:
            self._free.put_nowait(slot)

"""Worker slots: one per visible GPU for running (timing is exclusive per GPU), more for compiling.

A slot is not a long-lived process: each candidate gets a fresh process in its slot, so a
sticky CUDA error dies with the process that caused it and the next candidate starts clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator


def visible_gpus(device_count: int) -> list[str]:
    """The GPU ids this sandbox may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``0..count-1``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(device_count)]


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
        self._free: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        for slot in slots:
            self._free.put_nowait(slot)
        self.compile_slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    @contextlib.asynccontextmanager
    async def run_slot(self) -> AsyncIterator[dict[str, str]]:
        """Exclusive use of one device slot; yields the environment its process gets."""
        slot = await self._free.get()
        try:
            yield slot
        finally:
            self._free.put_nowait(slot)

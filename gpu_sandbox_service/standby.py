"""A cold harness process started before any candidate needs it: the next re-measure's.

A re-measure times a would-be best again in a process no candidate ran in, not a fork server's
child. Most of its cost is the process's own start (``import torch`` took 3.9 s of a 7-9 s
re-measure on an H100 host, ``bench/results/gpu_runs_2026-12-06_h100_run90_92.md``). So the
sandbox keeps one such process waiting: started in an empty folder of its own, it imports, says it
is ready and waits at its gate (:func:`~gpu_sandbox_service.harness.phases.wait_for_turn`)
touching neither the device nor any card. When a re-measure comes, the candidate's files are
staged into its folder and it takes the device slot in its turn, as a gated cold process does; the
next standby starts then. It shares nothing with the candidates that ran while it waited: they run
in other processes, isolated as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path

from gpu_sandbox_service.isolation import ProcessOutcome

Turn = Callable[[], contextlib.AbstractAsyncContextManager[object]]
#: Starts the gated process in a folder; ``turn`` is entered once it is ready (:func:`run_isolated`).
Spawn = Callable[[Path, Turn], Coroutine[object, object, ProcessOutcome]]


class Standby:
    """One waiting process: :meth:`run` hands it the staged folder and returns its outcome."""

    def __init__(self, folder: Path, spawn: Spawn, slot: Turn, timeout_s: float) -> None:
        self.folder = folder
        self.timeout_s = timeout_s  # the run limit it was started with
        self.started_at = time.monotonic()
        self._job: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot = slot
        self._task = asyncio.create_task(spawn(folder, self._turn))

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[object]:
        await self._job  # its candidate's files are in the folder
        async with self._slot() as slot:
            yield slot

    @property
    def available(self) -> bool:
        """Still waiting for a job (it has not ended, nor been given one)."""
        return not self._task.done() and not self._job.done()

    async def run(self) -> tuple[ProcessOutcome, float]:
        """Go: the folder now holds the candidate. The outcome of the process's run, and how long
        before this call the process was started."""
        ahead_s = time.monotonic() - self.started_at
        self._job.set_result(None)
        return await self._task, ahead_s

    async def discard(self) -> None:
        """End the process (if it still runs) and remove its folder."""
        if not self._task.done():
            self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):  # its end is all that is wanted
            await self._task
        await asyncio.to_thread(shutil.rmtree, self.folder, True)

"""A candidate's process, prepared while the candidate builds.

The build (nvcc, about 1.2 s on the H200's host) and the start of the candidate's process (CUDA,
the card's samples, fresh inputs, eager references: about 0.6 s for a 256 MiB card) need nothing
of each other, so they overlap. While a candidate compiles (:class:`Preparation`), it borrows a run
slot; the slot's zygote forks its child as a held job, which prepares and waits
(:mod:`gpu_sandbox_service.harness.zygote`). Once built, the library is moved into the child's
folder and the child goes on to verify and time it, its run timeout starting then. If the build
fails, or the evaluation ends, the child is killed and the slot scrubbed as after any candidate.
The child is forked for this candidate alone, like any other, and runs the same harness.

How slots are held: a slot runs one candidate process at a time (its timing must have the device
to itself, and its zygote serves one child at a time), so a prepared child holds its slot from its
fork to its end. It borrows a slot only when no built candidate waits for one: a free slot, or the
next one freed while it still builds (:meth:`~gpu_sandbox_service.pool.WorkerPool.lend`); and
gives it back as soon as a built candidate asks for one while it is still building: its child is
killed, its preparation lost, and the candidate runs unprepared after its build, in its turn. So a
building candidate never keeps a built one from running, and a slot that would idle while
candidates build prepares the next of them. A spare child per slot, prepared beside the running
one, was the other way; it would put two processes on one device while one is timed, and the
zygote would have to serve two children at once. A candidate built before it got a slot stops
asking and runs unprepared, in its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

from gpu_sandbox_service.forkserver import ForkServer
from gpu_sandbox_service.isolation import ProcessOutcome
from gpu_sandbox_service.pool import Slot, SlotLease, WorkerPool


class PreparedChild:
    """The held child of ``server`` in ``run_dir``, on the slot of ``lease``; it expects its
    candidate's library at ``library``, which is first copied to ``copy_at`` (outside the zygote's
    folder) and then moved in whole."""

    def __init__(self, lease: SlotLease, server: ForkServer, run_dir: Path, library: Path, copy_at: Path) -> None:
        self.lease = lease
        self.server = server
        self.run_dir = run_dir
        self.library = library
        self.copy_at = copy_at
        self._held = False  # forked and waiting for its library: neither claimed nor cancelled
        self._lock = asyncio.Lock()
        self._watch: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float, output_cap_bytes: int, log_tail_bytes: int) -> bool:
        """Fork the child; False when the zygote was lost (the slot is given back then)."""
        try:
            forked = await self.server.submit(self.run_dir, timeout_s, output_cap_bytes, log_tail_bytes, held=True)
        except BaseException:
            await self.server.stop()
            self.lease.end()
            raise
        if not forked:
            self.lease.end()
            return False
        self._held = True
        self._watch = asyncio.create_task(self._give_way())
        return True

    async def _give_way(self) -> None:
        await self.lease.reclaimed.wait()
        await self.cancel()

    async def claim(self) -> Slot | None:
        """The slot, held now for this candidate's run since it is built (the caller ends the lease
        after it); None when it went, or goes now, to a built candidate that asked for it."""
        async with self._lock:
            if self._held and self.lease.keep():
                self._held = False
                self._stop_watching()
                return self.lease.slot
        await self.cancel()
        return None

    async def run(self, library: Path, timeout_s: float) -> ProcessOutcome | None:
        """After :meth:`claim`: ``library`` into the child's folder, then go; how the child ended,
        None when the zygote was lost (the caller runs the candidate in a fresh process)."""
        try:
            await asyncio.to_thread(shutil.copyfile, library, self.copy_at)
            os.rename(self.copy_at, self.library)  # whole, and never through a link in the child's folder
            outcome = await self.server.outcome(timeout_s) if await self.server.release() else None
        except BaseException:
            await self.server.stop()  # its child may still run: the zygote goes with it
            raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.copy_at)
            await self._scrub()
        return outcome

    async def cancel(self) -> None:
        """Kill the held child before its candidate ran, scrub its folder and give the slot back:
        the build failed, the evaluation ended, or a built candidate wants the slot. Nothing once
        claimed."""
        async with self._lock:
            if not self._held:
                return
            self._held = False
            self._stop_watching()
            try:
                await self.server.cancel()
            except BaseException:
                await self.server.stop()
                raise
            finally:
                await self._scrub()
                self.lease.end()

    def _stop_watching(self) -> None:
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()

    async def _scrub(self) -> None:
        if not await asyncio.to_thread(self.server.scrub):
            await self.server.stop()


class Preparation:
    """One candidate's process prepared while it builds: a slot borrowed from ``pool``, then
    ``prepare(lease)`` (the child forked on it; None, the slot given back, where it cannot be)."""

    def __init__(self, pool: WorkerPool, prepare: Callable[[SlotLease], Awaitable[PreparedChild | None]]) -> None:
        self._leasing = asyncio.create_task(pool.lend())
        self._preparing = asyncio.create_task(self._prepare(prepare))

    async def _prepare(self, prepare: Callable[[SlotLease], Awaitable[PreparedChild | None]]
                       ) -> PreparedChild | None:
        try:
            await asyncio.wait([self._leasing])
        except asyncio.CancelledError:
            self._stop_asking()
            raise
        if self._leasing.cancelled():
            return None
        return await prepare(self._leasing.result())

    def _stop_asking(self) -> None:
        """No slot for this candidate any more; one lent already goes back."""
        if not self._leasing.cancel() and not self._leasing.cancelled() and self._leasing.exception() is None:
            self._leasing.result().end()

    async def child(self) -> PreparedChild | None:
        """Once built: the prepared child (its preparation awaited if under way); None when it had
        no slot yet (it stops asking) or could not be prepared."""
        if not self._leasing.done():
            self._leasing.cancel()
        return await asyncio.shield(self._preparing)

    async def discard(self) -> None:
        """At the evaluation's end: the child killed and its slot scrubbed and given back, unless it
        ran its candidate; no slot asked for any more. A preparation under way is awaited, not cut
        short, unless this is cancelled."""
        if not self._leasing.done():
            self._leasing.cancel()
        try:
            await asyncio.wait([self._preparing])
        finally:
            if not self._preparing.done():
                self._preparing.cancel()  # its own end gives the slot back
        if not self._preparing.cancelled() and self._preparing.exception() is None:
            child = self._preparing.result()
            if child is not None:
                await child.cancel()

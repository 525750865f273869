"""Worker slots: one per visible GPU for running (timing is exclusive per GPU), more for compiling.

A cuda sandbox asks for :data:`CANDIDATES_PER_GPU` candidates per run slot (``candidate_slots``), so
the next ones' builds overlap the current one's run.

``kforge serve sandbox --gpus 0,2`` (or ``all``) picks the GPUs explicitly: ``select_gpus`` checks
the ids against the visible ones and the server narrows ``CUDA_VISIBLE_DEVICES`` to them before the
pool is built, so each listed GPU gets one slot whose processes see that GPU alone.

Each candidate gets a fresh process in its slot (forked from the slot's fork server, or started
cold), so a sticky CUDA error dies with the process that caused it and the next candidate starts
clean.

A slot can also be lent (:meth:`WorkerPool.lend`) to a candidate that is still building, whose
process prepares meanwhile (:mod:`gpu_sandbox_service.prepared`): only a slot no built candidate
waits for, and reclaimed as soon as one does, so a building candidate never keeps a built one
from running. Built candidates get slots in the order they asked, then building ones do.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

#: Candidates in flight per GPU: an nvcc build (about 1.3 s on the H200's host) takes longer than a
#: forked candidate's run (about 0.9 s for a 256 MiB card), so two builds in parallel keep the GPU busy.
CANDIDATES_PER_GPU = 3


def visible_gpus(device_count: int) -> list[str]:
    """The GPU ids this sandbox may use: ``CUDA_VISIBLE_DEVICES`` if set, else ``0..count-1``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d.strip() for d in visible.split(",") if d.strip()]
    return [str(i) for i in range(device_count)]


def select_gpus(spec: str, visible: list[str]) -> list[str]:
    """The GPUs ``--gpus`` names: ``all``, or comma-separated ids among ``visible``, in the given order.

    Raises ``ValueError`` naming the visible ids for an unknown, repeated or empty selection.
    """
    if spec.strip().lower() == "all":
        if not visible:
            raise ValueError("--gpus all: no GPU is visible here")
        return list(visible)
    wanted = [s.strip() for s in spec.split(",")]
    shown = ", ".join(visible) or "none"
    if not wanted or any(not w for w in wanted):
        raise ValueError(f"--gpus {spec!r}: expected 'all' or comma-separated GPU ids (visible: {shown})")
    unknown = [w for w in wanted if w not in visible]
    if unknown:
        raise ValueError(f"--gpus {spec!r}: GPU {', '.join(unknown)} not visible here "
                         f"({len(visible)} visible: {shown})")
    repeated = sorted({w for w in wanted if wanted.count(w) > 1})
    if repeated:
        raise ValueError(f"--gpus {spec!r}: GPU {', '.join(repeated)} listed twice (one slot per GPU)")
    return wanted


def candidate_slots(backend: str, run_slots: int) -> int:
    """Candidates a sandbox with ``run_slots`` takes at once. A GPU times one candidate while the
    CPU builds the next ones; a CPU slot would time its candidate against a compiler on the same
    cores, so it takes one at a time."""
    return run_slots * (CANDIDATES_PER_GPU if backend == "cuda" else 1)


def slot_gpus(device_count: int, workers: int | None = None) -> list[str]:
    """The GPU of each cuda run slot: the visible ones, the first ``workers`` of them if given."""
    gpus = visible_gpus(device_count)
    return gpus[:workers] if workers else gpus


@dataclass(frozen=True)
class Slot:
    """One run slot: its number (which names its fork server) and the environment of its processes."""

    index: int
    env: dict[str, str]


class SlotLease:
    """A run slot lent to a candidate still building. ``reclaimed`` is set when a built candidate
    wants a slot: the borrower then gives it back (:meth:`end`) instead of keeping it."""

    def __init__(self, pool: WorkerPool, slot: Slot) -> None:
        self.slot = slot
        self.reclaimed = asyncio.Event()
        self._pool: WorkerPool | None = pool

    def keep(self) -> bool:
        """Hold the slot for the borrower's own run, now that it is built: no longer reclaimable.
        False when it was reclaimed meanwhile (the borrower gives it back) or already given back."""
        if self._pool is None or self.reclaimed.is_set():
            return False
        self._pool._lent.remove(self)
        return True

    def end(self) -> None:
        """Give the slot back (once; kept or not)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            if self in pool._lent:
                pool._lent.remove(self)
            pool._give_back(self.slot)


class WorkerPool:
    """Hands out run slots (each with its process environment) and bounds parallel compiles."""

    def __init__(self, backend: str, device_count: int = 1, workers: int | None = None) -> None:
        if backend == "cuda":
            slots = [{"CUDA_VISIBLE_DEVICES": gpu} for gpu in slot_gpus(device_count, workers)] or [{}]
        else:
            slots = [{} for _ in range(max(1, workers or 1))]
        self.size = len(slots)
        self._envs = slots
        self.candidate_slots = candidate_slots(backend, self.size)
        self._free = deque(Slot(index, env) for index, env in enumerate(slots))
        self._waiting: deque[asyncio.Future[Slot]] = deque()
        self._borrowing: deque[asyncio.Future[SlotLease]] = deque()
        self._lent: list[SlotLease] = []
        self.compile_slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))

    def sole_slot_env(self) -> dict[str, str] | None:
        """The environment of the one run slot, where there is only one: a process can then be
        started for that slot before it is free."""
        return dict(self._envs[0]) if self.size == 1 else None

    @contextlib.asynccontextmanager
    async def run_slot(self) -> AsyncIterator[Slot]:
        """Exclusive use of one device slot, for a candidate that is ready to run."""
        slot = await self._take()
        try:
            yield slot
        finally:
            self._give_back(slot)

    async def lend(self) -> SlotLease:
        """A slot for a candidate that is still building: a free one, or the next one freed while
        no built candidate waits. Cancelled when the candidate is built first."""
        if self._free and not self._waiting and not self._borrowing:
            return self._lease(self._free.popleft())
        borrower: asyncio.Future[SlotLease] = asyncio.get_running_loop().create_future()
        self._borrowing.append(borrower)
        try:
            return await borrower
        except asyncio.CancelledError:
            if borrower.done() and not borrower.cancelled():
                borrower.result().end()
            elif borrower in self._borrowing:
                self._borrowing.remove(borrower)
            raise

    def _lease(self, slot: Slot) -> SlotLease:
        lease = SlotLease(self, slot)
        self._lent.append(lease)
        return lease

    async def _take(self) -> Slot:
        if self._free and not self._waiting:
            return self._free.popleft()
        waiter: asyncio.Future[Slot] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        unasked = [lease for lease in self._lent if not lease.reclaimed.is_set()]
        if unasked:
            unasked[-1].reclaimed.set()  # the latest lent: its build has the longest to go
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._give_back(waiter.result())
            elif waiter in self._waiting:
                self._waiting.remove(waiter)
            raise

    def _give_back(self, slot: Slot) -> None:
        """To the built candidate that has waited longest, else lent to the building one that has,
        else free."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(slot)
                return
        while self._borrowing:
            borrower = self._borrowing.popleft()
            if not borrower.done():
                borrower.set_result(self._lease(slot))
                return
        self._free.append(slot)

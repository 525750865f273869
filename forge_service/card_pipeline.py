"""Card searches in turn, each next one starting as soon as the one before has sent its last candidates.

A card's first verdict waits for its first proposals, their builds and its samples; searched strictly
one after another, the sandboxes idle through that at every card while the card before only finishes
its last runs. Here the next card proposes and builds while those runs end. At most two cards are in
flight, the earlier one only finishing what it sent; a failure of either ends both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import TracebackType

#: A card's search, given the event it sets once it will send no more candidates.
SearchFn = Callable[[asyncio.Event], Awaitable[None]]


class CardPipeline:
    """Use as ``async with CardPipeline() as pipeline``: leaving it waits for the last card, or on a
    failure or cancellation cancels what still runs."""

    def __init__(self) -> None:
        self._draining: asyncio.Task[None] | None = None
        self._running: set[str] = set()

    @property
    def running(self) -> frozenset[str]:
        """The cards whose search has started and not ended."""
        return frozenset(self._running)

    async def start(self, card_id: str, search: SearchFn) -> None:
        """Start ``search`` of ``card_id`` and return once it has sent its last candidates (or ended)
        and the card before it has ended; the failure of either is raised here."""
        issued = asyncio.Event()
        task = asyncio.create_task(self._run(card_id, search, issued), name=f"card-{card_id}")
        try:
            waiter = asyncio.create_task(issued.wait())
            try:
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            await self.drain()
        except BaseException:
            await _cancelled(task)
            raise
        if task.done():
            task.result()
        self._draining = task

    async def drain(self) -> bool:
        """Wait for the card still finishing, if any; False when there was none."""
        task, self._draining = self._draining, None
        if task is None:
            return False
        await task
        return True

    async def _run(self, card_id: str, search: SearchFn, issued: asyncio.Event) -> None:
        self._running.add(card_id)
        try:
            await search(issued)
        finally:
            self._running.discard(card_id)
            issued.set()

    async def __aenter__(self) -> CardPipeline:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if kind is None:
            await self.drain()
            return
        task, self._draining = self._draining, None
        if task is not None:
            await _cancelled(task)


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end, whatever it ends with (a cancellation of the caller
    itself still reaches the caller)."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

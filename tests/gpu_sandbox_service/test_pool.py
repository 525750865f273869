"""Run slots lent to candidates still building: lent only when free and nobody waits, reclaimed
for a built candidate, handed to waiters in the order they asked."""

from __future__ import annotations

import asyncio

from gpu_sandbox_service.pool import Slot, WorkerPool


def test_a_free_slot_is_lent_and_a_taken_one_is_not() -> None:
    async def scenario() -> None:
        pool = WorkerPool("cpu")
        lease = pool.lend()
        assert lease is not None and pool.lend() is None
        assert lease.keep()  # built: an ordinary hold now, which nobody can reclaim
        lease.end()
        lease.end()  # once only
        again = pool.lend()
        assert again is not None and pool.lend() is None
        again.end()

    asyncio.run(scenario())


def test_a_built_candidate_reclaims_the_slot_of_one_still_building() -> None:
    async def scenario() -> None:
        pool = WorkerPool("cpu")
        lease = pool.lend()
        assert lease is not None
        waiting = asyncio.create_task(_take(pool))
        await asyncio.sleep(0)
        assert lease.reclaimed.is_set() and not waiting.done()
        assert pool.lend() is None  # nothing is lent while a built candidate waits
        assert not lease.keep()  # reclaimed: its borrower gives it back instead
        lease.end()
        assert (await waiting).index == 0

    asyncio.run(scenario())


def test_waiters_get_slots_in_the_order_they_asked_and_a_cancelled_one_loses_its_turn() -> None:
    async def scenario() -> None:
        pool = WorkerPool("cpu")
        order: list[str] = []

        async def wait(name: str) -> None:
            async with pool.run_slot():
                order.append(name)
                await asyncio.sleep(0.01)

        async with pool.run_slot():
            first = asyncio.create_task(wait("first"))
            await asyncio.sleep(0)
            gone = asyncio.create_task(wait("gone"))
            await asyncio.sleep(0)
            second = asyncio.create_task(wait("second"))
            await asyncio.sleep(0)
            gone.cancel()
            await asyncio.sleep(0)
            assert pool.lend() is None
        await asyncio.gather(first, second)
        assert order == ["first", "second"]
        lease = pool.lend()
        assert lease is not None  # free again, and nobody waits
        lease.end()

    asyncio.run(scenario())


async def _take(pool: WorkerPool) -> Slot:
    async with pool.run_slot() as slot:
        return slot

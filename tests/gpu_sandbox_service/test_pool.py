"""Run slots lent to candidates still building: only where no built candidate waits, reclaimed for
one that does, freed slots to built candidates first and in the order they asked."""

from __future__ import annotations

import asyncio

from gpu_sandbox_service.pool import WorkerPool


def test_a_free_slot_is_lent_at_once_and_a_taken_one_when_it_is_freed() -> None:
    async def scenario() -> None:
        pool = WorkerPool("cpu")
        lease = await pool.lend()
        asking = asyncio.create_task(pool.lend())
        await asyncio.sleep(0)
        assert not asking.done()
        assert lease.keep()  # built: an ordinary hold now, which nobody can reclaim
        lease.end()
        lease.end()  # once only
        again = await asking
        assert again.slot.index == 0
        stopped = asyncio.create_task(pool.lend())
        await asyncio.sleep(0)
        stopped.cancel()  # its candidate was built first
        again.end()
        (await pool.lend()).end()  # free: nobody asks any more

    asyncio.run(scenario())


def test_a_built_candidate_reclaims_the_slot_of_one_still_building() -> None:
    async def scenario() -> None:
        pool = WorkerPool("cpu")
        lease = await pool.lend()
        running, done = asyncio.Event(), asyncio.Event()

        async def built() -> None:
            async with pool.run_slot():
                running.set()
                await done.wait()

        waiting = asyncio.create_task(built())
        await asyncio.sleep(0)
        assert lease.reclaimed.is_set() and not running.is_set()
        asking = asyncio.create_task(pool.lend())  # lent only once no built candidate waits
        await asyncio.sleep(0)
        assert not lease.keep()  # reclaimed: its borrower gives it back instead
        lease.end()
        await running.wait()
        assert not asking.done()
        done.set()
        await waiting
        assert (await asking).slot.index == 0

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
        await asyncio.gather(first, second)
        assert order == ["first", "second"]
        (await pool.lend()).end()  # free again, and nobody waits

    asyncio.run(scenario())

import asyncio

import pytest

from servicekit import metrics
from servicekit.errors import ResourceExhausted
from servicekit.limits import ClientLimiter, ClientUsage


@pytest.mark.parametrize(("running", "queued"), [(0, 1), (1, -1)])
def test_limits_must_be_sensible(running, queued):
    with pytest.raises(ValueError, match="must be at least"):
        ClientLimiter(running, queued)


def test_running_queued_and_refused_per_client():
    async def scenario():
        limiter = ClientLimiter(max_concurrent=2, max_queue=1, name="unit_a")
        release = asyncio.Event()
        order: list[int] = []

        async def hold(client: str, n: int) -> None:
            async with limiter(client):
                order.append(n)
                await release.wait()

        tasks = [asyncio.ensure_future(hold("a", n)) for n in range(3)]
        await asyncio.sleep(0.01)
        assert limiter.usage("a") == ClientUsage(running=2, queued=1)
        assert metrics.QUEUE_LENGTH.labels(queue="unit_a")._value.get() == 1
        with pytest.raises(ResourceExhausted, match=r"client a has 2 requests running and 1 queued"):
            async with limiter("a"):
                pass
        async with limiter("b"):  # another client has its own slots
            assert limiter.usage("b") == ClientUsage(1, 0)
        release.set()
        await asyncio.gather(*tasks)
        assert order == [0, 1, 2]
        assert limiter.usage("a") == ClientUsage(0, 0)
        assert metrics.QUEUE_LENGTH.labels(queue="unit_a")._value.get() == 0
        assert limiter._clients == {}

    asyncio.run(scenario())


def test_zero_queue_refuses_as_soon_as_slots_are_full():
    async def scenario():
        limiter = ClientLimiter(max_concurrent=1, max_queue=0, name="unit_b")
        rejected = metrics.CLIENT_LIMIT_REJECTIONS.labels(limiter="unit_b")._value.get()
        async with limiter("a"):
            with pytest.raises(ResourceExhausted):
                async with limiter("a"):
                    pass
        assert metrics.CLIENT_LIMIT_REJECTIONS.labels(limiter="unit_b")._value.get() == rejected + 1
        async with limiter("a"):
            pass

    asyncio.run(scenario())


def test_cancelled_waiter_gives_up_its_queue_place_without_taking_a_slot():
    async def scenario():
        limiter = ClientLimiter(max_concurrent=1, max_queue=1)
        release = asyncio.Event()

        async def hold() -> None:
            async with limiter("a"):
                await release.wait()

        holder = asyncio.ensure_future(hold())
        await asyncio.sleep(0.01)
        waiter = asyncio.ensure_future(hold())
        await asyncio.sleep(0.01)
        assert limiter.usage("a") == ClientUsage(1, 1)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert limiter.usage("a") == ClientUsage(1, 0)
        release.set()
        await holder
        assert limiter.usage("a") == ClientUsage(0, 0)

    asyncio.run(scenario())


def test_waiter_cancelled_just_after_being_granted_releases_the_slot():
    async def scenario():
        limiter = ClientLimiter(max_concurrent=1, max_queue=1)
        first_in = asyncio.Event()
        release = asyncio.Event()

        async def first() -> None:
            async with limiter("a"):
                first_in.set()
                await release.wait()

        async def second() -> None:
            async with limiter("a"):
                pytest.fail("the cancelled waiter must not run")

        holder = asyncio.ensure_future(first())
        await first_in.wait()
        waiter = asyncio.ensure_future(second())
        await asyncio.sleep(0.01)
        release.set()
        await holder  # hands the slot to the waiter, which has not resumed yet
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        assert limiter.usage("a") == ClientUsage(0, 0)
        async with limiter("a"):
            assert limiter.usage("a") == ClientUsage(1, 0)

    asyncio.run(scenario())


def test_exceptions_inside_release_the_slot():
    async def scenario():
        limiter = ClientLimiter(max_concurrent=1, max_queue=0)
        with pytest.raises(RuntimeError):
            async with limiter("a"):
                raise RuntimeError("evaluation failed")
        assert limiter.usage("a") == ClientUsage(0, 0)

    asyncio.run(scenario())

"""Cards in turn: the next starts once the one before has sent its last candidates, never more than two
run, and a failure or cancellation of either ends both."""

from __future__ import annotations

import asyncio

import pytest

from forge_service.card_pipeline import CardPipeline


class Card:
    """A card's search as the pipeline sees it: sends its candidates, then finishes them when told."""

    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail
        self.finish = asyncio.Event()
        self.cancelled = False

    async def search(self, issued: asyncio.Event) -> None:
        self.log.append(f"{self.name} sends")
        issued.set()
        try:
            await self.finish.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.fail:
            raise RuntimeError(f"{self.name} failed")
        self.log.append(f"{self.name} ends")


def test_the_next_card_starts_when_the_one_before_has_sent_its_last_and_waits_for_it() -> None:
    async def main() -> list[str]:
        log: list[str] = []
        a, b, c = Card("a", log), Card("b", log), Card("c", log)
        async with CardPipeline() as pipeline:
            await pipeline.start("a", a.search)
            assert pipeline.running == {"a"}
            starting_b = asyncio.create_task(pipeline.start("b", b.search))
            await asyncio.sleep(0.01)
            assert log == ["a sends", "b sends"] and not starting_b.done()  # b runs, a still finishing
            assert pipeline.running == {"a", "b"}
            a.finish.set()
            await starting_b
            starting_c = asyncio.create_task(pipeline.start("c", c.search))
            await asyncio.sleep(0.01)
            assert pipeline.running == {"b", "c"}  # never more than two
            b.finish.set()
            c.finish.set()
            await starting_c
            assert await pipeline.drain() and not await pipeline.drain()  # c was still finishing, then none
        assert pipeline.running == frozenset()
        return log

    assert asyncio.run(main()) == ["a sends", "b sends", "a ends", "c sends", "b ends", "c ends"]


def test_a_failure_of_the_card_before_is_raised_and_the_next_card_cancelled() -> None:
    async def main() -> Card:
        log: list[str] = []
        a, b = Card("a", log, fail=True), Card("b", log)
        async with CardPipeline() as pipeline:
            await pipeline.start("a", a.search)
            a.finish.set()
            await pipeline.start("b", b.search)
        return b

    with pytest.raises(RuntimeError, match="a failed"):
        asyncio.run(main())


def test_a_cancelled_run_cancels_the_card_still_finishing() -> None:
    async def main() -> tuple[Card, Card]:
        log: list[str] = []
        a, b = Card("a", log), Card("b", log)

        async def run() -> None:
            async with CardPipeline() as pipeline:
                await pipeline.start("a", a.search)
                await pipeline.start("b", b.search)

        task = asyncio.create_task(run())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return a, b

    a, b = asyncio.run(main())
    assert a.cancelled and b.cancelled


def test_a_card_that_ends_without_sending_lets_the_next_start() -> None:
    async def main() -> list[str]:
        log: list[str] = []

        async def nothing_to_propose(issued: asyncio.Event) -> None:
            log.append("a proposed nothing")

        b = Card("b", log)
        b.finish.set()
        async with CardPipeline() as pipeline:
            await pipeline.start("a", nothing_to_propose)
            assert pipeline.running == frozenset()
            await pipeline.start("b", b.search)
        return log

    assert asyncio.run(main()) == ["a proposed nothing", "b sends", "b ends"]

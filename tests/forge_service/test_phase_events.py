import asyncio
import logging

import pytest

from forge_service.phase_events import announce, phase_events

log = logging.getLogger("tests.phase_events")


def test_a_step_announced_in_a_worker_thread_reaches_the_runs_sink() -> None:
    heard: list[str] = []

    async def run() -> None:
        with phase_events(heard.append):
            await asyncio.to_thread(announce, "measuring the model end to end", log)
        await asyncio.to_thread(announce, "after the block", log)

    asyncio.run(run())
    assert heard == ["measuring the model end to end"]


def test_without_a_sink_a_step_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=log.name):
        announce("pruning aten::relu from eager use", log)
    assert [r.getMessage() for r in caplog.records] == ["pruning aten::relu from eager use"]

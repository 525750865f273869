"""A candidate's process prepared while the candidate builds, with real fork servers on the cpu:
the verdicts a cold process gives, the preparation visibly ahead of the library, nothing left
behind when the build fails, the candidate crashes or the evaluation is cancelled, a built
candidate never kept waiting by one still building, and a slot freed during a build used for it."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.forkserver import ForkServer
from kforge_domain.card import OperatorCard
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.result import CandidateResult
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus, softmax_card

CORPUS = {e.name: e.source for e in load_corpus("cpu")}
FAST = EvaluationOptions(fresh_input_sets=1, timing_runs=3)
# About a second more of g++ (the regex header); about six once its templates are instantiated.
SLOW_BUILD = "#include <regex>\nstatic bool kf_slow(const char *s) { return std::regex_match(s, std::regex(\"a\")); }\n"
SLOWER_BUILD = "#include <regex>\nbool kf_slower(const char *s) { return std::regex_match(s, std::regex(\"a\")); }\n"


@pytest.fixture
def evaluator(tmp_path: Path) -> Evaluator:
    limits = TEST_LIMITS.model_copy(update={"static_audit": False, "run_timeout_s": 8})
    return Evaluator(tmp_path, "cpu", BlobStore(tmp_path / "blobs"), limits, fork_server=True, prepare=True)


def request(card: OperatorCard, name: str, source: str) -> EvaluateRequest:
    return EvaluateRequest(candidate_id=name, card=card, source=f"// {name}\n{source}", backend="cpu", options=FAST)


def in_one_loop(evaluator: Evaluator, scenario: Callable[[OperatorCard], Awaitable[None]]) -> None:
    """``scenario`` in one event loop (one fork server per slot), the fork servers stopped after."""
    card = softmax_card(evaluator.blobs)

    async def run() -> None:
        try:
            await scenario(card)
        finally:
            await evaluator.close()

    asyncio.run(run())


def processes_below(folder: Path) -> list[int]:
    """Pids of the processes working in a folder below ``folder``: candidate processes, not their zygote."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError):
            if entry.isdigit() and os.readlink(f"/proc/{entry}/cwd").startswith(f"{folder}/"):
                found.append(int(entry))
    return found


async def until_prepared(folder: Path) -> None:
    """Until a candidate process works below ``folder``: one was forked and prepares."""
    for _ in range(400):
        if processes_below(folder):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("no process was prepared while the candidate built")


async def slow_build_prepared(evaluator: Evaluator, card: OperatorCard
                              ) -> tuple[ForkServer, asyncio.Task[CandidateResult]]:
    """After a first candidate (which starts the zygote and fills the compile cache), a slowly
    building one, once its process is prepared; its fork server and its evaluation."""
    await evaluator.evaluate(request(card, "cached", CORPUS["softmax_ok"]))
    server = evaluator._fork_servers[0]
    building = asyncio.create_task(evaluator.evaluate(request(card, "slow", SLOWER_BUILD + CORPUS["softmax_ok"])))
    await until_prepared(server.root)
    return server, building


def test_a_prepared_candidate_gets_the_verdict_a_cold_process_gives(evaluator: Evaluator, tmp_path: Path) -> None:
    names = ["softmax_ok", "wrong_values", "unwritten_output", "crash_segfault"]
    prepared: list[CandidateResult] = []

    async def scenario(card: OperatorCard) -> None:
        for name in names:
            prepared.append(await evaluator.evaluate(request(card, name, CORPUS[name])))

    in_one_loop(evaluator, scenario)
    # a cold process imports torch inside its run limit: on a loaded 2-core machine that alone took
    # over the 8 s the prepared ones get, and the crash became a TIMEOUT; the verdicts are compared here
    roomy = evaluator.limits.model_copy(update={"run_timeout_s": 60})
    cold = Evaluator(tmp_path / "cold", "cpu", evaluator.blobs, roomy, fork_server=False)
    cold_results: list[CandidateResult] = []

    async def cold_scenario(card: OperatorCard) -> None:
        for name in names:
            cold_results.append(await cold.evaluate(request(card, name, CORPUS[name])))

    in_one_loop(cold, cold_scenario)
    assert [r.status.value for r in prepared] == [r.status.value for r in cold_results] == [
        "PASSED", "WRONG_RESULT", "WRONG_RESULT", "RUNTIME_ERROR"], [r.error_message for r in prepared]
    assert prepared[1].error_message.split(" on ")[0] == cold_results[1].error_message.split(" on ")[0]
    assert not any(r.prepared_ahead_s for r in cold_results)


def test_a_failed_build_or_a_crash_leaves_nothing_and_the_next_is_prepared_while_it_builds(
        evaluator: Evaluator) -> None:
    async def scenario(card: OperatorCard) -> None:
        warm = await evaluator.evaluate(request(card, "warm", CORPUS["softmax_ok"]))  # starts the zygote
        server = evaluator._fork_servers[0]
        forked = server.candidates
        broken = await evaluator.evaluate(request(card, "broken", "int kf_launch( {"))
        assert broken.status.value == "COMPILE_ERROR" and server.candidates == forked + 1  # it had a child
        assert processes_below(server.root) == [] and list(server.root.iterdir()) == []
        crash = await evaluator.evaluate(request(card, "crash", CORPUS["crash_segfault"]))
        slow = await evaluator.evaluate(request(card, "slow", SLOW_BUILD + CORPUS["softmax_ok"]))
        assert [r.status.value for r in (warm, crash, slow)] == ["PASSED", "RUNTIME_ERROR", "PASSED"], \
            slow.error_message + slow.log_tail
        assert evaluator._fork_servers[0] is server and server.candidates == forked + 3
        # Its inputs and references were ready before its library: its start is the hand-over alone.
        assert slow.prepared_ahead_s > 0 and slow.start_s < slow.prepared_ahead_s
        assert slow.compile_s + slow.start_s < slow.total_s

    in_one_loop(evaluator, scenario)


def test_a_cancelled_evaluation_kills_its_prepared_process(evaluator: Evaluator) -> None:
    async def scenario(card: OperatorCard) -> None:
        server, building = await slow_build_prepared(evaluator, card)
        building.cancel()
        with pytest.raises(asyncio.CancelledError):
            await building
        assert processes_below(server.root) == [] and list(server.root.iterdir()) == []
        after = await asyncio.wait_for(evaluator.evaluate(request(card, "after", SLOW_BUILD + CORPUS["softmax_ok"])),
                                       60)
        assert after.status.value == "PASSED" and after.prepared_ahead_s > 0

    in_one_loop(evaluator, scenario)


def test_a_built_candidate_takes_the_slot_of_one_still_building(evaluator: Evaluator) -> None:
    async def scenario(card: OperatorCard) -> None:
        _, building = await slow_build_prepared(evaluator, card)
        built = await evaluator.evaluate(request(card, "cached", CORPUS["softmax_ok"]))  # from the compile cache
        slow = await building
        assert built.status.value == slow.status.value == "PASSED", slow.error_message + slow.log_tail
        assert built.compile_s == 0.0 and built.total_s < slow.compile_s  # it did not wait for the build
        assert slow.prepared_ahead_s == 0.0  # its prepared process gave the slot up; it started after its build

    in_one_loop(evaluator, scenario)


def test_a_slot_freed_while_a_candidate_builds_prepares_its_process(evaluator: Evaluator) -> None:
    async def scenario(card: OperatorCard) -> None:
        await evaluator.evaluate(request(card, "cached", CORPUS["softmax_ok"]))
        running = asyncio.create_task(evaluator.evaluate(request(card, "cached", CORPUS["softmax_ok"])))
        await asyncio.sleep(0.1)  # it has the slot
        slow = await evaluator.evaluate(request(card, "slow", SLOWER_BUILD + CORPUS["softmax_ok"]))
        first = await running
        assert first.status.value == slow.status.value == "PASSED", slow.error_message + slow.log_tail
        assert first.total_s < slow.compile_s and slow.prepared_ahead_s > 0

    in_one_loop(evaluator, scenario)


def test_by_default_no_process_is_prepared_ahead(tmp_path: Path) -> None:
    plain = Evaluator(tmp_path, "cpu", BlobStore(tmp_path / "blobs"), TEST_LIMITS, fork_server=True)
    assert not plain.prepare_enabled

    async def scenario(card: OperatorCard) -> None:
        result = await plain.evaluate(request(card, "plain", CORPUS["softmax_ok"]))
        assert result.status.value == "PASSED", result.error_message + result.log_tail
        assert result.prepared_ahead_s == 0.0

    in_one_loop(plain, scenario)

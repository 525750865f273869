"""The fork server with real processes: one candidate's crash, hang, killed zygote or leftovers
(environment, files in its folder, its zygote's folder and /tmp, a daemon) never reach the next."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.evaluator import Evaluator
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.result import CandidateResult
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus, softmax_card

CORPUS = {e.name: e.source for e in load_corpus("cpu")}
FAST = EvaluationOptions(fresh_input_sets=1, timing_runs=3)  # five warm-up calls: the sandbox's

LEAVES_TRACES = """
#include "kf_abi.h"
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  setenv("KF_LEAK", "1", 1);
  const char *paths[] = {"kf_leak", "../kf_leak", "/tmp/kf_leak"};
  for (const char *path : paths) {
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
  }
  if (fork() == 0) { setsid(); for (;;) { FILE *f = fopen("/tmp/kf_daemon", "w"); if (f) fclose(f); usleep(1000); } }
  return 1;
}
"""

KILLS_ITS_PARENT = """
#include "kf_abi.h"
#include <signal.h>
#include <unistd.h>
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  kill(getppid(), SIGKILL);
  return 1;
}
"""


def checks_for_traces(softmax: str) -> str:
    """``softmax`` that fails (returns 7) where it sees any trace ``LEAVES_TRACES`` leaves."""
    return ("#define kf_launch kf_softmax\n" + softmax + "\n#undef kf_launch\n#include <cstdlib>\n#include <unistd.h>\n"
            'extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *s) {\n'
            '  if (getenv("KF_LEAK") || !access("kf_leak", F_OK) || !access("../kf_leak", F_OK)\n'
            '      || !access("/tmp/kf_leak", F_OK)) return 7;\n'
            '  unlink("/tmp/kf_daemon"); usleep(20000);\n'
            '  if (!access("/tmp/kf_daemon", F_OK)) return 8;\n'
            "  return kf_softmax(in, n_in, out, n_out, s);\n}\n")


@pytest.fixture
def evaluator(tmp_path: Path) -> Evaluator:
    limits = TEST_LIMITS.model_copy(update={"static_audit": False, "run_timeout_s": 8})
    return Evaluator(tmp_path, "cpu", BlobStore(tmp_path / "blobs"), limits, fork_server=True)


def evaluate_in_turn(evaluator: Evaluator, sources: list[str], options: EvaluationOptions = FAST
                     ) -> tuple[list[CandidateResult], list[int]]:
    """The candidates one after the other in one event loop (one fork server), with the identity
    of the fork server each ran under."""
    card = softmax_card(evaluator.blobs)

    async def run() -> tuple[list[CandidateResult], list[int]]:
        results, servers = [], []
        try:
            for i, source in enumerate(sources):
                results.append(await evaluator.evaluate(EvaluateRequest(
                    candidate_id=str(i), card=card, source=f"// {i}\n{source}", backend="cpu", options=options)))
                servers.append(id(evaluator._fork_servers.get(0)))
        finally:
            await evaluator.close()
        return results, servers

    return asyncio.run(run())


def test_a_crash_harms_neither_the_next_candidate_nor_the_fork_server(evaluator: Evaluator) -> None:
    results, servers = evaluate_in_turn(evaluator, [CORPUS["softmax_ok"], CORPUS["crash_segfault"],
                                                    CORPUS["abort"], CORPUS["softmax_ok"]])
    assert [r.status.value for r in results] == ["PASSED", "RUNTIME_ERROR", "RUNTIME_ERROR", "PASSED"], \
        [r.error_message for r in results]
    assert "SIGSEGV" in results[1].error_message
    assert evaluator.fork_server_enabled and len(set(servers)) == 1


def test_a_hang_is_killed_at_its_timeout_and_the_next_candidate_runs(evaluator: Evaluator) -> None:
    options = replace(FAST, run_timeout_s=3.0)
    results, servers = evaluate_in_turn(evaluator, [CORPUS["hang"], CORPUS["softmax_ok"]], options)
    assert [r.status.value for r in results] == ["TIMEOUT", "PASSED"], [r.error_message for r in results]
    assert results[0].total_s < 15 and len(set(servers)) == 1


def test_no_trace_of_one_candidate_reaches_the_next(evaluator: Evaluator) -> None:
    """Environment, files in its folder, in the zygote's folder and in /tmp, and a daemon it forked."""
    results, _ = evaluate_in_turn(evaluator, [LEAVES_TRACES, checks_for_traces(CORPUS["softmax_ok"])])
    assert results[0].status.value == "RUNTIME_ERROR", results[0].error_message + results[0].log_tail
    assert results[1].status.value == "PASSED", results[1].error_message + results[1].log_tail


def test_a_killed_zygote_costs_only_the_candidate_that_killed_it(evaluator: Evaluator) -> None:
    results, servers = evaluate_in_turn(evaluator, [CORPUS["softmax_ok"], KILLS_ITS_PARENT, CORPUS["softmax_ok"]])
    assert [r.status.value for r in results] == ["PASSED", "RUNTIME_ERROR", "PASSED"], \
        [r.error_message for r in results]
    assert evaluator.fork_server_enabled and servers[0] != servers[2]  # a new zygote took over


def test_the_cold_path_stays_available(tmp_path: Path) -> None:
    cold = Evaluator(tmp_path, "cpu", BlobStore(tmp_path / "blobs"), TEST_LIMITS, fork_server=False)
    results, _ = evaluate_in_turn(cold, [CORPUS["softmax_ok"]])
    assert results[0].status.value == "PASSED" and not cold._fork_servers

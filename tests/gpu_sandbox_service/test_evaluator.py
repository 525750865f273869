"""The evaluator end to end on the cpu backend, with cards built from real calls."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from agent_service.offline.proposer import propose_offline
from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cardkit import card_from_call
from gpu_sandbox_service.evaluator import Evaluator
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.propose_request import ProposeRequest
from servicekit.errors import FailedPrecondition, InvalidArgument
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus, softmax_card

SOFTMAX_OK = next(e for e in load_corpus("cpu") if e.name == "softmax_ok").source

ADD = """
#include "kf_abi.h"
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  const float *a = (const float *)in[0].data, *b = (const float *)in[1].data;
  float *y = (float *)out[0].data;
  const int64_t rows = out[0].shape[0], cols = out[0].shape[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)  /* the output is column-major like a; b is broadcast: stride 0 */
      y[r * out[0].stride[0] + c * out[0].stride[1]] =
          a[r * in[0].stride[0] + c * in[0].stride[1]] + 2.0f * b[r * in[1].stride[0] + c * in[1].stride[1]];
  return 0;
}
"""


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Evaluator:
    root = tmp_path_factory.mktemp("evaluator")
    return Evaluator(root, "cpu", BlobStore(root / "blobs"), TEST_LIMITS)


def run(evaluator: Evaluator, request: EvaluateRequest):  # type: ignore[no-untyped-def]
    return asyncio.run(evaluator.evaluate(request))


def test_passing_candidate_is_remeasured_and_ships_its_artifact(evaluator: Evaluator) -> None:
    card = softmax_card(evaluator.blobs, rows=128, cols=512)
    options = EvaluationOptions(fresh_input_sets=2, timing_runs=11, remeasure=True)
    result = run(evaluator, EvaluateRequest(candidate_id="ok", card=card, source=SOFTMAX_OK, backend="cpu",
                                              options=options))
    assert result.status.value == "PASSED", result.error_message + result.log_tail
    assert result.remeasured and result.artifact.startswith(b"\x7fELF")
    run_figures = result.figures
    assert run_figures and run_figures.latency_us and run_figures.eager_latency_us and run_figures.speedup
    assert run_figures.speedup == pytest.approx(run_figures.eager_latency_us / run_figures.latency_us)
    assert run_figures.floor_us and run_figures.latency_us > run_figures.floor_us * TEST_LIMITS.floor_slack
    assert result.audit_class == "custom" and result.toolchain.startswith("g++") and result.arch.startswith("cpu")
    again = run(evaluator, EvaluateRequest(candidate_id="ok2", card=card, source=SOFTMAX_OK, backend="cpu",
                                             options=EvaluationOptions(fresh_input_sets=1, timing_runs=3)))
    assert again.status.value == "PASSED" and again.compile_s == 0.0  # served from the compile cache
    # one method for every measurement of the card: the re-measure of a would-be best evicts too
    assert "each call starts cold by evicting its operands" in again.log_tail, again.log_tail
    assert "each call starts cold by evicting its operands" in result.log_tail, result.log_tail


def test_a_candidate_far_below_the_cards_best_stops_timing_early_and_is_not_remeasured(
        evaluator: Evaluator) -> None:
    card = softmax_card(evaluator.blobs, rows=128, cols=512)
    options = EvaluationOptions(fresh_input_sets=1, timing_runs=40, remeasure=True, best_speedup=1e6)
    result = run(evaluator, EvaluateRequest(candidate_id="slow", card=card, source=SOFTMAX_OK, backend="cpu",
                                              options=options))
    assert result.status.value == "PASSED", result.error_message + result.log_tail
    assert "timing stopped after 10 of 40 calls: clearly slower than the card's best speedup of 1e+06" \
        in result.log_tail
    assert not result.remeasured  # the fresh process is for a candidate that would become the best
    beaten = replace(options, best_speedup=1e-6)
    result = run(evaluator, EvaluateRequest(candidate_id="best", card=card, source=SOFTMAX_OK, backend="cpu",
                                              options=beaten))
    assert result.status.value == "PASSED" and result.remeasured and "timing stopped" not in result.log_tail


def test_a_4_mb_group_norm_kernel_is_judged_against_the_floor_of_its_working_set(evaluator: Evaluator) -> None:
    """The card whose kernels were rejected as faster than DRAM allows: its 8 MB working set stays
    in the last-level cache, so the floor reads the bandwidth measured at that size, and a floor
    eager itself beats would be none."""
    torch.manual_seed(0)
    card = card_from_call("aten::group_norm.default", [torch.randn(1, 64, 128, 128), 32, torch.randn(64),
                                                       torch.randn(64), 1e-5, False], {}, evaluator.blobs)
    proposal = propose_offline(ProposeRequest(card=card, device=DeviceInfo(sm_count=2)))
    assert proposal.has_proposal, proposal.no_proposal_reason
    result = run(evaluator, EvaluateRequest(candidate_id="gn", card=card, source=proposal.source, backend="cpu",
                                              options=EvaluationOptions(fresh_input_sets=1, timing_runs=7)))
    assert result.status.value == "PASSED", result.error_message + result.log_tail
    figures = result.figures
    assert figures and figures.eager_latency_us and figures.floor_us is not None
    assert figures.floor_us < figures.eager_latency_us


def test_strided_and_broadcast_inputs_with_a_scalar_argument(evaluator: Evaluator) -> None:
    a = torch.randn(16, 8).t().contiguous().t()  # column-major
    b = torch.randn(8).expand(16, 8)
    card = card_from_call("aten::add.Tensor", [a, b], {"alpha": 2}, evaluator.blobs)
    assert card.inputs[0].stride == [1, 16] and card.inputs[1].stride == [0, 1] and card.outputs[0].stride == [1, 16]
    result = run(evaluator, EvaluateRequest(candidate_id="add", card=card, source=ADD, backend="cpu",
                                              options=EvaluationOptions(timing_runs=3)))
    assert result.status.value == "PASSED", result.error_message + result.log_tail
    wrong = ADD.replace("2.0f * b", "b")
    result = run(evaluator, EvaluateRequest(candidate_id="add-alpha-ignored", card=card, source=wrong,
                                              backend="cpu", options=EvaluationOptions(timing_runs=3)))
    assert result.status.value == "WRONG_RESULT" and "tolerance" in result.error_message


def test_compile_errors_carry_the_compiler_log(evaluator: Evaluator) -> None:
    card = softmax_card(evaluator.blobs)
    result = run(evaluator, EvaluateRequest(candidate_id="broken", card=card, source="int kf_launch( {",
                                              backend="cpu"))
    assert result.status.value == "COMPILE_ERROR" and "error" in result.log_tail
    assert "candidate.cpp" in result.log_tail


def test_bad_requests_raise_with_the_problem_named(evaluator: Evaluator, tmp_path: Path) -> None:
    card = softmax_card(evaluator.blobs)
    with pytest.raises(InvalidArgument, match="backend"):
        run(evaluator, EvaluateRequest(candidate_id="x", card=card, source=SOFTMAX_OK, backend="cuda"))
    with pytest.raises(InvalidArgument, match="empty"):
        run(evaluator, EvaluateRequest(candidate_id="x", card=card, source="  ", backend="cpu"))
    elsewhere = softmax_card(BlobStore(tmp_path), rows=3, cols=5)
    with pytest.raises(FailedPrecondition, match="not uploaded"):
        run(evaluator, EvaluateRequest(candidate_id="x", card=elsewhere, source=SOFTMAX_OK, backend="cpu"))
    unknown = card.model_copy(update={"op": "aten::no_such_op.default"})
    with pytest.raises(InvalidArgument, match="unknown operator"):
        run(evaluator, EvaluateRequest(candidate_id="x", card=unknown, source=SOFTMAX_OK, backend="cpu",
                                         options=EvaluationOptions(timing_runs=1)))


def test_a_remeasure_takes_the_fresh_process_started_before_it_was_needed(tmp_path: Path) -> None:
    evaluator = Evaluator(tmp_path, "cpu", BlobStore(tmp_path / "blobs"), TEST_LIMITS)
    card = softmax_card(evaluator.blobs, rows=128, cols=512)

    def request(name: str) -> EvaluateRequest:
        return EvaluateRequest(candidate_id=name, card=card, source=SOFTMAX_OK, backend="cpu",
                               options=EvaluationOptions(fresh_input_sets=1, timing_runs=3, remeasure=True))

    async def scenario() -> list[str]:
        logs = []
        for name in ("first", "second"):
            result = await evaluator.evaluate(request(name))
            assert result.status.value == "PASSED" and result.remeasured, result.error_message + result.log_tail
            logs.append(result.log_tail)
        await evaluator.close()
        return logs

    logs = asyncio.run(scenario())
    for log in logs:  # each taken from a process that waited while the candidate built and ran
        assert log.startswith("re-measured in a fresh process started "), log
        assert float(log.split("started ")[1].split(" s")[0]) > 0.0
    assert "each call starts cold by evicting its operands" in logs[1]
    assert not list((tmp_path / "runs").glob("standby-*"))  # closing ends the one left waiting

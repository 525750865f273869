"""Cards of in-place ops (``relu_``, ``add_``) through the evaluator on the cpu backend: the mutated
input is the kernel's output, pre-filled with its value; hostile kernels that write nothing, write
part of it or write another input fail."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from agent_service.offline.proposer import propose_offline
from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cardkit import card_from_call
from gpu_sandbox_service.evaluator import Evaluator
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.propose_request import ProposeRequest
from servicekit.errors import InvalidArgument
from tests.gpu_sandbox_service.conftest import TEST_LIMITS

PRELUDE = """
#include "kf_abi.h"
extern "C" int kf_launch(const kf_tensor *in, int32_t n_in, kf_tensor *out, int32_t n_out, void *stream) {
  float *x = (float *)out[0].data;  /* the mutated input, pre-filled */
  const int64_t n = out[0].shape[0] * out[0].shape[1];
"""
RELU = PRELUDE + "  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.f ? x[i] : 0.f;\n  return 0;\n}\n"
RELU_NOTHING = PRELUDE + "  return 0;\n}\n"
RELU_HALF = PRELUDE + "  for (int64_t i = 0; i < n / 2; ++i) x[i] = x[i] > 0.f ? x[i] : 0.f;\n  return 0;\n}\n"
RELU_FROM_INPUT = PRELUDE + ("  const float *a = (const float *)in[0].data;\n"
                             "  for (int64_t i = 0; i < n; ++i) x[i] = a[i] > 0.f ? a[i] : 0.f;\n  return 0;\n}\n")
ADD = PRELUDE + ("  const float *y = (const float *)in[1].data;\n"
                 "  for (int64_t i = 0; i < n; ++i) x[i] += 2.f * y[i];\n  return 0;\n}\n")
ADD_WRITES_OTHER = PRELUDE + ("  float *y = (float *)in[1].data;\n"
                              "  for (int64_t i = 0; i < n; ++i) { x[i] += 2.f * y[i]; y[i] = 0.f; }\n  return 0;\n}\n")
ADD_INTO_OTHER = PRELUDE + ("  float *y = (float *)in[1].data;\n"
                            "  for (int64_t i = 0; i < n; ++i) y[i] += 2.f * x[i];\n  return 0;\n}\n")


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory: pytest.TempPathFactory) -> Evaluator:
    root = tmp_path_factory.mktemp("evaluator")
    return Evaluator(root, "cpu", BlobStore(root / "blobs"), TEST_LIMITS)


def evaluate(evaluator: Evaluator, card: OperatorCard, name: str, source: str) -> tuple[str, str]:
    request = EvaluateRequest(candidate_id=name, card=card, source=source, backend="cpu",
                              options=EvaluationOptions(fresh_input_sets=2, timing_runs=6))
    result = asyncio.run(evaluator.evaluate(request))
    return result.status.value, result.error_message + result.log_tail


def relu_card(blobs: BlobStore) -> OperatorCard:
    torch.manual_seed(0)
    return card_from_call("aten::relu_.default", [torch.randn(32, 64)], {}, blobs)


def add_card(blobs: BlobStore) -> OperatorCard:
    torch.manual_seed(0)
    return card_from_call("aten::add_.Tensor", [torch.randn(32, 64), torch.randn(32, 64)], {"alpha": 2}, blobs)


def test_an_in_place_card_names_its_mutated_input_as_the_output() -> None:
    x = torch.randn(8, 4)
    before = x.clone()
    card = card_from_call("aten::add_.Tensor", [x, torch.randn(8, 4)], {}, BlobStore(Path("/nonexistent")), samples=0)
    assert card.mutated_inputs == [0] and card.outputs == card.inputs[:1]
    assert torch.equal(x, before)  # the card's call ran on copies


def test_a_kernel_that_updates_the_prefilled_output_passes(evaluator: Evaluator) -> None:
    status, log = evaluate(evaluator, relu_card(evaluator.blobs), "relu", RELU)
    assert status == "PASSED", log
    # the input and the output are one buffer: reading the input reads the pre-fill
    status, log = evaluate(evaluator, relu_card(evaluator.blobs), "relu-in", RELU_FROM_INPUT)
    assert status == "PASSED", log
    status, log = evaluate(evaluator, add_card(evaluator.blobs), "add", ADD)
    assert status == "PASSED", log


@pytest.mark.parametrize(("card_of", "name", "source", "problem"), [
    (relu_card, "relu-nothing", RELU_NOTHING, "exceeds the torch.float32 tolerance"),
    (relu_card, "relu-half", RELU_HALF, "exceeds the torch.float32 tolerance"),
    (add_card, "add-writes-other", ADD_WRITES_OTHER, "input 1 was modified"),
    (add_card, "add-into-other", ADD_INTO_OTHER, "input 1 was modified"),
])
def test_a_kernel_that_writes_nothing_part_or_another_input_fails(
        evaluator: Evaluator, card_of, name: str, source: str, problem: str) -> None:  # type: ignore[no-untyped-def]
    status, log = evaluate(evaluator, card_of(evaluator.blobs), name, source)
    assert status == "WRONG_RESULT" and problem in log, log


def test_an_in_place_card_eager_never_changes_is_refused(evaluator: Evaluator) -> None:
    """``x.mul_(1)`` leaves ``x`` as it was: a kernel that writes nothing would pass, so the card cannot be judged."""
    card = card_from_call("aten::mul_.Scalar", [torch.randn(32, 64), 1.0], {}, evaluator.blobs)
    with pytest.raises(InvalidArgument, match="unchanged on every input set"):
        evaluate(evaluator, card, "mul-one", RELU_NOTHING)


@pytest.mark.parametrize("call", [
    ("aten::relu_.default", lambda: [torch.randn(16, 64)], {}),
    ("aten::add_.Tensor", lambda: [torch.randn(16, 64), torch.randn(64)], {"alpha": 0.5}),
    ("aten::masked_fill_.Scalar", lambda: [torch.randn(16, 64), torch.randn(64) > 0, -1e4], {}),
    # a KV cache's slot: a view with gaps, written where it lies
    ("aten::copy_.default", lambda: [torch.randn(2, 4, 16, 8)[:, :, 5], torch.randn(2, 4, 8).bfloat16()], {}),
    ("aten::copy_.default", lambda: [torch.zeros(16, 64, dtype=torch.int32), torch.randn(64) * 100], {}),
    ("aten::fill_.Scalar", lambda: [torch.randn(16, 64), 0.25], {}),
    ("aten::zero_.default", lambda: [torch.randn(16, 64).bfloat16()], {}),
], ids=lambda c: f"{c[0]}-{len(c[1]())}")
def test_the_offline_proposal_for_an_in_place_card_passes(evaluator: Evaluator, call) -> None:  # type: ignore[no-untyped-def]
    """End to end: the proposer's kernel for an in-place card, verified and timed by the sandbox."""
    op, make, kwargs = call
    torch.manual_seed(0)
    card = card_from_call(op, make(), kwargs, evaluator.blobs)
    proposal = propose_offline(ProposeRequest(card=card, device=DeviceInfo(backend="cpu", sm_count=2), backend="cpu"))
    assert proposal.has_proposal, proposal.no_proposal_reason
    status, log = evaluate(evaluator, card, op.split("::")[1], proposal.source)
    assert status == "PASSED", log

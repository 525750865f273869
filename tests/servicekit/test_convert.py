import dataclasses

import pytest
import torch
from google.protobuf import json_format

from kernel_forge.common.v1 import types_pb2
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures, Verdict
from packager.variant import variant_key
from servicekit.convert import (
    card_from_json,
    card_from_proto,
    card_to_proto,
    verdict_from_proto,
    verdict_to_proto,
)
from servicekit.errors import InvalidArgument


def _card() -> OperatorCard:
    key = variant_key("aten::relu.default", (torch.randn(16),), {})
    spec = TensorSpec(shape=[16], stride=[1], dtype="float32")
    return OperatorCard(id=key.id, kind="aten", op=key.op, device="cpu", key=key.to_json(), inputs=[spec],
                        outputs=[spec], call_count=3, time_share=0.25)


def test_a_card_round_trips_through_its_message() -> None:
    card = _card()
    message = card_to_proto(card)
    assert (message.id, message.op, message.call_count, message.time_share, message.eager_us) == (
        card.id, card.op, 3, 0.25, 0.0)
    assert card_from_proto(message) == card


@pytest.mark.parametrize(("text", "needle"), [("", "card_json is empty"), ("{not json", "not a valid operator card"),
                                              ('{"id": 3}', "not a valid operator card")])
def test_a_malformed_card_is_an_invalid_argument_naming_the_field(text: str, needle: str) -> None:
    with pytest.raises(InvalidArgument, match=needle):
        card_from_json(text)


RUN = RunFigures(CandidateStatus.REJECTED, "suspect timing", latency_us=2.0, latency_spread_us=0.1,
                 eager_latency_us=8.0, eager_spread_us=0.2, rel_l2_error=1e-7, max_scaled_error=2e-7,
                 floor_us=2.5, workspace_bytes=4096)


@pytest.mark.parametrize("verdict", [
    RUN, RunFigures(CandidateStatus.PASSED, latency_us=3.0, eager_latency_us=6.0),
    RunFigures(CandidateStatus.WRONG_RESULT, "mismatch"),
    BuildFailure(CandidateStatus.COMPILE_ERROR, "error: expected ';'"),
    BuildFailure(CandidateStatus.REJECTED, "forbidden by the kernel contract: cudaMalloc"),
])
def test_a_verdict_round_trips_through_its_message(verdict: Verdict) -> None:
    message = verdict_to_proto(verdict)
    assert verdict_from_proto(types_pb2.CandidateResult.FromString(message.SerializeToString())) == verdict


def test_a_run_message_carries_every_figure_and_the_speedup() -> None:
    message = verdict_to_proto(RUN)
    assert message.status == types_pb2.REJECTED and message.speedup == 4.0 and message.workspace_bytes == 4096
    assert message.floor_us == 2.5 and not verdict_to_proto(BuildFailure(CandidateStatus.REJECTED)).HasField(
        "latency_us")


def test_a_result_stored_before_workspaces_reads_back() -> None:
    stored = ('{"candidateId": "c1", "status": "PASSED", "latencyUs": 4.0, "eagerLatencyUs": 12.0, "speedup": 3.0,'
              ' "relL2Error": 1e-06, "arch": "sm_90"}')
    verdict = verdict_from_proto(json_format.Parse(stored, types_pb2.CandidateResult()))
    assert verdict == RunFigures(CandidateStatus.PASSED, latency_us=4.0, eager_latency_us=12.0, rel_l2_error=1e-6)
    assert isinstance(verdict, RunFigures) and verdict.speedup == 3.0 and verdict.workspace_bytes == 0


def test_a_result_without_a_status_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="status"):
        verdict_from_proto(types_pb2.CandidateResult(candidate_id="c1"))


def test_every_run_figure_has_its_field_in_the_message() -> None:
    names = set(types_pb2.CandidateResult.DESCRIPTOR.fields_by_name)
    assert {f.name for f in dataclasses.fields(RunFigures)} <= names

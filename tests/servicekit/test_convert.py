import dataclasses

import pytest
import torch
from google.protobuf import json_format

from kernel_forge.agent.v1 import messages_pb2 as agent_pb2
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2 as sandbox_pb2
from kforge_domain.card import OperatorCard, TensorSpec
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.device import DeviceInfo
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_domain.floor import BandwidthAtSize
from kforge_domain.propose_request import Feedback, ParentCandidate, ProposeRequest, Revision
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures, Verdict
from packager.variant import variant_key
from servicekit.convert import (
    candidate_result_from_proto,
    candidate_result_to_proto,
    card_from_json,
    card_from_proto,
    card_to_proto,
    cost_from_proto,
    cost_to_proto,
    device_from_proto,
    device_to_proto,
    evaluate_request_from_proto,
    evaluate_request_to_proto,
    exchange_from_proto,
    exchange_to_proto,
    propose_request_from_proto,
    propose_request_to_proto,
    status_from_proto,
    status_to_proto,
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
    assert not message.HasField("eager_spread_us")  # not recorded: unset, not 0


def test_a_timed_card_lists_its_eager_time_with_its_spread() -> None:
    message = card_to_proto(_card().model_copy(update={"eager_us": 12.5, "eager_spread_us": 0.75}))
    assert (message.eager_us, message.eager_spread_us) == (12.5, 0.75)


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


@pytest.mark.parametrize("status", list(CandidateStatus))
def test_a_status_round_trips_through_the_wire_enum(status: CandidateStatus) -> None:
    assert types_pb2.CandidateStatus.Name(status_to_proto(status)) == status.value
    assert status_from_proto(status_to_proto(status)) == status


def _wire(message: types_pb2.CandidateResult) -> types_pb2.CandidateResult:
    return types_pb2.CandidateResult.FromString(message.SerializeToString())


@pytest.mark.parametrize("verdict", [RUN, BuildFailure(CandidateStatus.COMPILE_ERROR, "error: expected ';'")])
def test_a_result_round_trips_through_its_message_with_its_evidence(verdict: Verdict) -> None:
    result = CandidateResult("c1", verdict, audit_class="custom", log_tail="log", compile_s=0.5, total_s=1.5,
                             source_sha256="ab", compiler_flags="-O3", toolchain="nvcc 13.0", arch="sm_90",
                             sandbox_id="gpu:1", remeasured=True, artifact=b"\x7fELF")
    message = candidate_result_to_proto(result)
    assert (message.candidate_id, message.arch, message.artifact, message.status) == (
        "c1", "sm_90", b"\x7fELF", status_to_proto(verdict.status))
    assert candidate_result_from_proto(_wire(message)) == result


def test_every_result_field_is_a_message_field_and_every_message_field_is_kept() -> None:
    names = set(types_pb2.CandidateResult.DESCRIPTOR.fields_by_name)
    evidence = {f.name for f in dataclasses.fields(CandidateResult)} - {"verdict"}
    figures = {f.name for f in dataclasses.fields(RunFigures)}
    assert evidence <= names
    assert names == evidence | figures | {"speedup"}  # the speedup is derived from the figures


def test_a_cost_and_an_exchange_round_trip_through_their_messages() -> None:
    cost = Cost(prompt_tokens=1200, completion_tokens=300, usd=0.0125, llm_calls=1)
    assert cost_from_proto(types_pb2.Cost.FromString(cost_to_proto(cost).SerializeToString())) == cost
    exchange = LlmExchange("openai/gpt-4.1", "prompt", "answer", cost, latency_s=3.5, error="")
    message = types_pb2.LlmExchange.FromString(exchange_to_proto(exchange).SerializeToString())
    assert message.cost.usd == 0.0125 and exchange_from_proto(message) == exchange


DEVICE = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=50 << 20,
                    copy_bandwidth_gbps=3900.0, toolchain="nvcc 13.0", sandbox_id="gpu:0", memory_bytes=141 << 30,
                    copy_bandwidth_by_size=(BandwidthAtSize(1 << 20, 9000.0), BandwidthAtSize(1 << 26, 5000.0)),
                    candidate_slots=3)


def test_a_device_round_trips_through_its_message() -> None:
    message = types_pb2.DeviceInfo.FromString(device_to_proto(DEVICE).SerializeToString())
    assert message.copy_bandwidth_by_size[1].working_set_bytes == 1 << 26 and message.candidate_slots == 3
    assert device_from_proto(message) == DEVICE
    assert DEVICE.copy_bandwidth.at(1 << 20) == 9000.0


def _propose_request(**fields: object) -> ProposeRequest:
    return ProposeRequest(card=_card(), device=DEVICE, backend="cuda", proposer="openai/gpt-4.1",
                          api_base="http://llm:4000", run_id="r1", seed=42, **fields)  # type: ignore[arg-type]


FAILED = Revision("c2", "vectorised", {"vec": 4}, CandidateStatus.WRONG_RESULT, "mismatch at 3")


@pytest.mark.parametrize("request_", [
    _propose_request(),
    _propose_request(
        parent=ParentCandidate("c1", "// src", "tiled", {"tile": 32, "unroll": True}, latency_us=4.5,
                               eager_latency_us=9.0),
        lineage=(Revision("c0", "first", {}, CandidateStatus.PASSED, latency_us=6.0),
                 Revision("c1", "tiled", {"tile": 32, "unroll": True}, CandidateStatus.PASSED, latency_us=4.5)),
        failed_siblings=(Revision("c3", "in flight", {"tile": 64}), FAILED),
        feedback=Feedback(FAILED.status, FAILED.error_message), budget_usd_remaining=0.0,
        tried_knobs=({"tile": 32, "unroll": True}, {"vec": 4})),
    _propose_request(parent=ParentCandidate("c1", "", "untimed", {}), feedback=Feedback(log_tail="tail")),
])
def test_a_propose_request_round_trips_through_its_message(request_: ProposeRequest) -> None:
    message = agent_pb2.ProposeRequest.FromString(propose_request_to_proto(request_).SerializeToString())
    assert propose_request_from_proto(message) == request_
    assert message.HasField("parent") == (request_.parent is not None)
    assert message.HasField("budget_usd_remaining") == (request_.budget_usd_remaining is not None)  # 0 is set


def test_a_propose_request_sends_knob_sets_as_sorted_json_and_reads_a_malformed_one_as_invalid() -> None:
    message = propose_request_to_proto(_propose_request(tried_knobs=({"b": 1, "a": 2},)))
    assert list(message.tried_knobs_json) == ['{"a": 2, "b": 1}']
    message.tried_knobs_json[0] = "[1]"
    with pytest.raises(InvalidArgument, match=r"tried_knobs_json\[0\] must be a JSON object"):
        propose_request_from_proto(message)


@pytest.mark.parametrize("options", [EvaluationOptions(), EvaluationOptions(
    fresh_input_sets=4, timing_runs=100, compile_timeout_s=60.0, run_timeout_s=5.0, remeasure=True,
    best_speedup=1.75)])
def test_an_evaluate_request_round_trips_through_its_message(options: EvaluationOptions) -> None:
    request = EvaluateRequest("c9", _card(), "// src", "cpu", options)
    message = sandbox_pb2.EvaluateRequest.FromString(evaluate_request_to_proto(request).SerializeToString())
    assert message.HasField("options")  # sent even when every option is its default
    assert evaluate_request_from_proto(message) == request


#: Wire fields that the domain names for what they hold rather than how they travel.
DOMAIN_NAMES = {"card_json": "card", "knobs_json": "knobs", "tried_knobs_json": "tried_knobs"}


@pytest.mark.parametrize(("message", "domain"), [
    (types_pb2.DeviceInfo, DeviceInfo), (agent_pb2.ProposeRequest, ProposeRequest),
    (agent_pb2.ParentCandidate, ParentCandidate), (agent_pb2.Revision, Revision), (agent_pb2.Feedback, Feedback),
    (sandbox_pb2.EvaluateRequest, EvaluateRequest), (sandbox_pb2.EvaluationOptions, EvaluationOptions),
])
def test_every_request_field_on_the_wire_has_its_domain_field(message: type, domain: type) -> None:
    wire = {DOMAIN_NAMES.get(name, name) for name in message.DESCRIPTOR.fields_by_name}  # type: ignore[attr-defined]
    assert wire == {f.name for f in dataclasses.fields(domain)}

"""The run store's form of a result is the JSON json_format gives its wire message, both ways."""

from __future__ import annotations

import json
import math

import pytest
from google.protobuf import json_format

from forge_service.stored_result import result_from_json, result_to_json
from kernel_forge.common.v1 import types_pb2
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures
from servicekit.convert import candidate_result_from_proto, candidate_result_to_proto

RESULTS = [
    CandidateResult("c1", RunFigures(CandidateStatus.PASSED, latency_us=4.0, latency_spread_us=0.0,
                                     eager_latency_us=12.0, eager_spread_us=0.25, rel_l2_error=1e-7,
                                     max_scaled_error=float("inf"), floor_us=0.0, workspace_bytes=4096),
                    audit_class="custom", log_tail="ok", compile_s=0.5, total_s=1.25, source_sha256="ab" * 32,
                    compiler_flags="-O3", toolchain="nvcc 13.0", arch="sm_90", sandbox_id="host:1", remeasured=True),
    CandidateResult("c2", RunFigures(CandidateStatus.REJECTED, "timed under the floor", latency_us=1e-7,
                                     eager_latency_us=3.0)),
    CandidateResult("c3", RunFigures(CandidateStatus.TIMEOUT, "ran past 30 s")),
    CandidateResult("c4", BuildFailure(CandidateStatus.COMPILE_ERROR, "error: expected ';' — ü"), log_tail="a\nb"),
    CandidateResult("", BuildFailure(CandidateStatus.REJECTED)),
]


def _message_json(result: CandidateResult, preserving_proto_field_name: bool = False) -> str:
    """What earlier versions stored: json_format's JSON of the wire message, artifact cleared."""
    message = candidate_result_to_proto(result)
    message.ClearField("artifact")
    return json_format.MessageToJson(message, preserving_proto_field_name=preserving_proto_field_name)


@pytest.mark.parametrize("result", RESULTS)
def test_a_result_is_stored_as_json_format_writes_its_message(result: CandidateResult) -> None:
    assert json.loads(result_to_json(result)) == json.loads(_message_json(result))


@pytest.mark.parametrize("result", RESULTS)
@pytest.mark.parametrize("preserving_proto_field_name", [False, True])
def test_what_json_format_wrote_reads_back_as_the_wire_message_does(result: CandidateResult,
                                                                    preserving_proto_field_name: bool) -> None:
    stored = _message_json(result, preserving_proto_field_name=preserving_proto_field_name)
    assert result_from_json(stored) == result
    assert result_from_json(stored) == candidate_result_from_proto(
        json_format.Parse(stored, types_pb2.CandidateResult()))


def test_the_artifact_stays_out_of_the_json() -> None:
    with_artifact = CandidateResult("c1", RunFigures(CandidateStatus.PASSED, latency_us=1.0), artifact=b"\x7fELF")
    assert "artifact" not in result_to_json(with_artifact)
    assert result_from_json(result_to_json(with_artifact)).artifact == b""


def test_a_nan_figure_is_stored_as_json_format_writes_it() -> None:
    result = CandidateResult("c1", RunFigures(CandidateStatus.WRONG_RESULT, "NaN output", rel_l2_error=math.nan))
    assert json.loads(result_to_json(result))["relL2Error"] == "NaN"
    figures = result_from_json(result_to_json(result)).figures
    assert figures is not None and math.isnan(figures.rel_l2_error or 0.0)


def test_the_stored_speedup_is_derived_again_on_reading() -> None:
    stored = '{"candidateId": "c1", "status": "PASSED", "latencyUs": 4.0, "eagerLatencyUs": 12.0, "speedup": 3.0}'
    result = result_from_json(stored)
    assert result.speedup == 3.0 and result.figures == RunFigures(CandidateStatus.PASSED, latency_us=4.0,
                                                                  eager_latency_us=12.0)


def test_a_stored_result_without_a_status_is_refused() -> None:
    with pytest.raises(ValueError, match="no status"):
        result_from_json('{"candidateId": "c1"}')

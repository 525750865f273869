"""SandboxService RPCs on a real server: device info, uploads, blob queries, streamed evaluation."""

from __future__ import annotations

import hashlib

import grpc
import pytest

from gpu_sandbox_service.blobs import BlobStore
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2
from tests.gpu_sandbox_service.conftest import SandboxClient, load_corpus, softmax_card

ENTRIES = {e.name: e for e in load_corpus("cpu")}


def test_device_info_describes_the_cpu(sandbox: SandboxClient) -> None:
    info = sandbox.stub.GetDeviceInfo(messages_pb2.GetDeviceInfoRequest(), timeout=120)
    assert info.backend == "cpu" and info.arch.startswith("cpu-") and info.sm_count >= 1
    assert info.copy_bandwidth_gbps > 0 and info.toolchain.startswith("g++") and info.sandbox_id
    by_size = info.copy_bandwidth_by_size  # what the floor reads at a card's working set
    sizes = [p.working_set_bytes for p in by_size]
    assert len(sizes) >= 2 and sizes == sorted(sizes) and by_size[-1].gbps == info.copy_bandwidth_gbps
    assert info.candidate_slots == 1  # one cpu run slot, timed with no compiler beside it


def test_upload_checks_digest_and_offsets(sandbox: SandboxClient) -> None:
    data = b"x" * 100_000
    digest = sandbox.upload(data, chunk=4096)
    assert sandbox.stub.HasBlobs(messages_pb2.HasBlobsRequest(sha256=[digest]), timeout=10).missing == []
    wrong = hashlib.sha256(b"other").hexdigest()
    with pytest.raises(grpc.RpcError) as error:
        sandbox.stub.UploadBlob(iter([types_pb2.BlobChunk(sha256=wrong, offset=0, data=data)]), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "hash" in error.value.details()
    gap = [types_pb2.BlobChunk(sha256=digest, offset=0, data=data[:10]),
           types_pb2.BlobChunk(sha256=digest, offset=20, data=data[10:])]
    with pytest.raises(grpc.RpcError) as error:
        sandbox.stub.UploadBlob(iter(gap), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "offset" in error.value.details()
    with pytest.raises(grpc.RpcError) as error:
        sandbox.stub.HasBlobs(messages_pb2.HasBlobsRequest(sha256=["nope"]), timeout=10)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_evaluate_stream_answers_every_request(sandbox: SandboxClient,
                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    local = BlobStore(tmp_path_factory.mktemp("stream-blobs"))
    card = softmax_card(local, rows=32, cols=64)
    for sample in card.samples:
        sandbox.upload(local.path(sample.inputs_blob).read_bytes())
    options = messages_pb2.EvaluationOptions(fresh_input_sets=1, timing_runs=3)
    requests = [messages_pb2.EvaluateRequest(candidate_id=name, card_json=card.to_json(),
                                             source=ENTRIES[name].source, backend="cpu", options=options)
                for name in ("softmax_ok", "zeros_output", "read_api_key")]
    results = {r.candidate_id: types_pb2.CandidateStatus.Name(r.status)
               for r in sandbox.stub.EvaluateStream(iter(requests), timeout=300)}
    assert results == {"softmax_ok": "PASSED", "zeros_output": "WRONG_RESULT", "read_api_key": "REJECTED"}


def test_bad_card_and_missing_blobs_are_client_errors(sandbox: SandboxClient, tmp_path_factory) -> None:  # type: ignore[no-untyped-def]
    card = softmax_card(BlobStore(tmp_path_factory.mktemp("never-uploaded")), rows=5, cols=7)
    request = messages_pb2.EvaluateRequest(candidate_id="x", card_json=card.to_json(), source="int x;", backend="cpu")
    with pytest.raises(grpc.RpcError) as error:
        sandbox.stub.Evaluate(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "not uploaded" in error.value.details()
    request.card_json = "{\"id\": 3}"
    with pytest.raises(grpc.RpcError) as error:
        sandbox.stub.Evaluate(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT

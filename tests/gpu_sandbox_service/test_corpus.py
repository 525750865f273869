"""The hostile corpus through the real gRPC server: every entry gets its verdict, and the server
stays healthy after each."""

from __future__ import annotations

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from gpu_sandbox_service.blobs import BlobStore
from kernel_forge.common.v1 import types_pb2
from kernel_forge.sandbox.v1 import messages_pb2
from kforge_domain.card import OperatorCard
from tests.gpu_sandbox_service.conftest import CorpusEntry, SandboxClient, load_corpus, softmax_card

CPU_CORPUS = load_corpus("cpu")
# Entries that can only fail by taking long get a short run limit, so the suite stays quick.
RUN_TIMEOUT_S = {"hang": 8.0}
COMPILE_TIMEOUT_S = {"compile_bomb": 15.0}


@pytest.fixture(scope="module")
def card(sandbox: SandboxClient, tmp_path_factory: pytest.TempPathFactory) -> OperatorCard:
    local = BlobStore(tmp_path_factory.mktemp("card-blobs"))
    card = softmax_card(local)
    for sample in card.samples:
        for digest in (sample.inputs_blob, sample.outputs_blob):
            assert sandbox.upload(local.path(digest).read_bytes()) == digest
    return card


def evaluate(sandbox: SandboxClient, card: OperatorCard, entry: CorpusEntry) -> types_pb2.CandidateResult:
    options = messages_pb2.EvaluationOptions(
        fresh_input_sets=1, timing_runs=5, run_timeout_s=RUN_TIMEOUT_S.get(entry.name, 0.0),
        compile_timeout_s=COMPILE_TIMEOUT_S.get(entry.name, 0.0))
    request = messages_pb2.EvaluateRequest(candidate_id=entry.name, card_json=card.to_json(), source=entry.source,
                                           backend="cpu", options=options)
    return sandbox.stub.Evaluate(request, timeout=120)


def assert_healthy(sandbox: SandboxClient) -> None:
    health = health_pb2_grpc.HealthStub(sandbox.channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert sandbox.stub.HasBlobs(messages_pb2.HasBlobsRequest(sha256=["0" * 64]), timeout=10).missing == ["0" * 64]


@pytest.mark.parametrize("entry", CPU_CORPUS, ids=[e.name for e in CPU_CORPUS])
def test_corpus_entry_gets_its_verdict(sandbox: SandboxClient, card: OperatorCard, entry: CorpusEntry) -> None:
    result = evaluate(sandbox, card, entry)
    status = types_pb2.CandidateStatus.Name(result.status)
    assert status == entry.expected, f"{entry.name}: {status}: {result.error_message}\n{result.log_tail[-2000:]}"
    if status == "PASSED":
        assert result.HasField("latency_us") and result.latency_us > 0 and result.artifact
        assert result.rel_l2_error < 1e-4
    else:
        assert result.error_message and not result.artifact
    assert len(result.log_tail) <= 8 * 1024
    assert_healthy(sandbox)


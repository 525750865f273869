"""The harness passes a kernel its workspace (kf_workspace_bytes) as a trailing output, poisoned before every call."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.compiler import INCLUDE_DIR
from gpu_sandbox_service.harness import session as harness_session
from gpu_sandbox_service.harness.protocol import HarnessRequest
from gpu_sandbox_service.harness.session import CandidateFailure, Session, run_session
from gpu_sandbox_service.harness.tensors import WORKSPACE_POISON, poison_workspace
from gpu_sandbox_service.models import CandidateStatus
from tests.gpu_sandbox_service.conftest import CORPUS, softmax_card

PRELUDE = (CORPUS / "cpu" / "_prelude.inc").read_text()


def _compile(tmp_path: Path, name: str) -> Path:
    source = tmp_path / f"{name}.cpp"
    source.write_text(PRELUDE + "\n" + (CORPUS / "cpu" / f"{name}.cpp").read_text())
    library = tmp_path / f"{name}.so"
    subprocess.run(["g++", "-O2", "-shared", "-fPIC", f"-I{INCLUDE_DIR}", "-o", str(library), str(source)], check=True)
    return library


def _request(tmp_path: Path, library: Path) -> HarnessRequest:
    store = BlobStore(tmp_path / "blobs")
    card = softmax_card(store)
    samples = [str(store.path(sample.inputs_blob)) for sample in card.samples]
    return HarnessRequest(card=card, backend="cpu", library=str(library), sample_inputs=samples,
                          fresh_input_sets=2, timing_runs=6, warmup_runs=2)


def test_poison_fills_every_byte_with_a_pattern_that_is_not_zero() -> None:
    workspace = torch.zeros(64, dtype=torch.uint8)
    for variant, pattern in enumerate(WORKSPACE_POISON):
        poison_workspace(workspace, variant)
        assert pattern != 0 and bool((workspace == pattern).all())
    poison_workspace(workspace, 0)
    assert torch.isnan(workspace.view(torch.float32)).all()


def test_a_kernel_with_a_workspace_is_verified_and_timed(tmp_path: Path) -> None:
    request = _request(tmp_path, _compile(tmp_path, "workspace_ok"))
    report = run_session(request)
    assert report.status == CandidateStatus.PASSED, report.error_message
    assert report.latency_us and report.latency_us > 0 and report.checked_sets == 3
    assert report.workspace_bytes == 2 * 64 * 4 == report.run_figures().workspace_bytes
    # Each buffer set has its own workspace; the workspace is never one of the checked outputs.
    session = Session(request)
    buffers = session.buffers(512)
    assert buffers.workspace is not None and buffers.workspace.numel() == 512 and len(buffers.outputs) == 1
    assert session.buffers().workspace is None


def test_a_kernel_relying_on_a_zeroed_workspace_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    request = _request(tmp_path, _compile(tmp_path, "workspace_assumed_zero"))
    with pytest.raises(CandidateFailure) as failure:
        run_session(request)
    assert failure.value.status == CandidateStatus.WRONG_RESULT and "NaN" in str(failure.value)
    # The same kernel passes where the workspace starts at zero: the poison is what catches it.
    monkeypatch.setattr(harness_session, "poison_workspace", lambda workspace, variant: workspace.zero_())
    assert run_session(request).status == CandidateStatus.PASSED


def test_a_kernel_that_expects_no_workspace_after_asking_for_one_fails_its_launch(tmp_path: Path) -> None:
    with pytest.raises(CandidateFailure) as failure:
        run_session(_request(tmp_path, _compile(tmp_path, "workspace_ignored")))
    assert failure.value.status == CandidateStatus.RUNTIME_ERROR and "returned 2" in str(failure.value)

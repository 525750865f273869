"""The wall-clock check of the harness's timing: pure decisions over per-call figures, and on a
GPU the corpus's own-stream candidates rejected while the honest one passes.

The figures are per call in microseconds, shaped like the 512x1024 float32 softmax card on an
H200 (eager about 6 us), and like the case the check was made for: a kernel reported at 3.9x
that measured 0.99x once its work went on the given stream (eager 40 us: 10.3 us timed, 40.4 us
real). They were not measured here; the GPU test below measures the real ones.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from gpu_sandbox_service.blobs import BlobStore
from gpu_sandbox_service.cardkit import card_from_call
from gpu_sandbox_service.evaluator import Evaluator
from gpu_sandbox_service.harness.timing import LAUNCH_ALLOWANCE_US, escaped_work
from kforge_domain.evaluate_request import EvaluateRequest, EvaluationOptions
from kforge_torch.timing import Series
from tests.gpu_sandbox_service.conftest import TEST_LIMITS, load_corpus

EAGER = Series(calls=20, wall_us=7.9, stream_us=6.2, host_us=3.1)


def test_a_kernel_on_the_given_stream_passes() -> None:
    assert escaped_work(5.4, Series(calls=20, wall_us=6.1, stream_us=5.0, host_us=3.0), EAGER) is None


def test_a_launch_bound_kernel_is_not_suspect() -> None:
    # Five launches of a tiny card: the host sets the pace and the stream waits between calls.
    assert escaped_work(9.8, Series(calls=20, wall_us=26.0, stream_us=24.5, host_us=24.0), EAGER) is None


def test_work_the_stream_never_waits_for_is_rejected() -> None:
    # Launched on a non-blocking stream of its own and left running: only the synchronisation sees it.
    reason = escaped_work(1.0, Series(calls=20, wall_us=41.0, stream_us=3.1, host_us=3.0), EAGER)
    assert reason is not None and reason.startswith("work outside the given stream")
    assert "41 us a call by the wall clock over 20 back-to-back calls" in reason and "3.1 us on the harness's" in reason


def test_work_waited_for_inside_kf_launch_is_rejected() -> None:
    # The 3.9x case: its own stream, synchronised before returning, overlapping the cache flush.
    reason = escaped_work(10.3, Series(calls=20, wall_us=42.5, stream_us=41.5, host_us=41.0), EAGER)
    assert reason is not None and "10.3 us timed" in reason and "the host held 41 us a call" in reason


def test_work_the_given_stream_waits_for_through_an_event_is_rejected() -> None:
    # Ordered through cudaStreamWaitEvent, so the outputs are right; it starts before the start event.
    reason = escaped_work(10.3, Series(calls=20, wall_us=42.0, stream_us=41.0, host_us=4.0), EAGER)
    assert reason is not None and "10.3 us timed" in reason


def test_the_margins_scale_with_the_synchronisation_cost_and_launch_allowance() -> None:
    slow_sync = Series(calls=20, wall_us=26.2, stream_us=6.2, host_us=3.1)  # 20 us of synchronisation per call
    assert escaped_work(1.0, Series(calls=20, wall_us=21.0, stream_us=3.1, host_us=3.0), slow_sync) is None
    just_inside = 10.0 + LAUNCH_ALLOWANCE_US
    assert escaped_work(10.0, Series(calls=20, wall_us=just_inside, stream_us=just_inside, host_us=just_inside),
                        EAGER) is None
    assert escaped_work(10.0, Series(calls=20, wall_us=just_inside + 8, stream_us=just_inside + 8,
                                     host_us=just_inside + 8), EAGER) is not None


CUDA_CORPUS = {e.name: e for e in load_corpus("cuda")}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times real kernels on a GPU")
@pytest.mark.parametrize("name", ["softmax_ok", "own_stream_synced", "own_stream_event"])
def test_a_kernel_on_its_own_non_blocking_stream_is_rejected_on_the_gpu(name: str, tmp_path: Path) -> None:
    entry = CUDA_CORPUS[name]
    store = BlobStore(tmp_path / "blobs")
    card = card_from_call("aten::_softmax.default", [torch.randn(512, 1024, device="cuda") * 3, -1, False], {}, store)
    evaluator = Evaluator(tmp_path, "cuda", store, TEST_LIMITS)
    result = asyncio.run(evaluator.evaluate(EvaluateRequest(
        candidate_id=name, card=card, source=entry.source, backend="cuda", options=EvaluationOptions(timing_runs=20))))
    assert result.status.value == entry.expected, result.error_message
    if entry.expected == "REJECTED":
        assert result.error_message.startswith("suspect timing: work outside the given stream"), result.error_message

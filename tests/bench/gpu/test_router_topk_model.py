"""The router model captures into a float topk card that both backends' sort templates take: the
cpu one by eager's cpu selection, the cuda one by eager's radix select, gather and bitonic sort."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.sort.plan import SortPlan
from bench.gpu import router_topk_model as router
from tests.agent_service.agent_cards import on_cuda
from tests.bench.gpu.bench_models import capture_model, card_of


@pytest.mark.parametrize("variant", ["prefill", "decode"])
def test_the_router_topk_is_a_card_each_backend_templates(variant: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", variant)
    topk = card_of(capture_model(router, tmp_path), "aten::topk.default")
    assert topk.inputs[0].shape == [1 if variant == "decode" else 512, router.EXPERTS]
    cpu = plan_for_card(topk, "cpu")
    cuda = plan_for_card(on_cuda(topk), "cuda")
    assert isinstance(cpu, SortPlan) and isinstance(cuda, SortPlan)
    assert (cpu.order, cuda.order, cuda.k) == ("cpu_topk", "cuda_topk", router.TOP_K)

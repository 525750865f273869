"""The router model captures into a float topk card that both backends' sort templates take: the
cpu one by eager's cpu selection, the cuda one by eager's radix select, gather and bitonic sort."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.sort.plan import SortPlan
from bench.gpu import router_topk_model as router
from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from capture_service.timing import TimingPolicy

FAST = TimingPolicy(warmup=0, min_reps=1, max_reps=2, budget_s=0.0)


@pytest.mark.parametrize("variant", ["prefill", "decode"])
def test_the_router_topk_is_a_card_each_backend_templates(variant: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", variant)
    loaded = LoadedModel(router.get_model(), router.get_inputs())
    cards = capture_loaded("router", loaded, CaptureOptions(samples=1), tmp_path, timing=FAST)
    topk = next(card for card in cards.cards if card.op == "aten::topk.default")
    assert topk.inputs[0].shape == [1 if variant == "decode" else 512, router.EXPERTS]
    cpu = plan_for_card(topk, "cpu")
    tensors = [{**t, "device": "cuda"} for t in topk.key["tensors"]]
    cuda = plan_for_card(topk.model_copy(update={"device": "cuda", "key": {**topk.key, "tensors": tensors}}), "cuda")
    assert isinstance(cpu, SortPlan) and isinstance(cuda, SortPlan)
    assert (cpu.order, cuda.order, cuda.k) == ("cpu_topk", "cuda_topk", router.TOP_K)

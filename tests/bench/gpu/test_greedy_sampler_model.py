"""The greedy sampler captures into an argmax card whose cuda plan splits each row across blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.offline.catalog import plan_for_card
from bench.gpu import greedy_sampler_model as sampler
from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from capture_service.timing import TimingPolicy
from kforge_domain.device import DeviceInfo

FAST = TimingPolicy(warmup=0, min_reps=1, max_reps=2, budget_s=0.0)
H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


@pytest.mark.parametrize("variant", ["decode", "batch8"])
def test_the_sampler_is_one_argmax_card_split_across_blocks_on_cuda(variant: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", variant)
    loaded = LoadedModel(sampler.get_model(), sampler.get_inputs())
    cards = capture_loaded("sampler", loaded, CaptureOptions(samples=1), tmp_path, timing=FAST)
    argmax = next(card for card in cards.cards if card.op == "aten::argmax.default")
    assert argmax.inputs[0].shape == [sampler.BATCH[variant], sampler.VOCABULARY]
    tensors = [{**t, "device": "cuda"} for t in argmax.key["tensors"]]
    on_cuda = argmax.model_copy(update={"device": "cuda", "key": {**argmax.key, "tensors": tensors}})
    plan = plan_for_card(on_cuda, "cuda")
    assert plan.knob_space("cuda", H100).choices["mode"][0] == "split"
    assert "kf_arg_merge" in plan.render("cuda", {}, H100)

"""The greedy sampler captures into an argmax card whose cuda plan splits each row across blocks."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.offline.catalog import plan_for_card
from bench.gpu import greedy_sampler_model as sampler
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import on_cuda
from tests.bench.gpu.bench_models import capture_model, card_of

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


@pytest.mark.parametrize("variant", ["decode", "batch8"])
def test_the_sampler_is_one_argmax_card_split_across_blocks_on_cuda(variant: str, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EXAMPLE_VARIANT", variant)
    argmax = card_of(capture_model(sampler, tmp_path), "aten::argmax.default")
    assert argmax.inputs[0].shape == [sampler.BATCH[variant], sampler.VOCABULARY]
    plan = plan_for_card(on_cuda(argmax), "cuda")
    assert plan.knob_space("cuda", H100).choices["mode"][0] == "split"
    assert "kf_arg_merge" in plan.render("cuda", {}, H100)

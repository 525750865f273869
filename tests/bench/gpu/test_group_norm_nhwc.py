"""The channels-last group norm benchmark sweeps the template's loads ahead, vector stores and merges."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.group_norm_nhwc import ChannelsLastGroupNormPlan
from bench.gpu.agent import aten_case
from bench.gpu.group_norm_nhwc import cases, knob_sets
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def _contiguous_output(card: OperatorCard) -> OperatorCard:
    """The card as cuda's eager returns it: the normalised output contiguous, NCHW."""
    out = card.outputs[0]
    strides = [1] * len(out.shape)
    for d in range(len(out.shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * out.shape[d + 1]
    return card.model_copy(update={"outputs": [out.model_copy(update={"stride": strides}), *card.outputs[1:]]})


def test_every_case_is_the_channels_last_template_swept_over_loads_ahead_and_store_widths() -> None:
    for name, op, args, kwargs in cases("cpu"):
        plan = plan_for_card(_contiguous_output(on_cuda(aten_case(op, args, kwargs)[0])), "cuda")
        assert isinstance(plan, ChannelsLastGroupNormPlan) and not plan.y_channels_last, name
        sets = knob_sets(plan, H100)
        assert {(k["unroll"], k["store_vector"]) for k in sets} == {(0, 1), (0, 8), (4, 1), (4, 8)}, name
        assert {k["threads_per_block"] for k in sets} == {256, 512}, name
        assert {k["merge"] for k in sets} == {"thread", "warp"}, name
        assert "kf_store_vec<TY, 8>" in plan.render("cuda", sets[-1], H100), name

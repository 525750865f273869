"""The store-width benchmark's cases are gathers that allow wide stores, their cards built whole."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.gather import GatherPlan
from bench.gpu.agent import aten_case
from bench.gpu.gather_stores import cases, kwargs_of
from kforge_domain.device import DeviceInfo
from packager.variant import encode_call
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_every_case_is_a_gather_with_stores_wider_than_one_element() -> None:
    for name, op, args in cases("cpu"):
        card, _ = aten_case(op, args, kwargs_of(op))
        assert len(card.inputs) == len(encode_call(args, kwargs_of(op))[1]), name  # cat's list included
        plan = plan_for_card(on_cuda(card), "cuda")
        assert isinstance(plan, GatherPlan), name
        assert len(plan.knob_space("cuda", H100).choices["store_bytes"]) > 1, name

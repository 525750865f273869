"""The store-width benchmark's cases are gathers that allow wide stores, their cards built whole, each
also timed in flat mode."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.gather import GatherPlan
from bench.gpu.agent import aten_case
from bench.gpu.gather_stores import cases, store_widths
from kforge_domain.device import DeviceInfo
from packager.variant import encode_call
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_every_case_is_a_gather_with_stores_wider_than_one_element() -> None:
    for name, op, args, kwargs in cases("cpu"):
        card, _ = aten_case(op, args, kwargs)
        assert len(card.inputs) == len(encode_call(args, kwargs)[1]), name  # cat's list included
        plan = plan_for_card(on_cuda(card), "cuda")
        assert isinstance(plan, GatherPlan), name
        *widths, flat = store_widths(plan, H100)
        assert len(widths) > 1 and all(k["mode"] == "rows" for k in widths) and flat == {"mode": "flat"}, name

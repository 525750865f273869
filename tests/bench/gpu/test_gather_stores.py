"""The store-width benchmark's cases are gathers that allow wide stores, their cards built whole."""

from __future__ import annotations

import torch

from agent_service.offline.catalog import plan_for_card
from bench.gpu.gather_stores import card_of, cases, kwargs_of
from kforge_domain.device import DeviceInfo

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_every_case_is_a_gather_with_stores_wider_than_one_element() -> None:
    for name, op, args in cases("cpu"):
        card, tensors = card_of(op, args, kwargs_of(op))
        assert len(tensors) == len(card.inputs) and all(isinstance(t, torch.Tensor) for t in tensors), name
        key = {**card.key, "tensors": [{**t, "device": "cuda"} for t in card.key["tensors"]]}
        plan = plan_for_card(card.model_copy(update={"device": "cuda", "key": key}), "cuda")
        widths = plan.knob_space("cuda", H100).choices["store_bytes"]
        assert len(widths) > 1 and plan.family.startswith(("gather", "compare", "integer", "select")), (name, widths)

"""The sort benchmark's cases run through the shared-memory network at several block sizes."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.sort.plan import SortPlan
from bench.gpu.agent import aten_case
from bench.gpu.sort_network import block_sizes, cases
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_every_case_is_a_network_sort_swept_over_block_sizes() -> None:
    for name, op, args, kwargs in cases("cpu"):
        plan = plan_for_card(on_cuda(aten_case(op, args, kwargs)[0]), "cuda")
        assert isinstance(plan, SortPlan) and plan.order != "cuda_bitonic", name
        threads = {k["threads_per_block"] for k in block_sizes(plan, H100)}
        assert {128, 256, 512} <= threads <= {128, 256, 512, 1024}, name  # up to a thread per pair

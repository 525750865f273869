"""The scatter benchmark's cases are order-free scatters swept over both walks; message passing's
long columns start from sources, the one-hot mask's single-source columns from columns."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.ops_scatter_reduce import ScatterReducePlan
from bench.gpu.agent import aten_case
from bench.gpu.scatter_walks import cases, every_walk
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_every_case_is_swept_over_both_walks_long_columns_from_sources() -> None:
    for name, op, args, kwargs in cases("cpu"):
        plan = plan_for_card(on_cuda(aten_case(op, args, kwargs)[0]), "cuda")
        assert isinstance(plan, ScatterReducePlan) and plan.order_free, name
        first = "sources" if "edges" in name else "columns"
        assert every_walk(plan, H100) == [{"walk": first}, {"walk": ({"sources", "columns"} - {first}).pop()}], name

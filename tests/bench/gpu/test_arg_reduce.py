"""The argmax benchmark sweeps split mode where its outputs leave the device idle, and only there."""

from __future__ import annotations

from agent_service.offline.catalog import plan_for_card
from bench.gpu.agent import aten_case
from bench.gpu.arg_reduce import cases, every_mode
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import on_cuda

H100 = DeviceInfo(backend="cuda", name="NVIDIA H100", arch="sm_90", sm_count=132, l2_bytes=50 << 20)


def test_each_case_sweeps_every_mode_and_split_only_for_few_outputs() -> None:
    swept = {}
    for name, op, args, kwargs in cases("cpu"):
        plan = plan_for_card(on_cuda(aten_case(op, args, kwargs)[0]), "cuda")
        knob_sets = every_mode(plan, H100)
        modes = [k["mode"] for k in knob_sets]
        assert set(modes) == set(plan.knob_space("cuda", H100).choices["mode"]), name
        swept[name] = modes.count("split")
    assert swept["argmax 8 x 151936 bf16"] == 3 and swept["argmax 1 x 151936 bf16"] == 3
    assert swept["argmax 4096 x 2048 bf16"] == 0  # 4096 outputs fill the device without splitting

"""The cuda histc kernels compile with nvcc for sm_90 in every mode and dtype (compile only: no GPU
here), follow eager's cuda arithmetic and bounds, and stay capturable in a CUDA graph."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.histc.eager_range import EagerRange, cuda_range
from agent_service.offline.histc.plan import HistcPlan
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import NVCC, aten_card, cuda_bundle, nvcc_object

aten = torch.ops.aten
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)


def _cuda_card(x: torch.Tensor, dtype: str, *args: Any, **kwargs: Any) -> OperatorCard:
    """The card of ``histc(x, ...)`` on cuda with an input (and output) of ``dtype``.

    Captured from the float call on the cpu (eager's cpu histc has no integer kernel), then
    moved to cuda and ``dtype`` as capture on a GPU would record it.
    """
    card, _ = aten_card(aten.histc.default, [x.float(), *args], kwargs)
    tensors = [{**t, "device": "cuda", "dtype": dtype} for t in card.key["tensors"]]
    inputs = [s.model_copy(update={"dtype": dtype}) for s in card.inputs]
    outputs = [s.model_copy(update={"dtype": dtype}) for s in card.outputs]
    return card.model_copy(update={"device": "cuda", "key": {**card.key, "tensors": tensors},
                                   "inputs": inputs, "outputs": outputs})


def _plan(x: torch.Tensor, dtype: str, *args: Any, **kwargs: Any) -> HistcPlan:
    plan = plan_for_card(_cuda_card(x, dtype, *args, **kwargs), "cuda")
    assert isinstance(plan, HistcPlan)
    return plan


def ids(n: int, experts: int) -> torch.Tensor:
    return torch.randint(0, experts, (n,))


def test_each_card_is_offered_the_modes_that_suit_it() -> None:
    moe = _plan(ids(4096, 64), "int32", 64, 0, 63).knob_space("cuda", H200)
    assert moe.choices["mode"] == ("block", "grid")  # a few thousand ids: one block, no zeroing launch
    assert moe.choices["copies"] == (4, 1, 16)
    assert _plan(torch.rand(1_000_000), "float32", 100, 0, 1).knob_space("cuda", H200).choices["mode"][0] == "grid"
    narrow = _plan(ids(1_000_000, 64), "uint8", 64, 0, 63).knob_space("cuda", H200)
    assert narrow.choices["mode"] == ("block",)  # no 8-bit atomics to the output: one block writes it
    wide = _plan(ids(3000, 8192), "int64", 8192, 0, 8191).knob_space("cuda", H200)
    assert wide.choices["copies"] == (1,)  # 8192 counts fill the shared memory once


def test_bounds_follow_eagers_cuda_conversions() -> None:
    assert cuda_range("int32", 64, 0, 63.9) == EagerRange(0, 63)  # Scalar::to<int64_t> truncates
    assert cuda_range("int32", 8, -(2**32) + 3, 2**32 + 9) == EagerRange(3, 9)  # int64 to int32 wraps
    assert cuda_range("float32", 10, 0, 0.1) == EagerRange(0.0, float(torch.tensor(0.1, dtype=torch.float32)))
    for dtype, low, high, why in (("float16", 0, 1, "no float16 kernel"), ("bfloat16", 0, 1, "no bfloat16 kernel"),
                                  ("bool", 0, 1, "no bool kernel"), ("int16", 0, 1, "int16 histc is not templated"),
                                  ("int64", 5, 5.5, "from the data"), ("float32", 2, 2, "from the data"),
                                  ("uint8", 0, 256, "empty or reversed"), ("float32", 3, 1, "not increasing"),
                                  ("int64", 0, 2**62, "overflows int64"), ("float32", 0, float("inf"), "not finite")):
        with pytest.raises(UnsupportedCard, match=why):
            cuda_range(dtype, 64, low, high)


def _sources() -> dict[str, str]:
    cases: list[tuple[str, torch.Tensor, str, list[Any], list[dict[str, Any]]]] = [
        ("moe_int32", ids(4096, 64), "int32", [64, 0, 63],
         [{}, {"mode": "grid"}, {"copies": 1, "threads_per_block": 256}, {"mode": "grid", "blocks_per_sm": 4}]),
        ("moe_int64_512", ids(4096, 512), "int64", [512, 0, 511], [{}, {"mode": "grid", "copies": 16}]),
        ("float_ids", ids(4096, 64), "float32", [64, 0, 63], [{}, {"mode": "grid"}]),
        ("float_large", torch.rand(1_000_000), "float32", [100, -1.5, 2.5], [{}, {"mode": "block"}]),
        ("float64", torch.rand(5000), "float64", [97, -1.3, 2.9], [{}, {"mode": "grid"}]),
        ("int8_transposed", ids(600, 9).view(20, 30).t(), "int8", [9, 0, 8], [{}]),
        ("uint8_sliced", ids(600, 9)[::3], "uint8", [9, 0, 8], [{}]),
        ("float_expanded", torch.rand(64).expand(8, 64), "float32", [16, 0, 1], [{}, {"mode": "grid"}]),
        ("zero_dim", torch.tensor(0.5), "float32", [10, 0, 1], [{}]),
        ("one_bin", torch.rand(100), "int64", [1, -3, 3], [{}]),
    ]
    sources = {}
    for name, x, dtype, args, knob_sets in cases:
        plan = _plan(x, dtype, *args)
        space = plan.knob_space("cuda", H200)
        for i, overrides in enumerate(knob_sets):
            knobs = {**space.default(), **overrides}
            assert space.normalise(knobs) == knobs, (name, knobs)
            sources[f"{name}_{i}"] = plan.render("cuda", knobs, H200)
    return sources


def test_grid_mode_zeroes_the_output_on_the_stream_before_counting_and_nothing_allocates_or_waits() -> None:
    for name, source in _sources().items():
        assert not re.search(r"cudaMalloc|cudaFree|Synchronize|cudaMemset", source), name
        launches = re.findall(r"(kf_\w+)<<<[^>]*\(cudaStream_t\)stream>>>", source)
        grid = "'mode': 'grid'" in source
        assert launches == (["kf_zero", "kf_histc"] if grid else ["kf_histc"]), (name, launches)
        if not grid:
            assert "kf_histc<<<1," in source, name  # block mode: one block writes every count


def test_the_bin_arithmetic_is_eagers_per_dtype() -> None:
    sources = _sources()
    assert "__fdiv_rn(__fmul_rn(__fsub_rn(v, 0.0f), (float)64LL), __fsub_rn(63.0f, 0.0f))" in sources["float_ids_0"]
    assert "__ddiv_rn(__dmul_rn(__dsub_rn(v, -1.3)" in sources["float64_0"]
    assert "(int)(((long long)v - 0LL) * 64LL / (63LL - 0LL))" in sources["moe_int32_0"]  # integer division


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_mode_and_dtype_compiles_for_sm90_without_warnings(tmp_path: Path) -> None:
    rc, err = nvcc_object(cuda_bundle(_sources()), tmp_path / "histc.cu")
    assert rc == 0, err[-4000:]
    assert "warning" not in err, err[-4000:]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_one_kernel_compiles_alone_as_the_sandbox_builds_it(tmp_path: Path) -> None:
    plan = _plan(ids(4096, 128), "int64", 128, 0, 127)
    source = plan.render("cuda", {**plan.knob_space("cuda", H200).default(), "mode": "grid"}, H200)
    rc, err = nvcc_object(source, tmp_path / "alone.cu")
    assert rc == 0 and "warning" not in err, err

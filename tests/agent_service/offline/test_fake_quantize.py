"""Fake quantization by numbers, by one-element tensors and per channel: eager's bits on the cpu over
NaN, infinities, ties and values past every range, a zero point eager refuses left to eager, and
every form built by nvcc for sm_90 and, on a device, eager's cuda bits."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.cxx import STATUS_BAD_INPUT
from agent_service.offline.proposer import propose_offline
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ProposeRequest
from tests.agent_service.agent_cards import (
    NVCC,
    aten_card,
    compile_cpu,
    compile_cuda_each,
    cuda_bundle,
    nvcc_object,
    on_cuda,
    root_and_revisions,
    run_kernel,
    to_cuda_keeping_strides,
)

aten = torch.ops.aten
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
SPECIAL = [float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 3e9, 0.25, 0.35, -0.25, 12.7, -12.85, 0.0, -0.0]


def values(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Random values of ``shape`` spread over several quantization steps, the special ones first."""
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 6
    flat = x.view(-1)
    flat[:len(SPECIAL)] = torch.tensor(SPECIAL)[:flat.numel()]
    return x.to(dtype)


def int32(*items: int) -> torch.Tensor:
    return torch.tensor(items, dtype=torch.int32)


def scales(n: int) -> torch.Tensor:
    return torch.rand(n, generator=torch.Generator().manual_seed(n)) * 0.2 + 0.01


CASES: dict[str, tuple[Any, list[Any]]] = {
    "numbers_uint8": (aten.fake_quantize_per_tensor_affine.default, [values(8, 33), 0.1, 3, 0, 255]),
    "numbers_int8_bf16": (aten.fake_quantize_per_tensor_affine.default,
                          [values(8, 33, dtype=torch.bfloat16), 0.0371, -5, -128, 127]),
    "tensor_qparams": (aten.fake_quantize_per_tensor_affine.tensor_qparams,
                       [values(8, 33), torch.tensor([0.1]), int32(3), 0, 255]),
    "tensor_qparams_0dim_f16": (aten.fake_quantize_per_tensor_affine.tensor_qparams,
                                [values(4, 50, dtype=torch.float16), torch.tensor(0.05), torch.tensor(-7,
                                 dtype=torch.int32), -128, 127]),
    "per_channel_rows": (aten.fake_quantize_per_channel_affine.default,
                         [values(12, 40), scales(12), int32(*range(-6, 6)), 0, -128, 127]),
    "per_channel_columns_bf16": (aten.fake_quantize_per_channel_affine.default,
                                 [values(6, 40, dtype=torch.bfloat16), scales(40),
                                  int32(*([0, 5, -3, 127] * 10)), 1, -128, 127]),
    "per_channel_conv_weight_f16": (aten.fake_quantize_per_channel_affine.default,
                                    [values(8, 3, 3, 3, dtype=torch.float16), scales(8), int32(*([0] * 8)), 0,
                                     -127, 127]),
    "per_channel_middle_axis_uint8": (aten.fake_quantize_per_channel_affine.default,
                                      [values(2, 5, 7), scales(5), int32(0, 3, 128, 255, 9), 1, 0, 255]),
    "per_channel_transposed": (aten.fake_quantize_per_channel_affine.default,
                               [values(40, 6).t(), scales(6), int32(*range(6)), 0, -128, 127]),
}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fake_quantize")


@pytest.mark.parametrize("name", CASES)
def test_every_form_gives_eagers_bits_on_the_cpu(name: str, build_dir: Path) -> None:
    """Bit for bit at the root knobs and two revisions (the cached and vectorised loops differ)."""
    op, args = CASES[name]
    card, (expected,) = aten_card(op, args)
    assert plan_for_card(card, "cpu").family == "elementwise_unary"
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    for source, knobs in root_and_revisions(card, CPU):
        got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype).fill_(7.0)
        assert run_kernel(compile_cpu(source, build_dir), tensors, [got]) == 0
        same = (got == expected) | (got.isnan() & expected.isnan())
        assert bool(same.all()) and torch.equal(got.signbit(), expected.signbit()), (knobs, got, expected)


def test_a_zero_point_eager_refuses_is_left_for_eager_to_refuse(build_dir: Path) -> None:
    """Per channel, eager raises on a zero point outside the range: the cpu kernel writes nothing and
    returns the status on which the runtime hands the call to eager, which raises its own error."""
    x, scale = values(4, 6), scales(4)
    card, _ = aten_card(aten.fake_quantize_per_channel_affine.default, [x, scale, int32(0, 1, 2, 3), 0, -8, 7])
    source = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu")).source
    bad = int32(0, 1, 8, 3)
    with pytest.raises(RuntimeError, match="zero_point"):
        aten.fake_quantize_per_channel_affine.default(x, scale, bad, 0, -8, 7)
    got = torch.full_like(x, 7.0)
    assert run_kernel(compile_cpu(source, build_dir), [x, scale, bad], [got]) == STATUS_BAD_INPUT
    assert bool((got == 7.0).all())
    assert run_kernel(compile_cpu(source, build_dir), [x, scale, int32(-8, 7, 0, 0)], [got]) == 0


@pytest.mark.parametrize("op, args, reason", [
    (aten.fake_quantize_per_channel_affine.default,
     [values(4, 6), scales(4), torch.zeros(4), 0, -128, 127], "float32 zero_point"),
    (aten.fake_quantize_per_tensor_affine.tensor_qparams,
     [values(4, 6), torch.tensor(0.1, dtype=torch.float64), int32(0), -128, 127], "float64 scale"),
    (aten.fake_quantize_per_tensor_affine.default, [values(4, 6), 0.1, 0, -2**30, 2**30], "is not templated"),
    (aten.fake_quantize_per_tensor_affine.default, [values(4, 6, dtype=torch.float64), 0.1, 0, 0, 255],
     "float64"),
])
def test_forms_with_another_arithmetic_are_refused_with_the_reason(op: Any, args: list[Any], reason: str) -> None:
    card, _ = aten_card(op, args)
    with pytest.raises(UnsupportedCard, match=reason):
        plan_for_card(card, "cpu")


def test_other_formulas_never_see_int32_operands_as_stored() -> None:
    """Only fake quantization's formulas are written for an int32 operand as stored: ``a / b`` of two
    int32 tensors into float (eager's true division) must not become C's integer division."""
    a, b = torch.randint(-9, 9, (4, 8), dtype=torch.int32), torch.randint(1, 9, (4, 8), dtype=torch.int32)
    for op, args in ((aten.div.Tensor, [a, b]), (aten.sigmoid.default, [a]), (aten.add.Tensor, [a, values(4, 8)])):
        card, _ = aten_card(op, args)
        with pytest.raises(UnsupportedCard, match="int32 is not a float dtype"):
            plan_for_card(card, "cpu")


@pytest.mark.skipif(not NVCC, reason="needs nvcc")
def test_every_form_builds_for_sm_90_with_its_cuda_arithmetic(tmp_path: Path) -> None:
    """The cuda kernels cast where eager's cuda kernels cast: the per-channel form adds the zero point
    as an integer and clamps as integers; the int32 zero point is read as stored, in vectors too."""
    sources = {}
    for name, (op, args) in CASES.items():
        card = on_cuda(aten_card(op, args)[0])
        for step, (source, _) in enumerate(root_and_revisions(card, H200)):
            sources[f"{name}_{step}"] = source
    assert "kf_clamp_ll(" in sources["per_channel_rows_0"] and "kf_f2ll(" in sources["tensor_qparams_0"]
    assert re.search(r"kf_vec<int32_t, \d+>", sources["per_channel_columns_bf16_0"])
    status, err = nvcc_object(cuda_bundle(sources), tmp_path / "fake_quantize.o")
    assert status == 0, err[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda kernels")
def test_every_form_gives_eagers_bits_on_the_device(tmp_path: Path) -> None:
    """Eager's cuda kernels cast NaN to 0 and saturate; the kernels follow them, special values included."""
    runs = []
    for name, (op, args) in CASES.items():
        cuda_args = [to_cuda_keeping_strides(a) if isinstance(a, torch.Tensor) else a for a in args]
        card = aten_card(op, cuda_args)[0]
        for source, knobs in root_and_revisions(card, H200):
            runs.append((name, op, cuda_args, knobs, source))
    libraries = compile_cuda_each([source for *_, source in runs], tmp_path)
    for (name, op, cuda_args, knobs, _), library in zip(runs, libraries, strict=True):
        expected = op(*cuda_args)
        got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype, device="cuda").fill_(7.0)
        assert run_kernel(library, [a for a in cuda_args if isinstance(a, torch.Tensor)], [got]) == 0
        same = (got == expected) | (got.isnan() & expected.isnan())
        assert bool(same.all()), (name, knobs, got[~same][:8].tolist(), expected[~same][:8].tolist())

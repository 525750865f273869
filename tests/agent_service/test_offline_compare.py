"""Comparisons and logical ops: each case compiled with g++ and run on values where type promotion
decides the answer (ints beyond float32's precision, numbers rounded to float16, wrapped ints, NaN,
signed zeros, infinities); every output element must be eager's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.ops_compare import constant
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, compile_cpu, reference, run_kernel

aten = torch.ops.aten
bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
SPECIAL = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 0.1, 1.0, -2.5, 65504.0, 65520.0, 3.4e38, 1e-40]
BIG_INTS = [0, 1, -1, 16777216, 16777217, -16777217, 2**31 - 1, 2**40 + 1, 65519, 65520, 100000, 300, 44, 255]


def floats(dtype: torch.dtype, n: int = 0) -> torch.Tensor:
    """Special values and their neighbours, then ``n`` random ones."""
    values = torch.tensor(SPECIAL + [float(v) for v in BIG_INTS], dtype=f64)
    return torch.cat([values, torch.randn(n, dtype=f64) * 4]).to(dtype)


def ints(dtype: torch.dtype) -> torch.Tensor:
    wide = torch.tensor(BIG_INTS + [-v for v in BIG_INTS], dtype=torch.int64)
    return wide.to(dtype)  # wraps, as a model's narrower ints would hold them


def bools(n: int) -> torch.Tensor:
    return torch.arange(n) % 3 == 0


N = len(SPECIAL) + len(BIG_INTS)
CASES: dict[str, Callable[[], tuple[Any, list[Any]]]] = {
    "int64_lt_half": lambda: (aten.lt.Scalar, [ints(torch.int64), 0.5]),
    "int64_eq_float_rounds_to_f32": lambda: (aten.eq.Scalar, [ints(torch.int64), 16777216.0]),
    "f16_lt_tenth_rounded_to_f16": lambda: (aten.lt.Scalar, [floats(f16), 0.1]),
    "f16_eq_tenth": lambda: (aten.eq.Scalar, [floats(f16), 0.1]),
    "bf16_ge_f32_0dim_in_bf16": lambda: (aten.ge.Tensor, [floats(bf16), torch.tensor(0.1)]),
    "bf16_le_f32_in_f32": lambda: (aten.le.Tensor, [floats(bf16), floats(f32, 0).flip(0)]),
    "f32_ne_f64_0dim_in_f32": lambda: (aten.ne.Tensor, [floats(f32), torch.tensor(0.1, dtype=f64)]),
    "f64_gt_f32_0dim_in_f64": lambda: (aten.gt.Tensor, [floats(f64), torch.tensor(0.1, dtype=f32)]),
    "f16_eq_int64_in_f16": lambda: (aten.eq.Tensor, [floats(f16), ints(torch.int64)[:N]]),
    "int32_lt_int64_in_int64": lambda: (aten.lt.Tensor, [ints(torch.int32), ints(torch.int64).flip(0)]),
    "uint8_lt_300_wraps": lambda: (aten.lt.Scalar, [ints(torch.uint8), 300]),
    "int8_gt_minus_one": lambda: (aten.gt.Scalar, [ints(torch.int8), -1]),
    "int32_eq_huge_wraps": lambda: (aten.eq.Scalar, [ints(torch.int32), 2**32 + 1]),
    "bool_eq_bool_broadcast": lambda: (aten.eq.Tensor, [bools(12).view(3, 4), bools(4)]),
    "bool_ne_int_in_int64": lambda: (aten.ne.Scalar, [bools(12), 1]),
    "bool_lt_float_in_f32": lambda: (aten.lt.Scalar, [bools(12), 0.5]),
    "f32_ge_nan": lambda: (aten.ge.Scalar, [floats(f32), float("nan")]),
    "f32_le_inf_transposed": lambda: (aten.le.Scalar, [floats(f32, 2).view(4, 7).t(), float("inf")]),
    "bf16_gt_mask_rows_broadcast": lambda: (aten.gt.Tensor, [floats(bf16, 2).view(4, 7)[:, :1], floats(bf16, 0)[:7]]),
    "logical_not_bf16": lambda: (aten.logical_not.default, [floats(bf16)]),
    "logical_and_f32_int8": lambda: (aten.logical_and.default, [floats(f32), ints(torch.int8)[:N]]),
    "logical_or_bool_f16": lambda: (aten.logical_or.default, [bools(N), floats(f16)]),
    "logical_xor_f64_uint8": lambda: (aten.logical_xor.default, [floats(f64), ints(torch.uint8)[:N]]),
    "and_bool": lambda: (aten.__and__.Tensor, [bools(12).view(3, 4), bools(13)[1:].view(3, 4)]),
    "bitwise_or_bool_scalar": lambda: (aten.bitwise_or.Scalar, [bools(12), False]),
    "bitwise_not_bool": lambda: (aten.bitwise_not.default, [bools(12)]),
}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("compare_kernels")


@pytest.mark.parametrize("name", list(CASES))
def test_each_element_is_eagers(name: str, build_dir: Path) -> None:
    op, args = CASES[name]()
    card, _ = aten_card(op, args)
    plan = plan_for_card(card, "cpu")
    assert plan.family in ("compare", "logical")
    lib = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    (expected,) = reference(card, op, inputs)
    got = torch.ones_like(expected)
    assert run_kernel(lib, inputs, [got]) == 0
    wrong = (got != expected).nonzero().flatten().tolist()
    assert not wrong, f"elements {wrong[:8]} differ from eager"


def test_numbers_are_converted_as_eager_converts_them() -> None:
    assert constant(300, "uint8") == "(uint8_t)(44LL)"
    assert constant(-1, "uint8") == "(uint8_t)(255LL)"
    assert constant(2**32 + 1, "int32") == "(int32_t)(1LL)"
    assert constant(0.1, "float16") == float(torch.tensor(0.1).half()).hex() + "f"
    assert constant(16777217, "float32") == "0x1.0000000000000p+24f"
    assert constant(float("-inf"), "bfloat16") == "(-INFINITY)"
    assert constant(True, "bool") == "1"


def _refusal(op: Any, args: list[Any]) -> str:
    card, _ = aten_card(op, args)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def test_what_is_not_a_bool_result_of_abi_dtypes_is_refused() -> None:
    # the bitwise ops of integers write integers: integer arithmetic serves them
    integers = aten_card(aten.__and__.Tensor, [bools(4), torch.tensor([1, 2, 3, 4], dtype=torch.uint8)])[0]
    assert plan_for_card(integers, "cpu").family == "integer_arithmetic"
    assert "complex" in _refusal(aten.eq.Tensor, [torch.randn(4, dtype=torch.complex64), torch.randn(4)])


BOUNDS = [-2.5, -0.0, 0.1, 0.1, 1.0, 300.0, float("inf")]
BUCKETIZE: dict[str, Callable[[], tuple[list[Any], dict[str, Any]]]] = {
    "f32": lambda: ([floats(f32, 20), torch.tensor(BOUNDS)], {}),
    "f32_right_int32_transposed": lambda: ([floats(f32, 2).view(4, 7).t(), torch.tensor(BOUNDS)],
                                           {"right": True, "out_int32": True}),
    "bf16_strided_bounds": lambda: ([floats(bf16), torch.tensor(BOUNDS * 2, dtype=bf16)[::2]], {}),
    "int64": lambda: ([ints(torch.int64), torch.tensor([-300, 0, 1, 255, 2**40], dtype=torch.int64)], {"right": True}),
    "f64_one_bound": lambda: ([floats(f64), torch.tensor([0.1], dtype=f64)], {}),
}


@pytest.mark.parametrize("name", list(BUCKETIZE))
def test_bucketize_finds_eagers_bucket(name: str, build_dir: Path) -> None:
    """Ties, a signed zero and an infinity among the boundaries, NaN and infinities among the values: eager's index
    for each."""
    args, kwargs = BUCKETIZE[name]()
    card, _ = aten_card(aten.bucketize.Tensor, args, kwargs)
    plan = plan_for_card(card, "cpu")
    assert plan.family == "bucketize"
    lib = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    expected = torch.bucketize(*args, **kwargs)
    got = torch.zeros_like(expected)
    assert run_kernel(lib, args, [got]) == 0
    wrong = (got != expected).nonzero().flatten().tolist()
    assert not wrong, f"elements {wrong[:8]} differ from eager"

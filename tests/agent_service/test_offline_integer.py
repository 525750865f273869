"""Integer arithmetic and copies between int, bool and float dtypes: each case compiled with g++ and
run on values where C and Python part ways (negative dividends, wrap-around at every width, a number
wrapped to the tensor's dtype, truncation toward zero); every output element must be eager's, and a
divisor eager would raise on or overflow with is refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, compile_cpu, reference, run_kernel

aten = torch.ops.aten
i64, i32, i8, u8 = torch.int64, torch.int32, torch.int8, torch.uint8
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
EDGES = [0, 1, -1, 7, -7, 8, -8, 9, -9, 127, -128, 255, 2**31 - 1, -(2**31), 2**62 + 3, 2**63 - 1, -(2**63), 300]


def ints(dtype: torch.dtype, n: int = 0) -> torch.Tensor:
    """The edges (wrapped to ``dtype`` as a model's narrower ints hold them), then ``n`` random ones."""
    wide = torch.cat([torch.tensor(EDGES, dtype=i64), torch.randint(-(2**40), 2**40, (n,), dtype=i64)])
    return wide.to(dtype)


N = len(EDGES)
CASES: dict[str, Callable[[], tuple[Any, list[Any], dict[str, Any]]]] = {
    "floor_divide_int64_by_8": lambda: (aten.floor_divide.default, [ints(i64, 40), 8], {}),
    "floor_divide_int64_by_minus_3": lambda: (aten.floor_divide.Scalar, [ints(i64, 40), -3], {}),
    "floor_divide_int8_by_300_wraps_to_44": lambda: (aten.floor_divide.Scalar, [ints(i8), 300], {}),
    "floor_divide_uint8_by_7": lambda: (aten.floor_divide.Scalar, [ints(u8), 7], {}),
    "remainder_int64_by_minus_5": lambda: (aten.remainder.Scalar, [ints(i64, 40), -5], {}),
    "remainder_int32_by_6_transposed": lambda: (aten.remainder.Scalar, [ints(i32, 2).view(4, 5).t(), 6], {}),
    "div_trunc_int64_by_minus_4": lambda: (aten.div.Scalar_mode, [ints(i64, 40), -4], {"rounding_mode": "trunc"}),
    "div_floor_int32_by_3": lambda: (aten.div.Scalar_mode, [ints(i32, 40), 3], {"rounding_mode": "floor"}),
    "add_int64_wraps": lambda: (aten.add.Tensor, [ints(i64), ints(i64).flip(0)], {}),
    "add_int32_alpha_3_wraps": lambda: (aten.add.Tensor, [ints(i32), ints(i32).flip(0)], {"alpha": 3}),
    "add_int8_to_int64_promotes": lambda: (aten.add.Tensor, [ints(i8), ints(i64).flip(0)], {}),
    "sub_uint8_wraps": lambda: (aten.sub.Tensor, [ints(u8), ints(u8).flip(0)], {}),
    "rsub_int64_alpha_2": lambda: (aten.rsub.Scalar, [ints(i64), 5], {"alpha": 2}),
    "mul_int64_wraps_broadcast": lambda: (aten.mul.Tensor, [ints(i64, 2).view(4, 5), ints(i64)[:5]], {}),
    "mul_int8_by_bool": lambda: (aten.mul.Tensor, [ints(i8), torch.arange(N) % 3 == 0], {}),
    "bitwise_and_int64": lambda: (aten.bitwise_and.Tensor, [ints(i64), ints(i64).flip(0)], {}),
    "xor_int32_by_number": lambda: (aten.__xor__.Scalar, [ints(i32), -6], {}),
    "or_uint8_by_300_wraps": lambda: (aten.__or__.Scalar, [ints(u8), 300], {}),
    "bitwise_not_int8": lambda: (aten.bitwise_not.default, [ints(i8)], {}),
    "neg_int64_minimum_stays": lambda: (aten.neg.default, [ints(i64, 40)], {}),
    "neg_int8_wraps": lambda: (aten.neg.default, [ints(i8)], {}),
    "neg_uint8_wraps": lambda: (aten.neg.default, [ints(u8)], {}),
    "abs_int32_transposed": lambda: (aten.abs.default, [ints(i32, 2).view(4, 5).t()], {}),
    "abs_int64_minimum_stays": lambda: (aten.abs.default, [ints(i64, 40)], {}),
    "maximum_int32_by_int64_row": lambda: (aten.maximum.default, [ints(i32, 2).view(4, 5), ints(i64)[:5]], {}),
    "clamp_int64": lambda: (aten.clamp.default, [ints(i64, 40), -7, 300], {}),
    "clamp_int64_min_above_max_gives_max": lambda: (aten.clamp.default, [ints(i64), 9, 2], {}),
    "clamp_int32_max_only_transposed": lambda: (aten.clamp.default, [ints(i32, 2).view(4, 5).t(), None, 8], {}),
    "clamp_min_int8": lambda: (aten.clamp_min.default, [ints(i8), -100], {}),
    "clamp_max_uint8": lambda: (aten.clamp_max.default, [ints(u8), 100], {}),
    "pow_int64_by_3_wraps": lambda: (aten.pow.Tensor_Scalar, [ints(i64, 40), 3], {}),
    "pow_int8_by_7_wraps": lambda: (aten.pow.Tensor_Scalar, [ints(i8), 7], {}),
    "pow_uint8_by_0": lambda: (aten.pow.Tensor_Scalar, [ints(u8), 0], {}),
    "pow_int64_by_exponents_negative_and_huge": lambda: (
        aten.pow.Tensor_Tensor, [torch.tensor([1, -1, -1, 2, 0, 3, -3, 5] * 3),
                                 torch.tensor([-5, -5, -4, -1, 0, 2**63 - 1, 41, 27] * 3)], {}),
    "pow_int32_by_int8_exponents_transposed": lambda: (
        aten.pow.Tensor_Tensor, [ints(i32, 2).view(4, 5).t(), torch.arange(-2, 3, dtype=i8).view(5, 1)], {}),
}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("integer_kernels")


@pytest.mark.parametrize("name", list(CASES))
def test_each_element_is_eagers(name: str, build_dir: Path) -> None:
    op, args, kwargs = CASES[name]()
    card, _ = aten_card(op, args, kwargs)
    plan = plan_for_card(card, "cpu")
    assert plan.family == "integer_arithmetic"
    lib = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    (expected,) = reference(card, op, inputs)
    got = torch.full_like(expected, 77)
    assert run_kernel(lib, inputs, [got]) == 0
    wrong = (got != expected).nonzero().flatten().tolist()
    assert not wrong, f"elements {wrong[:8]} are {got.flatten()[wrong[:4]]}, eager's {expected.flatten()[wrong[:4]]}"


def _refusal(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    card, _ = aten_card(op, args, kwargs)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def _divided_by(divisor: int, dtype: torch.dtype) -> str:
    """Why a floor division of ``dtype`` by ``divisor`` is refused (eager raises on a zero divisor, so
    the card is captured with 2 and its template then names the divisor)."""
    card, _ = aten_card(aten.floor_divide.Scalar, [ints(dtype), 2])
    template = {**card.template, "args": [card.template["args"][0], divisor]}
    card = card.model_copy(update={"key": {**card.key, "template": template}})
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def test_divisors_that_raise_overflow_or_vary_are_refused() -> None:
    assert "by a tensor" in _refusal(aten.floor_divide.default, [ints(i64), torch.full((N,), 3)])
    assert "by 0" in _divided_by(0, i64)
    assert "by 256" in _divided_by(256, u8)  # 256 wraps to 0 in uint8
    assert "by -1" in _refusal(aten.remainder.Scalar, [ints(i64), -1])


def test_a_negative_integer_power_of_integers_is_refused_as_eager_raises() -> None:
    card, _ = aten_card(aten.pow.Tensor_Scalar, [ints(i64), 2])
    template = {**card.template, "args": [card.template["args"][0], -2]}
    card = card.model_copy(update={"key": {**card.key, "template": template}})
    with pytest.raises(UnsupportedCard, match="negative integer power"):
        plan_for_card(card, "cpu")
    with pytest.raises(RuntimeError, match="negative integer powers"):
        torch.pow(ints(i64), -2)


def test_floats_stay_with_the_float_engine_or_are_refused() -> None:
    assert plan_for_card(aten_card(aten.add.Tensor, [torch.randn(8), torch.randn(8)])[0], "cpu").family == \
        "elementwise_binary"
    assert "float32" in _refusal(aten.floor_divide.Scalar, [torch.randn(8), 2])
    assert "float32" in _refusal(aten.remainder.Scalar, [torch.randn(8), 2])



def test_an_in_place_integer_sum_reads_self_from_the_output(build_dir: Path) -> None:
    a, b = ints(i64, 2).view(4, 5), ints(i32)[:5]
    card, _ = aten_card(aten.add_.Tensor, [a.clone(), b], {"alpha": 3})
    plan = plan_for_card(card, "cpu")
    assert plan.family == "integer_arithmetic_inplace"
    lib = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    target = a.clone()
    assert run_kernel(lib, [torch.full_like(a, 77), b], [target]) == 0  # self's input pointer is never read
    assert torch.equal(target, a.add(b, alpha=3))


def test_an_in_place_integer_clamp_reads_self_from_the_output(build_dir: Path) -> None:
    a = ints(i64, 20)
    card, _ = aten_card(aten.clamp_.default, [a.clone(), -8, 127])
    plan = plan_for_card(card, "cpu")
    assert plan.family == "integer_arithmetic_inplace"
    target = a.clone()
    assert run_kernel(compile_cpu(plan.render("cpu", {}, CPU), build_dir), [torch.full_like(a, 77)], [target]) == 0
    assert torch.equal(target, a.clamp(-8, 127))
    assert "Python int bounds" in _refusal(aten.clamp.Tensor, [ints(i64), torch.tensor(3), None])
    assert "float dtype" in _refusal(aten.clamp.default, [ints(i64), None, 2.5])  # a float bound makes a float
    card, _ = aten_card(aten.clamp_max.default, [ints(i8), 100])  # eager raises on 1000: no call captures it
    template = {**card.template, "args": [card.template["args"][0], 1000]}
    with pytest.raises(UnsupportedCard, match="out of int8's range"):
        plan_for_card(card.model_copy(update={"key": {**card.key, "template": template}}), "cpu")
    assert plan_for_card(aten_card(aten.clamp.default, [torch.randn(8), -1.0, 1.0])[0], "cpu").family == \
        "elementwise_unary"


CONVERSIONS = {
    "int64_to_float32": (ints(i64), torch.float32),
    "int64_to_bfloat16_rounds_twice": (ints(i64), torch.bfloat16),
    "bool_to_float16": (torch.arange(N) % 3 == 0, torch.float16),
    "uint8_to_int64": (ints(u8), i64),
    "float32_to_int32_truncates": (torch.tensor([-2.5, -0.5, 0.5, 1.99, 3e9 / 4, -7.0, 0.0, 100.75]), i32),
    "float32_transposed_to_bool": (torch.tensor([[0.0, -0.0, float("nan")], [1e-40, -2.0, 0.0]]).t(), torch.bool),
}


@pytest.mark.parametrize("name", list(CONVERSIONS))
def test_a_copy_between_int_bool_and_float_dtypes_converts_as_eager(name: str, build_dir: Path) -> None:
    x, dtype = CONVERSIONS[name]
    card, (expected,) = aten_card(aten.to.dtype, [x, dtype])
    plan = plan_for_card(card, "cpu")
    assert plan.family == "gather_convert"
    got = torch.empty_like(expected)
    assert run_kernel(compile_cpu(plan.render("cpu", {}, CPU), build_dir), [x], [got]) == 0
    assert torch.equal(got, expected)

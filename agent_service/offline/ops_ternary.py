"""Elementwise ops of three tensors (``addcmul``, ``addcdiv``, ``lerp``) and ``nan_to_num``.

Each keeps eager's formula and order of operations in float, as eager's kernels compute in their
``opmath`` type: ``lerp`` takes eager's two forms either side of a weight of 0.5, so that a weight
of 1 gives ``end`` exactly.
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, tensor_argument
from agent_service.offline.cxx import cfloat
from agent_service.offline.elementwise import ElementwisePlan, Operand
from agent_service.offline.ops_elementwise import _check_single_output, _num
from kforge_domain.card import OperatorCard

#: The largest finite value of each float dtype, nan_to_num's default for +inf (its negation for -inf).
FLOAT_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def _operand(call: dict[str, Any], name: str) -> TensorArg:
    value = call.get(name)
    if not isinstance(value, TensorArg):
        raise UnsupportedCard(f"argument {name} is not a tensor")
    return value


def _lerp(self: str, end: str, weight: str) -> str:
    small, large = f"{self} + {weight} * ({end} - {self})", f"{end} - ({end} - {self}) * (1.0f - {weight})"
    return f"(fabsf({weight}) < 0.5f ? {small} : {large})"


def ternary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    """addcmul and addcdiv (``self + value * t1 * t2``, ``self + value * (t1 / t2)``) and lerp by a
    scalar or tensor weight, broadcast to the output: family ``elementwise_ternary``."""
    _check_single_output(card)
    x = tensor_argument(call)
    names = ("tensor1", "tensor2") if base in ("addcmul", "addcdiv") else ("end",)
    tensors = [x, *(_operand(call, n) for n in names)]
    if base == "lerp":
        weight = call.get("weight")
        if isinstance(weight, TensorArg):
            tensors.append(weight)
            expression = _lerp("x0", "x1", "x2")
        else:
            expression = _lerp("x0", "x1", cfloat(_num(weight, "lerp weight")))
    else:
        value = cfloat(_num(call.get("value", 1), "value"))
        expression = f"x0 + {value} * x1 * x2" if base == "addcmul" else f"x0 + {value} * (x1 / x2)"
    return ElementwisePlan(
        family="elementwise_ternary",
        summary=f"{card.op} to {card.outputs[0].shape} {card.outputs[0].dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=tuple(Operand(t.index, t.spec.dtype) for t in tensors), expression=expression,
    )


def nan_to_num_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    """NaN, +inf and -inf replaced as eager does (by default 0 and the output dtype's extremes):
    family ``elementwise_unary``."""
    _check_single_output(card)
    x = tensor_argument(call)
    dtype = card.outputs[0].dtype
    if dtype not in FLOAT_MAX:
        raise UnsupportedCard(f"nan_to_num of {dtype}: only float32, float16 and bfloat16 are templated")

    def given(name: str, default: float) -> str:
        value = call.get(name)
        return cfloat(default if value is None else _num(value, name))

    nan, pos, neg = given("nan", 0.0), given("posinf", FLOAT_MAX[dtype]), given("neginf", -FLOAT_MAX[dtype])
    return ElementwisePlan(
        family="elementwise_unary",
        summary=f"{card.op} over {card.outputs[0].shape} {dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), operands=(Operand(x.index, x.spec.dtype),),
        expression=f"(x0 != x0 ? {nan} : (x0 == INFINITY ? {pos} : (x0 == -INFINITY ? {neg} : x0)))",
    )

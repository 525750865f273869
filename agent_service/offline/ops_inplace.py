"""In-place elementwise ops (``relu_``, ``add_``, ``mul_``, ..., ``masked_fill_``, ``copy_``, ``fill_``,
``zero_``): the out-of-place templates of :mod:`agent_service.offline.ops_elementwise` and ``ops_gather``,
with ``self`` as the output, and the gather engine writing a converted copy or a constant over it.

The kernel contract passes the tensor an op mutates as an output, pre-filled with its value: the
plan reads operand ``x0`` from the output buffer and writes the result over it. A plan is made
only where the card says the op mutates ``self`` alone and ``self`` is laid out as the output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, split_op_name
from agent_service.offline.convert import conversion_helpers, converted
from agent_service.offline.elementwise import ElementwisePlan
from agent_service.offline.gather import Branch, GatherPlan, fill_bits, offset
from agent_service.offline.layout import broadcast_strides
from agent_service.offline.ops_elementwise import BINARY, UNARY, binary_plan, unary_plan
from agent_service.offline.ops_gather import masked_fill_plan
from agent_service.offline.ops_integer import CLAMPS, integer_plan, integer_result
from kforge_domain.card import OperatorCard

#: In-place op base name (``relu_``) -> its out-of-place formula's (``relu``); those aten has.
INPLACE_UNARY = {f"{name}_": name for name in UNARY}
INPLACE_BINARY = {f"{name}_": name for name in ("add", "sub", "mul", "div") if name in BINARY}
#: In-place ops the gather engine writes (:func:`inplace_masked_fill_plan`, :func:`inplace_copy_plan`,
#: :func:`inplace_fill_plan`).
INPLACE_GATHER = ("masked_fill_", "copy_", "fill_", "zero_")


def _self_is_the_output(card: OperatorCard, call: dict[str, Any]) -> TensorArg:
    """``self``, where the card mutates it alone and it is laid out as the output it is."""
    x = call.get("self")
    if not isinstance(x, TensorArg) or card.mutated_inputs != [x.index]:
        raise UnsupportedCard(f"{card.op} mutates inputs {card.mutated_inputs}; the template writes self alone")
    out = card.outputs[0]
    if (x.spec.shape, x.spec.stride, x.spec.dtype) != (out.shape, out.stride, out.dtype):
        raise UnsupportedCard(f"{card.op}: self is laid out unlike the output it is")
    return x


def _in_place(card: OperatorCard, call: dict[str, Any], plan: ElementwisePlan) -> ElementwisePlan:
    x = _self_is_the_output(card, call)
    assert plan.operands[0].tensor == x.index, "operand 0 of an elementwise plan is self"
    return replace(plan, family="elementwise_inplace", summary=f"in place: {plan.summary}", in_place=True)


def inplace_unary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan | GatherPlan:
    """The float formula in place, or an integer clamp (:mod:`agent_service.offline.ops_integer`)."""
    if integer_result(card) and INPLACE_UNARY[base] in CLAMPS:
        _self_is_the_output(card, call)
        plan = integer_plan(card, INPLACE_UNARY[base], call, in_place=True)
        return replace(plan, family="integer_arithmetic_inplace", summary=f"in place: {plan.summary}")
    return _in_place(card, call, unary_plan(card, INPLACE_UNARY[base], call))


def inplace_binary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan | GatherPlan:
    """The float formula in place, or integer arithmetic (:mod:`agent_service.offline.ops_integer`) where
    ``self`` holds integers."""
    if integer_result(card):
        _self_is_the_output(card, call)
        plan = integer_plan(card, INPLACE_BINARY[base], call, in_place=True)
        return replace(plan, family="integer_arithmetic_inplace", summary=f"in place: {plan.summary}")
    return _in_place(card, call, binary_plan(card, INPLACE_BINARY[base], call))


def inplace_masked_fill_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """masked_fill_.Scalar: the value where the mask holds; elsewhere the output keeps its pre-fill
    (each element rewrites what it read from the output, so ``self``'s pointer is never read)."""
    _self_is_the_output(card, call)
    plan = masked_fill_plan(card, "masked_fill", call)
    out = card.outputs[0]
    keep = Branch("", f"out[{offset([f'o{d}' for d in range(len(out.shape))], out.stride)}]")
    return replace(plan, family="gather_select_inplace", summary=f"in place: {plan.summary}",
                   branches=(*plan.branches[:-1], keep))


def _gather_over_self(card: OperatorCard, family: str, summary: str, value: str) -> GatherPlan:
    """Every element of ``self`` (the output) overwritten by ``value``; its old values are never read."""
    out = card.outputs[0]
    return GatherPlan(family=family, summary=f"in place: {card.op} {summary} into {out.dtype}{out.shape} "
                      f"stride {out.stride}", inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                      branches=(Branch("", value),), helpers=conversion_helpers(value))


def inplace_copy_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """copy_ (and fill_.Tensor, a copy from a 0-dim tensor): ``src`` broadcast to self's shape and
    converted to self's dtype as eager converts it (:mod:`agent_service.offline.convert`)."""
    x = _self_is_the_output(card, call)
    src = call.get("value" if base == "fill_" else "src")
    if not isinstance(src, TensorArg):
        raise UnsupportedCard(f"{card.op} from {src!r}, not a tensor")
    if src.device != x.device:
        raise UnsupportedCard(f"{card.op} from {src.device} to {x.device} moves data between devices; not a kernel")
    if "complex" in src.spec.dtype or "complex" in x.spec.dtype:
        raise UnsupportedCard(f"{card.op} of {src.spec.dtype} into {x.spec.dtype}: complex dtypes are not templated")
    out = card.outputs[0]
    coords = [f"o{d}" for d in range(len(out.shape))]
    read = f"in{src.index}[{offset(coords, broadcast_strides(src.spec, out.shape))}]"
    return _gather_over_self(card, "gather_copy_inplace", f"of {src.spec.dtype}{src.spec.shape}",
                             converted(read, src.spec.dtype, out.dtype))


def inplace_fill_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """fill_.Scalar and zero_: the number as eager stores it in self's dtype, in every element."""
    if base == "fill_" and split_op_name(card.op)[1] == "Tensor":
        return inplace_copy_plan(card, base, call)
    _self_is_the_output(card, call)
    value = 0 if base == "zero_" else call.get("value")
    if isinstance(value, TensorArg):
        raise UnsupportedCard(f"{card.op} by a tensor value is not templated")
    return _gather_over_self(card, "gather_fill_inplace", f"with {value!r}", fill_bits(value, card.outputs[0].dtype))

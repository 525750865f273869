"""In-place elementwise ops (``relu_``, ``add_``, ``mul_``, ...): the out-of-place formulas of
:mod:`agent_service.offline.ops_elementwise`, with ``self`` as the output.

The kernel contract passes the tensor an op mutates as an output, pre-filled with its value: the
plan reads operand ``x0`` from the output buffer and writes the result over it. A plan is made
only where the card says the op mutates ``self`` alone and ``self`` is laid out as the output.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard
from agent_service.offline.elementwise import ElementwisePlan
from agent_service.offline.ops_elementwise import BINARY, UNARY, binary_plan, unary_plan
from kforge_domain.card import OperatorCard

#: In-place op base name (``relu_``) -> its out-of-place formula's (``relu``); those aten has.
INPLACE_UNARY = {f"{name}_": name for name in UNARY}
INPLACE_BINARY = {f"{name}_": name for name in ("add", "sub", "mul", "div") if name in BINARY}


def _in_place(card: OperatorCard, call: dict[str, Any], plan: ElementwisePlan) -> ElementwisePlan:
    x = call.get("self")
    if not isinstance(x, TensorArg) or card.mutated_inputs != [x.index]:
        raise UnsupportedCard(f"{card.op} mutates inputs {card.mutated_inputs}; the template writes self alone")
    out = card.outputs[0]
    if (x.spec.shape, x.spec.stride, x.spec.dtype) != (out.shape, out.stride, out.dtype):
        raise UnsupportedCard(f"{card.op}: self is laid out unlike the output it is")
    assert plan.operands[0].tensor == x.index, "operand 0 of an elementwise plan is self"
    return replace(plan, family="elementwise_inplace", summary=f"in place: {plan.summary}", in_place=True)


def inplace_unary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    return _in_place(card, call, unary_plan(card, INPLACE_UNARY[base], call))


def inplace_binary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    return _in_place(card, call, binary_plan(card, INPLACE_BINARY[base], call))

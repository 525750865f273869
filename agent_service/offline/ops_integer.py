"""Integer arithmetic the gather engine covers: add, sub, rsub, mul, floor division, remainder,
division with a rounding mode, pow, the bitwise ops, maximum and minimum, of integer tensors and Python
ints, neg and abs, and clamp by Python ints, exact as eager's.

Eager computes in the operands' common dtype (``torch.result_type``) and wraps on overflow. The
kernel computes in 64 bits, sums and products in ``uint64_t`` (C wraps only unsigned arithmetic),
and casts to the output's type, which wraps as eager's narrower types do. A quotient or remainder
is taken by a number only, never by a tensor: on the cpu eager raises on a zero divisor where a
kernel's division would kill the process, and a card does not fix a tensor's values. The numbers 0
and -1 are refused too: the quotient of the type's minimum by -1 overflows, which traps on x86.
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard
from agent_service.offline.gather import Branch, GatherPlan, offset
from agent_service.offline.ops_compare import common_dtype, element_value, operand, wrap_int
from kforge_domain.card import OperatorCard

INTEGER_DTYPES = ("int64", "int32", "int8", "uint8")
#: op base name -> C statement over ``a`` and ``b`` (int64_t) that sets ``r``; alpha scales ``b`` (``a`` for rsub)
SUMS = {
    "add": "r = (int64_t)((uint64_t)a + (uint64_t)b);",
    "sub": "r = (int64_t)((uint64_t)a - (uint64_t)b);",
    "rsub": "r = (int64_t)((uint64_t)b - (uint64_t)a);",
    "mul": "r = (int64_t)((uint64_t)a * (uint64_t)b);",
}
#: Python's floor division and remainder: truncation's result moved where the signs differ
DIVISIONS = {
    "floor": "r = a / b; if (a % b != 0 && ((a % b < 0) != (b < 0))) r -= 1;",
    "trunc": "r = a / b;",
    "remainder": "r = a % b; if (r != 0 && ((r < 0) != (b < 0))) r += b;",
}
#: bitwise ops of integers (of bools they are logical ops: agent_service.offline.ops_compare)
BITWISE = {"bitwise_and": "r = a & b;", "__and__": "r = a & b;", "bitwise_or": "r = a | b;", "__or__": "r = a | b;",
           "bitwise_xor": "r = a ^ b;", "__xor__": "r = a ^ b;", "bitwise_not": "r = ~a;"}
EXTREMA = {"maximum": "r = a > b ? a : b;", "minimum": "r = a < b ? a : b;"}
#: ops of one operand: negation wraps as eager's (the minimum stays itself; -1 of uint8 is 255)
UNARY = {"neg": "r = (int64_t)(0 - (uint64_t)a);", "abs": "r = a < 0 ? (int64_t)(0 - (uint64_t)a) : a;",
         "bitwise_not": BITWISE["bitwise_not"]}
#: c10's powi: squaring in the dtype (wrapping), and a negative exponent gives 0 but for bases 1 and -1
POWER = ("if (b < 0) r = a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0); "
         "else { uint64_t base = (uint64_t)a, acc = 1; for (int64_t e = b; e; e /= 2) { "
         "if (e & 1) acc *= base; base *= base; } r = (int64_t)acc; }")
INTEGER_OPS = (*SUMS, "floor_divide", "remainder", "div", "pow", *BITWISE, *EXTREMA, *UNARY)
#: every op's statement but div's, which its rounding mode picks
FORMULAS = {**SUMS, **BITWISE, **EXTREMA, **UNARY, "remainder": DIVISIONS["remainder"],
            "floor_divide": DIVISIONS["floor"], "pow": POWER}


def integer_result(card: OperatorCard) -> bool:
    """The card writes one integer output: integer arithmetic, not the float engine's."""
    return len(card.outputs) == 1 and card.outputs[0].dtype in INTEGER_DTYPES


def _as_int64(card: OperatorCard, value: TensorArg | bool | int | float, dtype: str) -> str:
    """An operand as an ``int64_t`` of the common ``dtype``'s value (a number wrapped to it first)."""
    if isinstance(value, TensorArg):
        if value.spec.dtype not in (*INTEGER_DTYPES, "bool"):
            raise UnsupportedCard(f"a {value.spec.dtype} operand in integer arithmetic is not templated")
        return f"(int64_t)({element_value(card, value)})"
    return _literal(wrap_int(value, dtype))


def _literal(value: int) -> str:
    """An int64 C literal (the minimum has none: ``-9223372036854775808LL`` negates an unsigned)."""
    return "INT64_MIN" if value == -(2**63) else f"(int64_t)({value}LL)"


def _statement(base: str, call: dict[str, Any]) -> str:
    if base in FORMULAS:
        return FORMULAS[base]
    if base != "div":
        raise UnsupportedCard(f"no integer formula for {base}; integer arithmetic covers {', '.join(INTEGER_OPS)}")
    mode = call.get("rounding_mode")
    if mode not in ("floor", "trunc"):
        raise UnsupportedCard(f"integer div with rounding_mode={mode!r} divides truly into a float; not templated")
    return DIVISIONS[mode]


def _divisor(base: str, other: TensorArg | bool | int | float, dtype: str) -> None:
    """Refuse a divisor the kernel cannot divide by as eager does (see the module's docstring)."""
    if base not in ("floor_divide", "remainder", "div"):
        return
    if isinstance(other, TensorArg):
        raise UnsupportedCard(f"integer {base} by a tensor: a zero divisor raises in eager and traps in a kernel")
    if wrap_int(other, dtype) in (0, -1):
        raise UnsupportedCard(f"integer {base} by {other!r} in {dtype}: division by 0 raises and by -1 may overflow")


def integer_plan(card: OperatorCard, base: str, call: dict[str, Any], *, in_place: bool = False) -> GatherPlan:
    """One integer op of two operands, the first a tensor, into the card's integer output; ``in_place``:
    ``self`` is the output (the kernel contract passes it pre-filled) and is read from there."""
    if base in CLAMPS:
        return integer_clamp_plan(card, base, call, in_place=in_place)
    if not integer_result(card):
        raise UnsupportedCard(f"{card.op} writes {[o.dtype for o in card.outputs]}; integer arithmetic "
                              f"writes one output of {', '.join(INTEGER_DTYPES)}")
    a = operand(call, "self")
    b = a if base in UNARY else operand(call, "exponent" if base == "pow" else "other")  # ``-a`` reads one
    dtype = common_dtype(a, b)
    if base == "pow" and not isinstance(b, TensorArg) and b < 0:
        raise UnsupportedCard(f"integer pow by {b!r}: eager raises on a negative integer power of integers")
    out = card.outputs[0]
    if dtype != out.dtype:
        raise UnsupportedCard(f"{card.op} computes in {dtype} but writes {out.dtype}; not templated")
    _divisor(base, b, dtype)
    values = [_as_int64(card, a, dtype), _as_int64(card, b, dtype)]
    if in_place:
        values[0] = _own_value(card)
    alpha = call.get("alpha", 1)
    if alpha is not None and alpha != 1:
        if base not in ("add", "sub", "rsub") or isinstance(alpha, (bool, float)) or not isinstance(alpha, int):
            raise UnsupportedCard(f"{card.op} with alpha={alpha!r} is not templated")
        scaled = 0 if base == "rsub" else 1  # rsub is other - alpha * self
        values[scaled] = f"(int64_t)((uint64_t){values[scaled]} * (uint64_t){_literal(wrap_int(alpha, dtype))})"
    return _integer_gather(card, f"([&]() -> int64_t {{ const int64_t a = {values[0]}, b = {values[1]}; "
                                 f"int64_t r; {_statement(base, call)} return r; }}())")


def _own_value(card: OperatorCard) -> str:
    """The output's own element, as an int64: an in-place op's ``self``, pre-filled in the output."""
    out = card.outputs[0]
    return f"(int64_t)(out[{offset([f'o{d}' for d in range(len(out.shape))], out.stride)}])"


def _integer_gather(card: OperatorCard, value: str) -> GatherPlan:
    """Every output element the int64 C expression ``value``, cast to the output's type."""
    out = card.outputs[0]
    return GatherPlan(family="integer_arithmetic", summary=f"{card.op} to {out.shape} {out.dtype} stride {out.stride}",
                      inputs=tuple(card.inputs), outputs=tuple(card.outputs), branches=(Branch("", f"(T)({value})"),))


#: clamp's overloads by numbers and the bounds each takes
CLAMPS = {"clamp": ("min", "max"), "clamp_min": ("min",), "clamp_max": ("max",)}


def integer_clamp_plan(card: OperatorCard, base: str, call: dict[str, Any], *, in_place: bool = False) -> GatherPlan:
    """clamp, clamp_min and clamp_max of an integer tensor by Python ints, into its own dtype:
    ``min(max(x, lo), hi)``, so ``hi`` where ``lo > hi`` as in eager; a bound the dtype cannot hold
    is refused, as eager raises on it; ``in_place``: ``self`` is the output, read from there."""
    if not integer_result(card):
        raise UnsupportedCard(f"{card.op} writes {[o.dtype for o in card.outputs]}, not one integer output")
    x, out = operand(call, "self"), card.outputs[0]
    if not isinstance(x, TensorArg) or x.spec.dtype != out.dtype:
        raise UnsupportedCard(f"{card.op} of {getattr(x, 'spec', x)} into {out.dtype} converts; not templated")
    bounds = {name: call.get(name) for name in CLAMPS[base]}
    given = {name: v for name, v in bounds.items() if v is not None}
    if not given:
        raise UnsupportedCard(f"{card.op} without a bound raises in eager")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in given.values()):
        raise UnsupportedCard(f"{card.op} by {bounds}: only Python int bounds are templated for integers")
    if any(wrap_int(v, out.dtype) != v for v in given.values()):
        raise UnsupportedCard(f"{card.op} by {bounds}: a bound out of {out.dtype}'s range raises in eager")
    a = _own_value(card) if in_place else f"(int64_t)({element_value(card, x)})"
    consts = "".join(f" const int64_t b{name} = {_literal(v)};" for name, v in given.items())
    steps = "".join(f" if (r {'<' if name == 'min' else '>'} b{name}) r = b{name};" for name in given)
    return _integer_gather(card, f"([&]() -> int64_t {{{consts} int64_t r = {a};{steps} return r; }}())")

"""Aten cards with a bool output the gather engine covers: comparisons (eq, ne, lt, le, gt, ge, by a
tensor or a number) and logical ops (logical_not/and/or/xor; bitwise and/or/xor of bool tensors).

A comparison runs in eager's common dtype of its operands (``torch.result_type``: a dimensioned
tensor's dtype over a 0-dim tensor's or a number's of the same category), each operand converted
to it as eager converts: an int compared with 0.5 in float32, a float16 tensor with 0.1 after 0.1
is rounded to float16, a Python int wrapped to an int tensor's width. float16 and bfloat16 values
are compared in float, exactly, after rounding to their dtype where eager rounds. Every element
is read as the raw bits the gather engine moves and turned into its value by the helpers below,
so the result is exact for every ABI dtype, NaN and signed zeros included (C's comparisons are
IEEE's, as eager's are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, tensor_argument
from agent_service.offline.cxx import cfloat
from agent_service.offline.gather import Branch, GatherPlan, offset
from agent_service.offline.layout import broadcast_strides
from kforge_domain.card import OperatorCard

COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
LOGICAL = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}
#: bitwise ops of bool tensors are their logical ops; of int tensors they are not templated
BOOL_BITWISE = {"bitwise_and": "&&", "__and__": "&&", "bitwise_or": "||", "__or__": "||",
                "bitwise_xor": "!=", "__xor__": "!=", "bitwise_not": "!"}

#: The value of one element from its raw bits, and rounding a float to float16/bfloat16:
#: name -> (cuda definition, cpu definition); a plan defines only those its expression calls.
HELPERS = {
    "kf_val_f16": ("float kf_val_f16(uint16_t u) { return kf_to_f32(__ushort_as_half(u)); }",
                   "float kf_val_f16(uint16_t u) { kf_f16 h; h.bits = u; return kf_to_f32(h); }"),
    "kf_val_bf16": ("float kf_val_bf16(uint16_t u) { return kf_to_f32(__ushort_as_bfloat16(u)); }",
                    "float kf_val_bf16(uint16_t u) { return kf_bits_f32((uint32_t)u << 16); }"),
    "kf_val_f32": ("float kf_val_f32(uint32_t u) { return __uint_as_float(u); }",
                   "float kf_val_f32(uint32_t u) { return kf_bits_f32(u); }"),
    "kf_val_f64": ("double kf_val_f64(uint64_t u) { return __longlong_as_double((long long)u); }",
                   "double kf_val_f64(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }"),
    "kf_round_f16": ("float kf_round_f16(float x) { return kf_to_f32(kf_from_f32<__half>(x)); }",
                     "float kf_round_f16(float x) { return kf_to_f32(kf_from_f32<kf_f16>(x)); }"),
    "kf_round_bf16": ("float kf_round_bf16(float x) { return kf_to_f32(kf_from_f32<__nv_bfloat16>(x)); }",
                      "float kf_round_bf16(float x) { return kf_to_f32(kf_from_f32<kf_bf16>(x)); }"),
}


def helpers_for(expression: str, table: Mapping[str, tuple[str, str]] = HELPERS) -> str:
    """The helper definitions of ``table`` that ``expression`` calls, for whichever backend compiles them."""
    used = [definitions for name, definitions in table.items() if f"{name}(" in expression]
    if not used:
        return ""
    cuda = "".join(f"static __device__ __forceinline__ {c}\n" for c, _ in used)
    cpu = "".join(f"static inline {c}\n" for _, c in used)
    return f"#ifdef __CUDACC__\n{cuda}#else\n{cpu}#endif\n"


_VALUE = {"float16": "kf_val_f16", "bfloat16": "kf_val_bf16", "float32": "kf_val_f32", "float64": "kf_val_f64"}
VALUE_HELPERS = _VALUE  # a float dtype -> the helper giving an element's value from its raw bits
_ROUND = {"float16": "kf_round_f16", "bfloat16": "kf_round_bf16"}
#: the C type a comparison runs in, per common dtype (float16 and bfloat16 values held in float)
_COMPUTE = {"float64": "double", "float32": "float", "float16": "float", "bfloat16": "float", "int64": "int64_t",
            "int32": "int32_t", "int8": "int8_t", "uint8": "uint8_t", "bool": "uint8_t"}
_EXACT_IN_HALVES = ("bool", "uint8", "int8")  # every value of these is a float16 and a bfloat16 value
_INT_BITS = {"int64": 64, "int32": 32, "int8": 8, "uint8": 8}


def operand(call: dict[str, Any], name: str) -> TensorArg | bool | int | float:
    value = call.get(name)
    if isinstance(value, TensorArg):
        return value
    if isinstance(value, (bool, int, float)):
        return value
    raise UnsupportedCard(f"argument {name!r} is {value!r}, not a tensor or a real number")


def element_value(card: OperatorCard, t: TensorArg) -> str:
    """The element of ``t`` (broadcast to the output) at the output coordinates, as its value."""
    out = card.outputs[0]
    raw = f"in{t.index}[{offset([f'o{d}' for d in range(len(out.shape))], broadcast_strides(t.spec, out.shape))}]"
    return _value_of(raw, t.spec.dtype)


def _value_of(raw: str, dtype: str) -> str:
    """A C expression of the element whose raw bits ``raw`` reads, as a value of ``dtype``."""
    return f"{_VALUE[dtype]}({raw})" if dtype in _VALUE else raw


def common_dtype(a: TensorArg | bool | int | float, b: TensorArg | bool | int | float) -> str:
    """eager's common dtype of two operands (numbers and 0-dim tensors weigh as it weighs them)."""
    import torch

    def meta(t: TensorArg) -> torch.Tensor:
        return torch.empty(t.spec.shape, dtype=getattr(torch, t.spec.dtype), device="meta")

    if not isinstance(a, TensorArg):
        raise UnsupportedCard("the first operand is not a tensor")
    other = meta(b) if isinstance(b, TensorArg) else b
    return str(torch.result_type(meta(a), other)).removeprefix("torch.")


def constant(value: bool | int | float, dtype: str) -> str:
    """A C literal of ``value`` converted to ``dtype`` as eager converts a number to it."""
    import torch

    if dtype in _VALUE:
        source = torch.tensor(value, dtype=torch.float64 if isinstance(value, float) else torch.int64)
        converted = float(source.to(getattr(torch, dtype)).item())
        if converted != converted or converted in (float("inf"), float("-inf")):
            return cfloat(converted)
        return converted.hex() + ("" if dtype == "float64" else "f")
    if dtype == "bool":
        return "1" if value else "0"
    wrapped = wrap_int(value, dtype)
    return f"({_COMPUTE[dtype]})({wrapped}LL)" if wrapped != -(2**63) else "INT64_MIN"


def wrap_int(value: bool | int | float, dtype: str) -> int:
    """The integer ``value`` as a ``dtype`` element holds it (eager's static_cast: two's complement
    wrap-around); :class:`UnsupportedCard` for a float or a value beyond int64."""
    if isinstance(value, float) or dtype not in _INT_BITS or not -(2**63) <= int(value) < 2**63:
        raise UnsupportedCard(f"number {value!r} in {dtype}")
    bits = _INT_BITS[dtype]
    wrapped = int(value) % (1 << bits)
    if dtype != "uint8" and wrapped >= 1 << (bits - 1):
        wrapped -= 1 << bits
    return wrapped


def _converted(card: OperatorCard, operand: TensorArg | bool | int | float, dtype: str) -> str:
    """``operand`` as a value of the common ``dtype``, converted as eager converts it."""
    if not isinstance(operand, TensorArg):
        return constant(operand, dtype)
    value, source = element_value(card, operand), operand.spec.dtype
    if dtype in _ROUND and source != dtype and source not in _EXACT_IN_HALVES:
        return f"{_ROUND[dtype]}((float)({value}))"
    if dtype == "bool":
        return f"(uint8_t)(({value}) != 0)"
    return f"({_COMPUTE[dtype]})({value})"


def _plan(card: OperatorCard, family: str, expression: str) -> GatherPlan:
    out = card.outputs[0]
    return GatherPlan(family=family, summary=f"{card.op} to {out.shape} bool stride {out.stride}",
                      inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                      branches=(Branch("", f"(T)({expression})"),), helpers=helpers_for(expression))


def _check_bool_output(card: OperatorCard) -> None:
    if len(card.outputs) != 1 or card.outputs[0].dtype != "bool":
        raise UnsupportedCard(f"{card.op} writes {[o.dtype for o in card.outputs]}; one bool output is templated")


def compare_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """eq, ne, lt, le, gt, ge (.Tensor and .Scalar): both operands in their common dtype, then compared."""
    _check_bool_output(card)
    a, b = operand(call, "self"), operand(call, "other")
    dtype = common_dtype(a, b)
    if dtype not in _COMPUTE:
        raise UnsupportedCard(f"{card.op} compares in {dtype}; not templated")
    expression = f"{_converted(card, a, dtype)} {COMPARISONS[base]} {_converted(card, b, dtype)}"
    return _plan(card, "compare", expression)


def _truth(card: OperatorCard, operand: TensorArg | bool | int | float) -> str:
    if isinstance(operand, TensorArg):
        if operand.spec.dtype not in _COMPUTE:
            raise UnsupportedCard(f"a {operand.spec.dtype} operand is not templated")
        return f"(({element_value(card, operand)}) != 0)"
    return "1" if operand else "0"


def _is_bool(operand: TensorArg | bool | int | float) -> bool:
    return isinstance(operand, bool) or (isinstance(operand, TensorArg) and operand.spec.dtype == "bool")


def logical_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """logical_not/and/or/xor of any dtypes (an element is true where it is not 0; NaN is true);
    bitwise and/or/xor where every operand is bool (then they are the logical ops)."""
    unary = base in ("logical_not", "bitwise_not")
    operands = [operand(call, "self")] + ([] if unary else [operand(call, "other")])
    if base in BOOL_BITWISE and not all(_is_bool(o) for o in operands):
        raise UnsupportedCard(f"{card.op} of a non-bool operand is an integer bitwise op; only bool is templated")
    _check_bool_output(card)
    truths = [_truth(card, o) for o in operands]
    if unary:
        return _plan(card, "logical", f"!{truths[0]}")
    return _plan(card, "logical", f"{truths[0]} {LOGICAL.get(base) or BOOL_BITWISE[base]} {truths[1]}")


def bucketize_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> GatherPlan:
    """bucketize of a tensor by a 1-d boundaries tensor of its dtype, into int64 (int32 with
    ``out_int32``): each output the index eager's binary search gives, the first boundary not below
    the element (``right``: above it), compared as eager compares (``!(boundary >= value)`` moves
    right), so a NaN element lands past every boundary as in eager."""
    x, bounds = tensor_argument(call, "self"), tensor_argument(call, "boundaries")
    out = card.outputs[0]
    want = "int32" if call.get("out_int32") else "int64"
    if len(bounds.spec.shape) != 1 or bounds.spec.dtype != x.spec.dtype or x.spec.dtype not in _COMPUTE \
            or x.spec.dtype == "bool" or len(card.outputs) != 1 or out.dtype != want or out.shape != x.spec.shape:
        raise UnsupportedCard(f"bucketize of {x.spec.dtype} {x.spec.shape} by {bounds.spec.dtype} {bounds.spec.shape} "
                              f"into {out.dtype} {out.shape} is not templated")
    kind = _COMPUTE[x.spec.dtype]
    boundary = _value_of(f"in{bounds.index}[mid * {bounds.spec.stride[0]}LL]", x.spec.dtype)
    test = ">" if call.get("right") else ">="
    search = (f"([&]() -> int64_t {{ const {kind} v = {element_value(card, x)}; int64_t lo = 0, hi = "
              f"{bounds.spec.shape[0]}LL; while (lo < hi) {{ const int64_t mid = lo + ((hi - lo) >> 1); "
              f"if (!(({kind})({boundary}) {test} v)) lo = mid + 1; else hi = mid; }} return lo; }}())")
    return GatherPlan(family="bucketize", summary=f"{card.op} to {out.shape} {out.dtype} stride {out.stride}",
                      inputs=tuple(card.inputs), outputs=tuple(card.outputs), branches=(Branch("", f"(T)({search})"),),
                      helpers=helpers_for(search))

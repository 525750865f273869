"""The element types of a scan: how each dtype is stored, converted to the output's and accumulated.

Eager's cumsum and cumprod convert the input to the output dtype first (``self.to(result dtype)``),
then accumulate. On cpu the running value is ``at::acc_type`` of the output dtype: double for
float32 and float64, float for float16 and bfloat16, int64 for every integer. On cuda it is the
output dtype itself (CumsumKernel.cu and CumprodKernel.cu scan with ``std::plus<scalar_t>`` and
``std::multiplies<scalar_t>``): a float16 or bfloat16 sum is rounded to its dtype after every
step (precision ``"native"``). Over a long run that drifts from the exact sum, and a kernel that
keeps a wider running value departs from eager by as much (a bf16 cumsum over 2048 steps, by more
than 1e-2 relative on the H100). Where eager's scan walks each run in order (over an outer or
middle dim, a thread per run) a native kernel in thread mode is eager's result bit for bit. Integers accumulate here
in ``unsigned long long``: it wraps as eager's int64 does in practice, without C's undefined
signed overflow, and the low bits of the result are the same.
"""

from __future__ import annotations

from agent_service.offline import cxx
from agent_service.offline.call import UnsupportedCard

FLOATS = ("float32", "float16", "bfloat16", "float64")
INTEGERS = ("int64", "int32", "int8", "uint8")
HALVES = ("float16", "bfloat16")
INTEGER_ACCUMULATOR = "unsigned long long"
NATIVE = "native"  # a half's running value rounded to the half after every step, as eager's cuda scan


def storage_type(dtype: str, backend: str) -> str:
    """The C type one element of ``dtype`` is stored as; :class:`UnsupportedCard` for a dtype not scanned."""
    try:
        return cxx.storage_type(dtype, backend)
    except KeyError:
        raise UnsupportedCard(f"a {dtype} scan is not templated") from None


#: Integer outputs a float input is converted into element by element, as eager's ``self.to(dtype)``
#: does: a C cast truncating toward zero, which on each backend is the instruction eager's own
#: conversion uses (x86's cvtt* on the cpu, cvt.rzi on cuda), out-of-range values and NaN included.
#: Into int8 and uint8 eager's vectorised cpu conversion may narrow otherwise than a scalar cast.
TRUNCATED_FROM_FLOAT = ("int32", "int64")


def check_conversion(source: str, target: str) -> None:
    """Refuse the conversions eager makes that a scan template does not: to bool (eager accumulates
    bools in bool), and from a float to an 8-bit integer (:data:`TRUNCATED_FROM_FLOAT`)."""
    storage_type(source, "cpu")
    storage_type(target, "cpu")
    if target == "bool":
        raise UnsupportedCard("a scan into bool is not templated")
    if source in FLOATS and target in INTEGERS and target not in TRUNCATED_FROM_FLOAT:
        raise UnsupportedCard(f"a {source} scan into {target}: eager's vectorised conversion to an 8-bit integer "
                              "may narrow otherwise than a C cast; not templated")


def eager_cpu_precision(target: str) -> str:
    """``"double"`` or ``"float"``: the accumulator eager's cpu kernel uses for a float output."""
    return "float" if target in HALVES else "double"


def accumulator(target: str, precision: str) -> str:
    """The C type the running value of a ``target`` scan is kept in (``precision`` for float32 and
    halves; ``"native"``, a half rounded after every step, is kept in a float between steps)."""
    if target in INTEGERS:
        return INTEGER_ACCUMULATOR
    if target == "float64":
        return "double"
    return "float" if precision == NATIVE else precision


def combine(op: str, target: str, precision: str, backend: str) -> str:
    """C expression of one scan step ``op`` (over running value ``a`` and element ``b``), rounded to
    ``target`` after the step where ``precision`` is ``"native"``, as eager's cuda scan of a half."""
    if precision == NATIVE and target in HALVES:
        return f"kf_to_f32(kf_from_f32<{storage_type(target, backend)}>({op}))"
    return op


def load(value: str, source: str, target: str, backend: str, acc: str) -> str:
    """C expression: element ``value`` of ``source`` converted to ``target`` as eager converts it, as ``acc``."""
    check_conversion(source, target)
    if source in HALVES:
        v = f"kf_to_f32({value})"
    elif source in FLOATS:
        v = value
    else:
        v = f"(int64_t)({value})"
    if target in INTEGERS:
        return f"({acc})(int64_t)({storage_type(target, backend)})({v})"  # wraps to the target's width first
    if target in HALVES and source != target:
        # eager's Half and BFloat16 are built from a float: an int64 or float64 is rounded twice
        v = f"kf_to_f32(kf_from_f32<{storage_type(target, backend)}>((float)({v})))"
    elif target == "float32" and source != target:
        v = f"(float)({v})"
    return f"({acc})({v})"


def store(value: str, target: str, backend: str) -> str:
    """C expression: the running value ``value`` as an element of ``target``."""
    if target in INTEGERS:
        return f"({storage_type(target, backend)})(int64_t)({value})"
    if target in HALVES:
        return f"kf_from_f32<{storage_type(target, backend)}>((float)({value}))"
    return f"({storage_type(target, backend)})({value})"

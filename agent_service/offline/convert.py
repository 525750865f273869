"""One element converted between dtypes as eager's ``copy_`` converts it, for the gather engine.

Elements travel as the raw bits the gather engine moves (:data:`agent_service.offline.gather.C_TYPES`):
a conversion reads the source element's value and gives the target's bits, as c10's casts do:

- to bool: ``value != 0`` (NaN is true, -0.0 false);
- to a float: C's conversion, rounding to nearest even; float16 and bfloat16 are built from a
  float32, as c10's Half and BFloat16 are, so a float64 or int64 value is rounded twice, as in eager;
- to an int from a float: truncation toward zero, C's cast as eager's ``static_cast``, and to
  uint8 through int64 as c10 casts (negative values wrap). A value outside the target's range
  is undefined in C++: the kernel then gives what its compiler gives, as eager's own kernels do
  (on x86 and in cuda these differ: eager's cpu and cuda results differ there too);
- between ints: two's complement wrap-around.
"""

from __future__ import annotations

from agent_service.offline.gather import c_type
from agent_service.offline.ops_compare import HELPERS, helpers_for
from agent_service.offline.ops_compare import VALUE_HELPERS as _VALUE

#: A float element's bits to its value (the comparison helpers) and a value to a float dtype's bits.
_BITS = {"float16": "kf_bits_of_f16", "bfloat16": "kf_bits_of_bf16", "float32": "kf_bits_of_f32",
         "float64": "kf_bits_of_f64"}
ENCODERS = {
    "kf_bits_of_f32": ("uint32_t kf_bits_of_f32(float x) { return __float_as_uint(x); }",
                       "uint32_t kf_bits_of_f32(float x) { return kf_f32_bits(x); }"),
    "kf_bits_of_f64": ("uint64_t kf_bits_of_f64(double x) { return (uint64_t)__double_as_longlong(x); }",
                       "uint64_t kf_bits_of_f64(double x) { uint64_t u; memcpy(&u, &x, 8); return u; }"),
    "kf_bits_of_f16": ("uint16_t kf_bits_of_f16(float x) { return __half_as_ushort(__float2half_rn(x)); }",
                       "uint16_t kf_bits_of_f16(float x) { return kf_from_f32<kf_f16>(x).bits; }"),
    "kf_bits_of_bf16": ("uint16_t kf_bits_of_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }",
                        "uint16_t kf_bits_of_bf16(float x) { return kf_from_f32<kf_bf16>(x).bits; }"),
}


def converted(raw: str, source: str, target: str) -> str:
    """A C expression of ``target``'s bits from ``raw``, an element of ``source`` as the gather engine reads it."""
    for dtype in (source, target):
        c_type(dtype)  # UnsupportedCard for a dtype the ABI lacks (complex ones)
    if source == target:
        return raw
    value = f"{_VALUE[source]}({raw})" if source in _VALUE else f"({raw})"
    if target == "bool":
        return f"(uint8_t)({value} != 0)"
    if target in _BITS:
        return f"{_BITS[target]}(({'double' if target == 'float64' else 'float'}){value})"
    if source in _VALUE and target == "uint8":
        return f"(uint8_t)(int64_t){value}"
    return f"({c_type(target)}){value}"


def conversion_helpers(expression: str) -> str:
    """The helpers ``expression`` (of :func:`converted`) calls, for whichever backend compiles them."""
    return helpers_for(expression, {**HELPERS, **ENCODERS})

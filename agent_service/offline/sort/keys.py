"""Sort keys: each element's raw bits mapped to an unsigned integer ordered as eager orders values.

Floats flip their sign bit (non-negative) or every bit (negative), the order of radix sorts;
-0.0 becomes +0.0 first, since eager compares them equal (its comparators use ``<``, and CUB's
radix sorts treat them alike since NVIDIA/cub#218). NaN is placed one of two ways:

- ``"comparator"``: every NaN is the largest key, all NaNs equal, as eager's cpu comparators
  (``KeyValueCompAsc``: NaN after every number) and cuda's ``LTOp<T, true>`` order them;
- ``"bits"``: by its bits, as CUB's radix sorts place it (a NaN with its sign bit set before
  -inf), which eager's cuda sort uses for rows longer than 128.

Signed integers flip their sign bit; unsigned and bool keep their bits. A descending sort takes
the complement, so an ascending sort of ``(key, index)`` gives the descending order with ties
still by ascending index (a stable descending sort).

Eager's cuda topk selects by a third order, its radix select's (``TopKTypeConfig::convert`` in
aten/src/ATen/native/cuda/SortingRadixSelect.cuh): the same flip without merging the zeros, so
-0.0 is below 0.0, and every NaN the largest key.
"""

from __future__ import annotations

from agent_service.offline.call import UnsupportedCard
from kforge_domain.dtypes import ABI_DTYPE_CODES, DTYPE_BYTES

BITS_TYPES = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}
#: float dtype -> the bits of +inf (every larger magnitude is a NaN)
FLOAT_INF_BITS = {"float32": "0x7f800000u", "float64": "0x7ff0000000000000ull", "float16": "0x7c00u",
                  "bfloat16": "0x7f80u"}
SIGNED = ("int64", "int32", "int8")
UNSIGNED = ("uint8", "bool")
NAN_ORDERS = ("comparator", "bits")


def check_dtype(dtype: str) -> None:
    """:class:`UnsupportedCard` unless ``dtype`` is one the kernel contract carries and a key exists for."""
    if dtype.startswith("complex"):
        raise UnsupportedCard(f"eager does not sort {dtype} (complex numbers have no order)")
    if dtype not in ABI_DTYPE_CODES:
        raise UnsupportedCard(f"the kernel contract has no code for {dtype}")
    if dtype not in (*FLOAT_INF_BITS, *SIGNED, *UNSIGNED):
        raise UnsupportedCard(f"a {dtype} sort is not templated")


def bits_type(dtype: str) -> str:
    """The unsigned C type of one element's bits (values are moved as these, unconverted)."""
    return BITS_TYPES[DTYPE_BYTES[dtype]]


def _order_body(dtype: str, *, merge_zeros: bool, nan_largest: bool) -> str:
    """C statements returning ``u``'s bits mapped to an unsigned key in ``dtype``'s value order."""
    width = 8 * DTYPE_BYTES[dtype]
    sign = f"((TB)1 << {width - 1})"
    if dtype in FLOAT_INF_BITS:
        zeros = f"  if ((TB)(u & (TB)~{sign}) == 0) u = 0;\n" if merge_zeros else ""
        nan = f"  if ((TB)(u & (TB)~{sign}) > (TB){FLOAT_INF_BITS[dtype]}) return (TB)~(TB)0;\n" if nan_largest else ""
        return f"{zeros}{nan}  return (u & {sign}) ? (TB)~u : (TB)(u | {sign});\n"
    if dtype in SIGNED:
        return f"  return (TB)(u ^ {sign});\n"
    return "  return u;\n"


def key_function(dtype: str, nan_order: str, descending: bool, qualifier: str) -> str:
    """C definition of ``TB kf_key(TB u)`` for elements of ``dtype`` (``TB`` their bits type)."""
    check_dtype(dtype)
    if nan_order not in NAN_ORDERS:
        raise ValueError(f"unknown NaN order {nan_order}")
    body = _order_body(dtype, merge_zeros=True, nan_largest=nan_order == "comparator")
    key = f"{qualifier} TB kf_order_key(TB u) {{\n{body}}}\n"
    flip = "(TB)~kf_order_key(u)" if descending else "kf_order_key(u)"
    return key + f"{qualifier} TB kf_key(TB u) {{ return {flip}; }}\n"


def radix_select_key_function(dtype: str, descending: bool, qualifier: str) -> str:
    """C definition of ``TB kf_select_key(TB u)``: eager's cuda topk order (-0.0 below 0.0, NaN largest),
    complemented where the largest are selected."""
    check_dtype(dtype)
    body = _order_body(dtype, merge_zeros=False, nan_largest=True)
    flip = "(TB)~kf_select_order(u)" if descending else "kf_select_order(u)"
    return (f"{qualifier} TB kf_select_order(TB u) {{\n{body}}}\n"
            f"{qualifier} TB kf_select_key(TB u) {{ return {flip}; }}\n")

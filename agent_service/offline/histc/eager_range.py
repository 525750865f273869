"""The range eager's histc bins an input by, and the arithmetic it finds an element's bin with.

cpu (``Histogram.cpp``, ``cpu/HistogramKernel.cpp``): floating inputs only; ``min``/``max`` are
taken as doubles, become the first and last of ``linspace(min, max, bins + 1)`` in the input
dtype (a double through float to float16/bfloat16), and an element ``x`` with
``first <= x <= last`` lands in ``(int64)((x - first) * bins / (last - first))`` computed in the
input dtype: float16 and bfloat16 round every step (c10's operators compute in float and round
back, ``bins`` converted first). The per-thread histograms are in the input dtype too, so a
float16 (bfloat16) count past 2048 (256) rounds by how eager's threads split the input: refused.

cuda (``cuda/SummaryOps.cu``): float32, float64 and integers (no float16, bfloat16 or bool);
``min``/``max`` become ``acc_type`` (float, double, int64), then the input dtype (an int64
wraps to int32 or int8) and back; ``(int)((x - min) * bins / (max - min))`` in that type, so
integer inputs divide as integers. Both backends put ``x == max`` (bin ``bins``) in the last bin.

``min == max`` makes eager take the range from the data (its minimum and maximum): refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agent_service.offline.call import UnsupportedCard

CPU_DTYPES = ("float32", "float64", "float16", "bfloat16")
CUDA_DTYPES = ("float32", "float64", "int64", "int32", "int8", "uint8")
#: The largest count each output dtype holds exactly (whatever order eager adds its parts in).
EXACT_COUNTS = {"float16": 2048, "bfloat16": 256, "float32": 1 << 24}
_INT_BITS = {"int64": 64, "int32": 32, "int8": 8, "uint8": 8}


@dataclass(frozen=True)
class EagerRange:
    """The ends eager bins between, as values of the dtype its arithmetic runs in."""

    low: float | int
    high: float | int


def _scalar(value: Any, name: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsupportedCard(f"histc's {name} is {value!r}, not a real number")
    return value


def _to_float(value: int | float, dtype: str) -> float:
    """``value`` converted as c10's ``Scalar::to`` converts it (overflow is an error in eager)."""
    limit = torch.finfo(getattr(torch, dtype)).max
    if abs(value) > limit:
        raise UnsupportedCard(f"histc bound {value} overflows {dtype}: eager raises")
    if dtype == "float64":
        return float(value)
    source = torch.tensor(value, dtype=torch.int64 if isinstance(value, int) else torch.float64)
    return float(source.to(torch.float32).to(getattr(torch, dtype)).item())


def _in_dtype(value: float, dtype: str) -> float:
    return float(torch.tensor(value, dtype=torch.float64).to(getattr(torch, dtype)).item())


def _op(a: float, b: float, dtype: str, op: Any) -> float:
    """``op(a, b)`` in ``dtype``'s arithmetic: float64 in double, the others in float rounded to ``dtype``."""
    wide = torch.float64 if dtype == "float64" else torch.float32
    return _in_dtype(float(op(torch.tensor(a, dtype=wide), torch.tensor(b, dtype=wide))), dtype)


def cpu_range(dtype: str, bins: int, low: Any, high: Any) -> EagerRange:
    """Eager's cpu edges; :class:`UnsupportedCard` where eager raises, bins by the data, or gives no counts."""
    if dtype not in CPU_DTYPES:
        raise UnsupportedCard(f"eager's cpu histc has no {dtype} kernel")
    lo, hi = float(_scalar(low, "min")), float(_scalar(high, "max"))
    if lo == hi:
        raise UnsupportedCard("histc with min == max takes its range from the data's minimum and maximum")
    if not (abs(lo) < float("inf") and abs(hi) < float("inf")) or lo > hi:
        raise UnsupportedCard(f"histc range [{lo}, {hi}] is not finite or not increasing: eager raises")
    first, last = _to_float(lo, dtype), _to_float(hi, dtype)
    # (last - first) * bins in the input dtype, each step rounded as c10 rounds it
    widest = _op(_op(last, first, dtype, torch.sub), _in_dtype(float(bins), dtype), dtype, torch.mul)
    if not first < last or not abs(widest) < float("inf"):
        raise UnsupportedCard(f"histc range [{lo}, {hi}] with {bins} bins does not fit {dtype}'s arithmetic")
    return EagerRange(first, last)


def cuda_range(dtype: str, bins: int, low: Any, high: Any) -> EagerRange:
    """Eager's cuda bounds; :class:`UnsupportedCard` where eager raises, bins by the data, or overflows."""
    if dtype not in CUDA_DTYPES:
        raise UnsupportedCard(f"eager's cuda histc has no {dtype} kernel" if dtype in CPU_DTYPES or dtype == "bool"
                              else f"a {dtype} histc is not templated")
    lo, hi = _scalar(low, "min"), _scalar(high, "max")
    if not (abs(lo) < float("inf") and abs(hi) < float("inf")):
        raise UnsupportedCard(f"histc range [{lo}, {hi}] is not finite: eager raises")
    if dtype in ("float32", "float64"):
        first, last = _to_float(lo, dtype), _to_float(hi, dtype)
        if first == last:
            raise UnsupportedCard("histc with min == max takes its range from the data's minimum and maximum")
        if not first < last:
            raise UnsupportedCard(f"histc range [{lo}, {hi}] is not increasing: eager raises")
        return EagerRange(first, last)
    wide = [int(v) for v in (lo, hi)]  # Scalar::to<int64_t> truncates a float
    if any(not -(1 << 63) <= v < (1 << 63) for v in wide):
        raise UnsupportedCard(f"histc range [{lo}, {hi}] overflows int64: eager raises")
    if wide[0] == wide[1]:
        raise UnsupportedCard("histc with min == max takes its range from the data's minimum and maximum")
    first, last = (_wrap(v, dtype) for v in wide)
    if not first < last:
        raise UnsupportedCard(f"histc range [{lo}, {hi}] is empty or reversed in {dtype}: eager widens it or raises")
    if (last - first) * bins >= 1 << 63:
        raise UnsupportedCard(f"histc range [{lo}, {hi}] times {bins} bins overflows int64")
    return EagerRange(first, last)


def _wrap(value: int, dtype: str) -> int:
    """An int64 converted to ``dtype`` (two's complement: the low bits kept)."""
    bits = _INT_BITS[dtype]
    value &= (1 << bits) - 1
    return value - (1 << bits) if dtype != "uint8" and value >= 1 << (bits - 1) else value

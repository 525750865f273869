"""A Python number handed back to the original kernel promotes, converts and computes as the
wrapped number eager builds from it: each binary op below, with every 0-dim dtype beside numbers
that the dtype cannot hold, returns what its Python spelling returns (dtype and value), or raises
the same exception."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from packager.wrapped_numbers import TensorSlots

aten = torch.ops.aten
#: a binary op's Tensor overload, and the Python spelling that makes eager wrap the number itself;
#: Python sends a number to these overloads' tensor slot (``x + 1e-5``, ``ids // 8``)
OPS: dict[str, tuple[torch._ops.OpOverload, Callable[[torch.Tensor, object], object]]] = {
    "add": (aten.add.Tensor, lambda a, n: a + n), "sub": (aten.sub.Tensor, lambda a, n: a - n),
    "mul": (aten.mul.Tensor, lambda a, n: a * n), "div": (aten.div.Tensor, lambda a, n: a / n),
    "floor_divide": (aten.floor_divide.default, lambda a, n: a // n),
}
#: ops whose Python spelling takes a number to their Scalar overload, which wraps it as the Tensor
#: overload's wrapped number promotes: asked with integer and bool 0-dim tensors, where the number wraps
INTEGER_OPS: dict[str, tuple[torch._ops.OpOverload, Callable[[torch.Tensor, object], object]]] = {
    "remainder": (aten.remainder.Tensor, lambda a, n: a % n), "eq": (aten.eq.Tensor, lambda a, n: a == n),
    "lt": (aten.lt.Tensor, lambda a, n: a < n), "bitwise_and": (aten.bitwise_and.Tensor, lambda a, n: a & n),
}
ZERO_DIM = (torch.int32, torch.int8, torch.uint8, torch.int64, torch.bool, torch.float16, torch.bfloat16, torch.float32)
INTEGER_ZERO_DIM = (torch.int32, torch.int8, torch.uint8, torch.int64, torch.bool)
NUMBERS = (2**40, 2**40 + 7, -3, 300, 255, 0.1, 1e39, 70000.5, True)


def _eager(spelling: Callable[[torch.Tensor, object], object],
           args: tuple[torch.Tensor, object]) -> tuple[str, object]:
    try:
        return "ok", spelling(*args)
    except (RuntimeError, TypeError) as exc:
        return type(exc).__name__, None


def _through_slots(op: torch._ops.OpOverload, args: tuple[object, ...]) -> tuple[str, object]:
    original = torch.library.get_kernel(op, "CPU")
    keyset = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
    try:
        return "ok", TensorSlots(op).call_original(original, keyset, args, {})
    except (RuntimeError, TypeError) as exc:
        return type(exc).__name__, None


def _same(got: torch.Tensor, want: torch.Tensor) -> bool:
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if want.dtype.is_floating_point:
        g, w = got.double().item(), want.double().item()
        return (math.isnan(g) and math.isnan(w)) or g == w
    return bool(torch.equal(got, want))


def _mismatches(name: str, dtypes: tuple[torch.dtype, ...], numbers: tuple[object, ...]) -> list[str]:
    op, spelling = {**OPS, **INTEGER_OPS}[name]
    wrong = []
    for dtype in dtypes:
        for number in numbers:
            for args in ((torch.tensor(5, dtype=dtype), number), (torch.tensor(-7, dtype=dtype), number)):
                want, got = _eager(spelling, args), _through_slots(op, args)
                if want[0] != got[0] or (want[0] == "ok" and not _same(got[1], want[1])):  # type: ignore[arg-type]
                    wrong.append(f"{name}({args[0]!r}, {number!r}): eager {want}, given back {got}")
    return wrong


@pytest.mark.parametrize("name", list(OPS))
def test_a_number_the_zero_dim_dtype_cannot_hold_computes_as_eager(name: str) -> None:
    wrong = _mismatches(name, ZERO_DIM, NUMBERS)
    assert not wrong, "\n".join(wrong[:12])


@pytest.mark.parametrize("name", list(INTEGER_OPS))
def test_an_int_the_zero_dim_integer_dtype_cannot_hold_is_wrapped_as_eager_wraps_it(name: str) -> None:
    wrong = _mismatches(name, INTEGER_ZERO_DIM, tuple(n for n in NUMBERS if isinstance(n, int)))
    assert not wrong, "\n".join(wrong[:12])

"""Python numbers in tensor slots, handed back to the original kernel as the tensors it expects.

``x + 1e-5`` reaches ``aten::add.Tensor`` with a *wrapped number*: a 0-dim CPU tensor flagged
so that type promotion ranks it below every real tensor. A Python kernel (our override) sees it
as the Python float again, and the boxed call of the original kernel refuses a float where its
schema wants a Tensor; Python has no way to build a wrapped number. So a miss rebuilds one from
the promotion rules of ``c10::ResultTypeState`` (dimensioned tensors, then 0-dim tensors, then
wrapped numbers, each tier counting only when its category is higher):

* a dimensioned tensor of the number's category or higher decides the dtype whatever the 0-dim
  tier holds, so the number travels at full precision (float64, int64, bool);
* otherwise the 0-dim tensors decide when their category reaches the number's: above it, the
  number keeps full precision in its own category (a bool stays a bool, which ``sub`` refuses);
  equal to it, the number takes their dtype, and where that would round it (a float in a bf16
  0-dim call) the op runs on float32 and its outputs are cast to the dtypes the original
  returns (found on meta tensors); an int their dtype cannot hold is wrapped around to it where
  the op computes in that integer dtype, as eager converts it (an int32 0-dim tensor floor-divided
  by ``2**40`` divides by zero), and runs on an int64 stand-in where the op computes in float;
* otherwise the number decides: it becomes a 0-dim tensor of the dtype a wrapped number
  promotes to (the default float dtype for a float, int64 for an int).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

import torch

NUMBER_TYPES = (bool, int, float, complex)
Number = bool | int | float | complex
_BOOL, _INT, _FLOAT, _COMPLEX = range(4)
_WIDEST = {_BOOL: torch.bool, _INT: torch.int64, _FLOAT: torch.float64, _COMPLEX: torch.complex128}


def _number_category(value: Number) -> int:
    if isinstance(value, bool):
        return _BOOL
    return _INT if isinstance(value, int) else _FLOAT if isinstance(value, float) else _COMPLEX


def _dtype_category(dtype: torch.dtype) -> int:
    if dtype is torch.bool:
        return _BOOL
    if dtype.is_complex:
        return _COMPLEX
    return _FLOAT if dtype.is_floating_point else _INT


def _is_tensor_type(kind: object) -> bool:
    text = str(kind)
    return text in ("Tensor", "Optional[Tensor]", "Tensor?")


_STATE = threading.local()  # set while a call is replayed on meta tensors (see TensorSlots._expected)
_UNKNOWN = object()  # the op's outputs on meta tensors, before they are asked for


class _Reentered(Exception):
    """A meta replay reached the override again (a call of numbers alone has no tensor to put on meta)."""


class TensorSlots:
    """Where an overload's schema takes single tensors: positions and keyword names."""

    def __init__(self, overload: torch._ops.OpOverload) -> None:
        positions: list[int] = []
        names: list[str] = []
        position = 0
        for argument in overload._schema.arguments:
            if argument.kwarg_only:
                if _is_tensor_type(argument.type):
                    names.append(argument.name)
                continue
            if _is_tensor_type(argument.type):
                positions.append(position)
                names.append(argument.name)
            position += 1
        self.overload = overload
        self.positions = tuple(positions)
        self.names = frozenset(names)

    def holds_number(self, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
        """Whether a Python number sits where the schema wants a tensor."""
        n = len(args)
        for i in self.positions:
            if i < n and type(args[i]) in NUMBER_TYPES:
                return True
        return bool(kwargs) and any(type(v) in NUMBER_TYPES for k, v in kwargs.items() if k in self.names)

    def call_original(self, original: torch._C._SafeKernelFunction, keyset: torch._C.DispatchKeySet,
                      args: Sequence[object], kwargs: Mapping[str, object]) -> object:
        """The original kernel on the call, its numbers made tensors that promote as wrapped numbers do."""
        if getattr(_STATE, "replaying", False):
            raise _Reentered
        args, kwargs = list(args), dict(kwargs)
        slot_values = [args[i] for i in self.positions if i < len(args)]
        slot_values += [v for k, v in kwargs.items() if k in self.names]
        tensors = [v for v in slot_values if isinstance(v, torch.Tensor)]
        given_args, given_kwargs = list(args), dict(kwargs)
        upcast = False
        expected: object = _UNKNOWN
        for where, value in self._numbers(args, kwargs):
            dtype, rounds = _stand_in_dtype(value, tensors)
            if rounds and expected is _UNKNOWN:
                expected = self._expected(given_args, given_kwargs)
            if rounds and _number_category(value) == _INT and not self._computes_in_float(
                    expected, given_args, given_kwargs, dtype):
                # eager converts the int to the integer dtype it computes in as C does, wrapped
                # around: ``int32_tensor // 2**40`` divides by zero, and ``maximum`` compares the
                # wrapped value (computing wider and casting back is right only for sums and products)
                stand_in = torch.tensor(value, dtype=torch.int64).to(dtype)
            else:
                if rounds:  # a float rounded to a half dtype, or an int an op takes to float (true division)
                    dtype, upcast = (torch.int64 if _number_category(value) == _INT else torch.float32), True
                stand_in = torch.tensor(value, dtype=dtype)
            if isinstance(where, int):
                args[where] = stand_in
            else:
                kwargs[where] = stand_in
        result = original.call_boxed(keyset, *args, **kwargs)
        return _cast_like(result, expected) if upcast else result

    def _numbers(self, args: list[object], kwargs: dict[str, object]) -> list[tuple[int | str, Number]]:
        found: list[tuple[int | str, Number]] = []
        for i in self.positions:
            if i < len(args) and type(args[i]) in NUMBER_TYPES:
                found.append((i, args[i]))  # type: ignore[arg-type]
        for name, value in kwargs.items():
            if name in self.names and type(value) in NUMBER_TYPES:
                found.append((name, value))  # type: ignore[arg-type]
        return found

    def _computes_in_float(self, expected: object, args: list[object], kwargs: dict[str, object],
                           dtype: torch.dtype) -> bool:
        """Whether the op's outputs are floating or complex: it took its integer operands to float,
        converting the number from its own value, unwrapped (``int32 / 2**40``). Where the op took
        no number on meta, it is asked with the numbers as 0-dim ``dtype`` tensors instead."""
        if expected is None:
            numbers = {where for where, _ in self._numbers(args, kwargs)}
            stand_in = torch.empty((), dtype=dtype, device="meta")
            expected = self._expected([stand_in if i in numbers else a for i, a in enumerate(args)],
                                      {k: stand_in if k in numbers else v for k, v in kwargs.items()})
        return _floating(expected)

    def _expected(self, args: list[object], kwargs: dict[str, object]) -> object:
        """The op's outputs on meta tensors, numbers as given: their dtypes are what the call must
        return (None where the op has no meta kernel)."""
        def meta(value: object) -> object:
            return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value

        _STATE.replaying = True
        try:
            return self.overload(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        except _Reentered:
            return None
        except (RuntimeError, NotImplementedError, TypeError, ValueError):
            return None
        finally:
            _STATE.replaying = False


def _stand_in_dtype(value: Number, tensors: Sequence[torch.Tensor]) -> tuple[torch.dtype, bool]:
    """The dtype of the 0-dim tensor that promotes as the wrapped ``value`` would, and whether
    that dtype cannot hold the value (then a float runs on a float32 stand-in whose outputs are
    cast to the dtypes the original returns; an int is wrapped around to the dtype, or runs on an
    int64 stand-in where the op computes in float)."""
    category = _number_category(value)
    dims = [t.dtype for t in tensors if t.dim() > 0]
    if dims and max(map(_dtype_category, dims)) >= category:
        return _WIDEST[category], False
    zeros = [t.dtype for t in tensors if t.dim() == 0]
    zero_category = max(map(_dtype_category, zeros), default=-1)
    if zero_category > category:
        if category == _FLOAT and zero_category == _COMPLEX:
            # a float64 would widen complex64 to complex128; the complex tier's real dtype does not
            return max((t for t in zeros if t.is_complex), key=lambda t: t.itemsize).to_real(), False
        return _WIDEST[category], False
    if zero_category == category:
        dtype = zeros[0]
        for other in zeros[1:]:
            dtype = torch.promote_types(dtype, other)
        return dtype, not _holds(dtype, value)
    if category == _FLOAT:
        return torch.get_default_dtype(), False
    if category == _COMPLEX:
        if zero_category == _FLOAT:  # eager makes the 0-dim tier's float dtype complex (float16: complex32)
            real = max((t for t in zeros if t.is_floating_point), key=lambda t: t.itemsize)
            if real is torch.bfloat16:
                raise NotImplementedError("a bfloat16 0-dim tensor with a complex number makes 'BComplex32', "
                                          "which no kernel implements")
            return {torch.float16: torch.complex32, torch.float64: torch.complex128}.get(real, torch.complex64), False
        return torch.complex128 if torch.get_default_dtype() is torch.float64 else torch.complex64, False
    return _WIDEST[category], False


def _holds(dtype: torch.dtype, value: Number) -> bool:
    """Whether a 0-dim ``dtype`` tensor holds ``value`` exactly (no rounding, no overflow)."""
    if dtype in (torch.float16, torch.bfloat16):
        return float(torch.tensor(value, dtype=dtype)) == value
    if isinstance(value, int) and not dtype.is_floating_point and not dtype.is_complex and dtype is not torch.bool:
        info = torch.iinfo(dtype)
        return info.min <= value <= info.max
    return True


def _floating(outputs: object) -> bool:
    if isinstance(outputs, torch.Tensor):
        return outputs.dtype.is_floating_point or outputs.dtype.is_complex
    if isinstance(outputs, (list, tuple)):
        return any(_floating(o) for o in outputs)
    return False


def _cast_like(result: object, expected: object) -> object:
    if isinstance(result, torch.Tensor) and isinstance(expected, torch.Tensor):
        return result if result.dtype is expected.dtype else result.to(expected.dtype)
    if isinstance(result, (list, tuple)) and isinstance(expected, (list, tuple)):
        return type(result)(_cast_like(r, e) for r, e in zip(result, expected, strict=True))
    return result

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
  returns (found on meta tensors);
* otherwise the number decides: it becomes a 0-dim tensor of the dtype a wrapped number
  promotes to (the default float dtype for a float, int64 for an int).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

NUMBER_TYPES = (bool, int, float)
_BOOL, _INT, _FLOAT, _COMPLEX = range(4)
_WIDEST = {_BOOL: torch.bool, _INT: torch.int64, _FLOAT: torch.float64}


def _number_category(value: bool | int | float) -> int:
    return _BOOL if isinstance(value, bool) else _INT if isinstance(value, int) else _FLOAT


def _dtype_category(dtype: torch.dtype) -> int:
    if dtype is torch.bool:
        return _BOOL
    if dtype.is_complex:
        return _COMPLEX
    return _FLOAT if dtype.is_floating_point else _INT


def _is_tensor_type(kind: object) -> bool:
    text = str(kind)
    return text in ("Tensor", "Optional[Tensor]", "Tensor?")


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
        args, kwargs = list(args), dict(kwargs)
        slot_values = [args[i] for i in self.positions if i < len(args)]
        slot_values += [v for k, v in kwargs.items() if k in self.names]
        tensors = [v for v in slot_values if isinstance(v, torch.Tensor)]
        upcast = False
        expected: object = None
        for where, value in self._numbers(args, kwargs):
            dtype, rounds = _stand_in_dtype(value, tensors)
            if rounds:
                if not upcast:
                    expected = self._expected(args, kwargs)
                dtype, upcast = torch.float32, True
            stand_in = torch.tensor(value, dtype=dtype)
            if isinstance(where, int):
                args[where] = stand_in
            else:
                kwargs[where] = stand_in
        result = original.call_boxed(keyset, *args, **kwargs)
        return _cast_like(result, expected) if upcast else result

    def _numbers(self, args: list[object], kwargs: dict[str, object]) -> list[tuple[int | str, bool | int | float]]:
        found: list[tuple[int | str, bool | int | float]] = []
        for i in self.positions:
            if i < len(args) and type(args[i]) in NUMBER_TYPES:
                found.append((i, args[i]))  # type: ignore[arg-type]
        for name, value in kwargs.items():
            if name in self.names and type(value) in NUMBER_TYPES:
                found.append((name, value))  # type: ignore[arg-type]
        return found

    def _expected(self, args: list[object], kwargs: dict[str, object]) -> object:
        """The op's outputs on meta tensors, numbers as given: their dtypes are what the call must return."""
        def meta(value: object) -> object:
            return torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value

        try:
            return self.overload(*[meta(a) for a in args], **{k: meta(v) for k, v in kwargs.items()})
        except (RuntimeError, NotImplementedError, TypeError):
            return None  # no meta kernel: the outputs keep the dtype they were computed in


def _stand_in_dtype(value: bool | int | float, tensors: Sequence[torch.Tensor]) -> tuple[torch.dtype, bool]:
    """The dtype of the 0-dim tensor that promotes as the wrapped ``value`` would, and whether
    that dtype rounds the value (then the op must run on float32 and its outputs be cast back)."""
    category = _number_category(value)
    dims = [t.dtype for t in tensors if t.dim() > 0]
    if dims and max(map(_dtype_category, dims)) >= category:
        return _WIDEST[category], False
    zeros = [t.dtype for t in tensors if t.dim() == 0]
    zero_category = max(map(_dtype_category, zeros), default=-1)
    if zero_category > category:
        return _WIDEST[category], False
    if zero_category == category:
        dtype = zeros[0]
        for other in zeros[1:]:
            dtype = torch.promote_types(dtype, other)
        rounds = dtype in (torch.float16, torch.bfloat16) and float(torch.tensor(value, dtype=dtype)) != value
        return dtype, rounds
    if category == _FLOAT:
        return torch.get_default_dtype(), False
    return _WIDEST[category], False


def _cast_like(result: object, expected: object) -> object:
    if isinstance(result, torch.Tensor) and isinstance(expected, torch.Tensor):
        return result if result.dtype is expected.dtype else result.to(expected.dtype)
    if isinstance(result, (list, tuple)) and isinstance(expected, (list, tuple)):
        return type(result)(_cast_like(r, e) for r, e in zip(result, expected, strict=True))
    return result

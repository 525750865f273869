"""The guard: does a live call match a card's variant key exactly?

A card's key (:class:`packager.variant.VariantKey`) is compiled once into a tree of small
checks, so a live call is matched without building its key: no JSON, no hashing. The matcher
accepts exactly the calls whose ``variant_key`` equals the card's key (tests hold it to that),
and on a miss names the first field that differs, cheapest checks first.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, cast

import torch

from packager.traced_call import TracedTensor, is_static
from packager.variant import _ENUMS, TensorSignature, VariantKey, dtype_from_name, line_offset

# Miss reasons, as counted in Cast.stats().
SHAPE = "shape"
STRIDE = "stride"
DTYPE = "dtype"
STORAGE_OFFSET = "storage_offset"
ALIGNMENT = "alignment"
DEVICE = "device"
ARGS = "args"
MISS_REASONS = (SHAPE, STRIDE, DTYPE, STORAGE_OFFSET, ALIGNMENT, DEVICE, ARGS)

# Verdicts a matcher remembers at most (one per module instance and reading; see CallMatcher).
_MAX_REMEMBERED = 4096

# A check takes the live value and the list collecting the call's tensors; it returns a miss
# reason, or None when the value matches.
Check = Callable[[object, list[torch.Tensor]], "str | None"]


class CallMatcher:
    """Matches live ``(args, kwargs)`` against one variant key."""

    def __init__(self, key: VariantKey, *, traced: bool = False, remembered: Collection[str] = ()) -> None:
        """``traced=True`` leaves out storage offset and alignment, which torch.compile cannot trace;
        whoever runs the kernel must then check both on the real tensors (see :func:`address_miss`).
        A traced matcher also takes a :class:`~packager.traced_call.TracedTensor` for a tensor.

        For the keywords named in ``remembered`` (which must hold no tensors) the verdict on a
        value object is reused when the caller passes that very object again; only callers that
        never change such a value in place may name one.
        """
        self.key = key
        template = json.loads(key.template)
        self._signatures = key.tensors
        self._traced = traced
        self._args = [self._compile(a) for a in template["args"]]
        first = template["args"][0] if template["args"] else None
        self.first_shape: torch.Size | None = (
            torch.Size(key.tensors[first["tensor"]].shape) if isinstance(first, dict) and "tensor" in first else None
        )  # the first argument's shape when it is a tensor: lets a dispatcher skip whole matchers
        self._kwargs = {name: self._compile(v) for name, v in template["kwargs"].items()}
        self._n_args = len(self._args)
        for name in remembered:
            if _holds_tensor(template["kwargs"].get(name)):
                raise ValueError(f"keyword {name!r} holds tensors: its verdict cannot be remembered")
        self._remembered = frozenset(remembered)
        # id(value) -> (value, verdict); holding the value keeps its id from being reused.
        self._verdicts: dict[int, tuple[object, str | None]] = {}

    def miss_reason(
        self, args: Sequence[object], kwargs: Mapping[str, object], tensors: list[torch.Tensor]
    ) -> str | None:
        """None on an exact match (``tensors`` then holds the call's tensors in key order), else why not."""
        if len(args) != self._n_args or len(kwargs) != len(self._kwargs):
            return ARGS
        for check, value in zip(self._args, args, strict=True):
            reason = check(value, tensors)
            if reason is not None:
                return reason
        for name in sorted(kwargs):
            kwarg_check = self._kwargs.get(name)
            if kwarg_check is None:
                return ARGS
            value = kwargs[name]
            if name in self._remembered:
                reason = self._remembered_verdict(kwarg_check, value, tensors)
            else:
                reason = kwarg_check(value, tensors)
            if reason is not None:
                return reason
        return None

    def _remembered_verdict(self, check: Check, value: object, tensors: list[torch.Tensor]) -> str | None:
        known = self._verdicts.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        reason = check(value, tensors)
        if len(self._verdicts) >= _MAX_REMEMBERED:
            self._verdicts = {}
        self._verdicts[id(value)] = (value, reason)
        return reason

    def _compile(self, encoded: Any) -> Check:
        if isinstance(encoded, dict):
            (tag, payload), = encoded.items()
            if tag == "tensor":
                return _tensor_check(self._signatures[payload], self._traced)
            if tag == "list":
                if payload and all(_is_named_tensor(item) for item in payload):
                    names = [item["list"][0] for item in payload]
                    return _named_tensors_check(names, [self._compile(item["list"][1]) for item in payload])
                return _list_check([self._compile(v) for v in payload])
            return _tagged_check(tag, payload)
        return _plain_check(encoded)


def address_miss(tensors: Sequence[torch.Tensor], signatures: Sequence[TensorSignature]) -> str | None:
    """The checks a traced matcher leaves out: line offset and 16-byte alignment."""
    for tensor, expected in zip(tensors, signatures, strict=True):
        if (tensor.data_ptr() % 16 == 0) != expected.aligned16:
            return ALIGNMENT
        if line_offset(tensor) != expected.storage_offset:
            return STORAGE_OFFSET
    return None


def layout_miss(tensors: Sequence[torch.Tensor], signatures: Sequence[TensorSignature]) -> str | None:
    """What a compiled graph's tensors may still differ in after a traced match: the strides
    inductor chose for them, then :func:`address_miss`."""
    if any(tensor.stride() != expected.stride for tensor, expected in zip(tensors, signatures, strict=True)):
        return STRIDE
    return address_miss(tensors, signatures)


REAL_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)


def _tensor_check(expected: TensorSignature, traced: bool) -> Check:
    shape = torch.Size(expected.shape)
    stride = tuple(expected.stride)
    dtype = dtype_from_name(expected.dtype)
    offset = expected.storage_offset
    aligned = expected.aligned16
    device = expected.device
    # Tensor.is_cpu / is_cuda cost a fraction of Tensor.device.type.
    device_attr = {"cpu": "is_cpu", "cuda": "is_cuda"}.get(device)

    def check(value: object, tensors: list[Any]) -> str | None:
        if not isinstance(value, torch.Tensor) and not (traced and isinstance(value, TracedTensor)):
            return ARGS
        if not traced and type(value) not in REAL_TENSOR_TYPES:
            return ARGS  # a fake or functional tensor of a trace, or a user subclass: never a kernel's
        if traced and not is_static(value):
            return SHAPE  # comparing a symbolic size would add a guard, and a recompile
        try:
            if value.shape != shape:
                return SHAPE
            if value.dtype is not dtype:
                return DTYPE
            if value.stride() != stride:
                return STRIDE
        except RuntimeError:  # a nested tensor has no sizes, a sparse one no strides: never a card's
            return ARGS
        if not (getattr(value, device_attr) if device_attr else value.device.type == device):
            return DEVICE
        if traced:
            tensors.append(value)
            return None
        real = cast(torch.Tensor, value)  # checked above: an untraced matcher takes real tensors only
        if (real.data_ptr() % 16 == 0) != aligned:
            return ALIGNMENT
        if not aligned and line_offset(real) != offset:  # an aligned address is at line offset 0
            return STORAGE_OFFSET
        tensors.append(real)
        return None

    return check


def _list_check(items: list[Check]) -> Check:
    n = len(items)

    def check(value: object, tensors: list[torch.Tensor]) -> str | None:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            return ARGS
        for item_check, item in zip(items, value, strict=True):
            reason = item_check(item, tensors)
            if reason is not None:
                return reason
        return None

    return check


def _holds_tensor(encoded: Any) -> bool:
    """Whether an encoded template value contains a tensor anywhere."""
    if isinstance(encoded, dict):
        return "tensor" in encoded or any(_holds_tensor(v) for v in encoded.values())
    return isinstance(encoded, list) and any(_holds_tensor(v) for v in encoded)


def _is_named_tensor(encoded: Any) -> bool:
    """``[name, tensor]``: how a module's parameters and buffers appear in its key."""
    if not (isinstance(encoded, dict) and isinstance(encoded.get("list"), list) and len(encoded["list"]) == 2):
        return False
    name, tensor = encoded["list"]
    return isinstance(name, str) and isinstance(tensor, dict) and "tensor" in tensor


def _named_tensors_check(names: list[str], tensor_checks: list[Check]) -> Check:
    """A list of ``[name, tensor]`` pairs, checked in one loop (a module's state, on every call)."""
    n = len(names)

    def check(value: object, tensors: list[torch.Tensor]) -> str | None:
        if not isinstance(value, (list, tuple)) or len(value) != n:
            return ARGS
        for pair, name, tensor_check in zip(value, names, tensor_checks, strict=True):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not isinstance(pair[0], str) or pair[0] != name:
                return ARGS
            reason = tensor_check(pair[1], tensors)
            if reason is not None:
                return reason
        return None

    return check


def _plain_check(expected: object) -> Check:
    """JSON scalars: equal value *and* equal JSON text (``True`` is not ``1``, ``-0.0`` is not ``0.0``)."""
    if expected is None:
        return lambda value, _: None if value is None else ARGS
    if isinstance(expected, bool):
        return lambda value, _: None if value is expected else ARGS
    if isinstance(expected, int):
        def check_int(value: object, _: list[torch.Tensor]) -> str | None:
            ok = isinstance(value, int) and not isinstance(value, bool) and value == expected
            return None if ok else ARGS
        return check_int
    if isinstance(expected, float):
        sign = math.copysign(1.0, expected)

        def check_float(value: object, _: list[torch.Tensor]) -> str | None:
            ok = isinstance(value, float) and value == expected and math.copysign(1.0, value) == sign
            return None if ok else ARGS
        return check_float
    if isinstance(expected, str):
        return lambda value, _: None if isinstance(value, str) and value == expected else ARGS
    raise ValueError(f"template value {expected!r} is not a JSON scalar")


def _tagged_check(tag: str, payload: Any) -> Check:
    if tag == "float":
        text = str(payload)
        return lambda value, _: None if isinstance(value, float) and repr(value) == text else ARGS
    if tag == "dtype":
        dtype = dtype_from_name(payload)
        return lambda value, _: None if value is dtype else ARGS
    if tag == "device":
        return lambda value, _: None if isinstance(value, torch.device) and value.type == payload else ARGS
    if tag == "enum":
        known = _ENUMS.get(payload)
        if known is not None:
            return lambda value, _: None if value is known else ARGS

        def check_enum(value: object, _: list[torch.Tensor]) -> str | None:
            ok = isinstance(value, enum.Enum) and f"{type(value).__name__}.{value.name}" == payload
            return None if ok else ARGS
        return check_enum
    raise ValueError(f"unknown template tag {tag!r}")

"""A module call as dynamo may show it to code it does not trace: Python constants only.

Dynamo guards on every object the code it traces reads, so matching a call against a card's key
inside the trace would guard on the matcher's whole state (a hundred guards per kernel, checked
on every call of the compiled model). Instead the traced code only *describes* the call, and
hands the description to a function dynamo runs as a constant
(``torch.compiler.assume_constant_result``), which matches it outside the trace and adds no guard.

A description holds constants only, and a traced size or number may be symbolic (a dynamic-shape
trace). So each size tuple and number is described by the equal one among those the kernels'
keys hold (:class:`KnownValues`, itself a constant): comparing a symbolic size with a constant
adds the same guard that matching it would, and a value no key holds is :data:`UNTRACEABLE`.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch

from packager.variant import VariantKey

_TENSOR = "kforge:tensor"
# A value the description cannot hold as a constant (an object, or a size or number no key holds):
# no key matches it.
UNTRACEABLE = ("kforge:untraceable",)


class KnownValues(NamedTuple):
    """Every shape, stride tuple and number some key holds: what a traced call is described by."""

    shapes: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...]
    ints: tuple[int, ...]
    floats: tuple[float, ...]

    @classmethod
    def of(cls, keys: Iterable[VariantKey]) -> KnownValues:
        shapes: dict[tuple[int, ...], None] = {}
        strides: dict[tuple[int, ...], None] = {}
        ints: dict[int, None] = {}
        floats: dict[tuple[float, float], float] = {}  # by value and sign: -0.0 is not 0.0
        for key in keys:
            for signature in key.tensors:
                shapes[tuple(signature.shape)] = None
                strides[tuple(signature.stride)] = None
            template = json.loads(key.template)
            for number in _numbers([template["args"], list(template["kwargs"].values())]):
                if isinstance(number, int):
                    ints[number] = None
                else:
                    floats[(number, math.copysign(1.0, number))] = number
        return cls(tuple(shapes), tuple(strides), tuple(ints), tuple(floats.values()))


def _numbers(encoded: Any) -> Iterable[int | float]:
    """The ints and floats of encoded template values (not bools, not tensor placeholders)."""
    if isinstance(encoded, dict):  # a tagged value
        (tag, payload), = encoded.items()
        if tag == "float":
            yield float(payload)
        elif tag == "list":
            for item in payload:
                yield from _numbers(item)
    elif isinstance(encoded, list):
        for item in encoded:
            yield from _numbers(item)
    elif isinstance(encoded, (int, float)) and not isinstance(encoded, bool):
        yield encoded


class TracedTensor(NamedTuple):
    """What tracing knows of a tensor, with the tensor attributes a traced matcher reads."""

    shape: torch.Size
    strides: tuple[int, ...]
    dtype: torch.dtype
    device_type: str
    requires_grad: bool
    position: int  # in the call's tensors, in the order :func:`describe` met them

    def stride(self) -> tuple[int, ...]:
        return self.strides

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    @property
    def is_cuda(self) -> bool:
        return self.device_type == "cuda"

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_type)


def is_static(tensor: torch.Tensor | TracedTensor) -> bool:
    """Whether every size and stride is a plain int (not a symbol of a dynamic-shape trace)."""
    return all(type(s) is int for s in tensor.shape) and all(type(s) is int for s in tensor.stride())


def _known_sizes(sizes: tuple[Any, ...], known: tuple[tuple[int, ...], ...]) -> tuple[int, ...] | None:
    for candidate in known:
        if len(candidate) == len(sizes) and all(a == b for a, b in zip(candidate, sizes, strict=True)):
            return candidate
    return None


def _known_int(value: Any, known: tuple[int, ...]) -> Any:
    for candidate in known:
        if candidate == value:
            return candidate
    return UNTRACEABLE


def _known_float(value: Any, known: tuple[float, ...]) -> Any:
    for candidate in known:
        if candidate != candidate and value != value:  # NaN, as a key holds it
            return candidate
        if candidate == value and (candidate != 0 or math.copysign(1.0, candidate) == math.copysign(1.0, value)):
            return candidate  # -0.0 is not 0.0
    return UNTRACEABLE


def describe(value: Any, tensors: list[torch.Tensor], known: KnownValues) -> Any:
    """``value`` as constants, its tensors appended to ``tensors``. Runs under dynamo: it reads
    nothing but the value itself and ``known``."""
    if isinstance(value, torch.Tensor):
        if not torch.compiler.is_dynamo_compiling() and not is_static(value):
            return UNTRACEABLE  # traced without dynamo (export): comparing a symbol would specialise it
        shape = _known_sizes(tuple(value.shape), known.shapes)
        strides = _known_sizes(tuple(value.stride()), known.strides)
        if shape is None or strides is None:
            return UNTRACEABLE
        tensors.append(value)
        return (_TENSOR, shape, strides, value.dtype, value.device.type, value.requires_grad, len(tensors) - 1)
    if isinstance(value, (list, tuple)):
        return [describe(item, tensors, known) for item in value]
    # isinstance, not type(): dynamo guards on the type a traced type() call reads
    if value is None or isinstance(value, (bool, str, torch.dtype, torch.device, enum.Enum)):
        return value
    if isinstance(value, int):  # also a symbolic int: described by the equal known one
        return _known_int(value, known.ints)
    if isinstance(value, float):
        return _known_float(value, known.floats)
    return UNTRACEABLE


class _Untraceable:
    """Stands for a value no description held; equal to nothing a key holds."""


def rebuild(described: Any) -> Any:
    """The call :func:`describe` described, with :class:`TracedTensor` for each tensor."""
    if isinstance(described, tuple):
        if described and described[0] == _TENSOR:
            _, shape, strides, dtype, device_type, requires_grad, position = described
            return TracedTensor(torch.Size(shape), tuple(strides), dtype, device_type, requires_grad, position)
        return _Untraceable()
    if isinstance(described, list):
        return [rebuild(item) for item in described]
    return described

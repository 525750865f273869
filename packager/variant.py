"""The variant key: the one definition of "the same call pattern".

Capture groups calls by it and the runtime guard matches live calls by it, so a card and its
guard can never disagree. It lives here, in the dependency-light runtime (torch and the standard
library only), and capture imports it.

A call is split into a JSON-able *template* (every non-tensor argument, with tensors replaced by
``{"tensor": i}`` placeholders) and the list of its tensors in argument order. The key is the op
name, the template and, per tensor, shape, stride, dtype, line offset (:func:`line_offset`),
16-byte alignment and device type.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

JSONValue = Any


class TensorSignature(NamedTuple):
    """The exact layout of one tensor argument."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str
    storage_offset: int
    aligned16: bool
    device: str

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "shape": list(self.shape),
            "stride": list(self.stride),
            "dtype": self.dtype,
            "storage_offset": self.storage_offset,
            "aligned16": self.aligned16,
            "device": self.device,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSONValue]) -> TensorSignature:
        return cls(
            tuple(int(s) for s in data["shape"]),
            tuple(int(s) for s in data["stride"]),
            str(data["dtype"]),
            int(data["storage_offset"]),
            bool(data["aligned16"]),
            str(data["device"]),
        )


class VariantKey(NamedTuple):
    """Hashable key of one runtime variant; cheap enough to build on every guarded call."""

    op: str
    template: str  # canonical JSON of the call template
    tensors: tuple[TensorSignature, ...]

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "op": self.op,
            "template": json.loads(self.template),
            "tensors": [t.to_json() for t in self.tensors],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, JSONValue]) -> VariantKey:
        return cls(
            str(data["op"]),
            canonical_json(data["template"]),
            tuple(TensorSignature.from_json(t) for t in data["tensors"]),
        )

    @property
    def id(self) -> str:
        """Stable 16-hex-digit identifier of the variant."""
        return hashlib.sha256(canonical_json(self.to_json()).encode()).hexdigest()[:16]


class UnsupportedArgument(TypeError):
    """An argument that has no stable encoding (it makes the call not optimisable)."""


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """Inverse of :func:`dtype_name`."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def line_offset(tensor: torch.Tensor) -> int:
    """The part of a tensor's storage offset a kernel can tell apart: where its first element lies
    in its 16-byte line, in elements (kernels read from the data pointer). Views of one buffer at
    different offsets (a loop slicing a time step, a window, a cache position) are then one variant
    wherever their addresses agree modulo 16. An address that is not a whole number of elements
    into its line keeps the storage offset itself."""
    return _line_offset(tensor.data_ptr() % 16, tensor.element_size(), int(tensor.storage_offset()))


def aligned_line_offset(storage_offset: int, element_size: int) -> int:
    """:func:`line_offset` of a view ``storage_offset`` elements into a 16-byte aligned storage."""
    return _line_offset(storage_offset * element_size % 16, element_size, storage_offset)


def _line_offset(remainder: int, element_size: int, storage_offset: int) -> int:
    """Elements into its 16-byte line of a first element ``remainder`` bytes into it; the storage offset
    where that is not a whole number of elements."""
    return remainder // element_size if remainder % element_size == 0 else storage_offset


def tensor_signature(tensor: torch.Tensor) -> TensorSignature:
    """The layout facts of a tensor that a specialised kernel may depend on."""
    return TensorSignature(
        tuple(tensor.shape),
        tuple(tensor.stride()),
        dtype_name(tensor.dtype),
        line_offset(tensor),
        tensor.data_ptr() % 16 == 0,
        tensor.device.type,
    )


def canonical_json(value: JSONValue) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def encode_value(value: object, tensors: list[torch.Tensor]) -> JSONValue:
    """Encode one argument into the template, appending any tensors it holds to ``tensors``."""
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return {"tensor": len(tensors) - 1}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, (list, tuple)):
        return {"list": [encode_value(v, tensors) for v in value]}
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"device": value.type}
    if isinstance(value, (torch.layout, torch.memory_format)):
        return {"enum": str(value)}
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__name__}.{value.name}"}
    raise UnsupportedArgument(f"argument of type {type(value).__name__} has no stable encoding")


def decode_value(encoded: JSONValue, tensors: Sequence[torch.Tensor]) -> object:
    """Inverse of :func:`encode_value`, taking tensors by placeholder index."""
    if isinstance(encoded, dict):
        (tag, payload), = encoded.items()
        if tag == "tensor":
            return tensors[payload]
        if tag == "list":
            return [decode_value(v, tensors) for v in payload]
        if tag == "float":
            return float(payload)
        if tag == "dtype":
            return dtype_from_name(payload)
        if tag == "device":
            return torch.device(payload)
        if tag == "enum":
            return _ENUMS[payload]
        raise ValueError(f"unknown template tag {tag!r}")
    return encoded


_ENUMS: dict[str, object] = {
    str(v): v
    for v in (
        torch.strided, torch.sparse_coo, torch.contiguous_format, torch.channels_last,
        torch.preserve_format, torch.channels_last_3d,
    )
}


def encode_call(args: Sequence[object], kwargs: Mapping[str, object]) -> tuple[JSONValue, list[torch.Tensor]]:
    """Split a call into its template and its tensors (in argument order)."""
    tensors: list[torch.Tensor] = []
    template = {
        "args": [encode_value(a, tensors) for a in args],
        "kwargs": {k: encode_value(v, tensors) for k, v in sorted(kwargs.items())},
    }
    return template, tensors


def decode_call(
    template: Mapping[str, JSONValue], tensors: Sequence[torch.Tensor]
) -> tuple[list[object], dict[str, object]]:
    """Rebuild ``(args, kwargs)`` of a call from its template and fresh tensors."""
    args = [decode_value(a, tensors) for a in template["args"]]
    kwargs = {k: decode_value(v, tensors) for k, v in template["kwargs"].items()}
    return args, kwargs


def variant_key(op: str, args: Sequence[object], kwargs: Mapping[str, object]) -> VariantKey:
    """The variant key of a call of ``op`` (an aten overload name or a module's class name)."""
    template, tensors = encode_call(args, kwargs)
    return VariantKey(op, canonical_json(template), tuple(tensor_signature(t) for t in tensors))


STATE_KWARG = "__state__"
ATTRIBUTES_KWARG = "__attributes__"
_PLAIN = (bool, int, float, str, type(None), torch.dtype)


def qualified_class_name(module: torch.nn.Module) -> str:
    """``transformers.models.llama.modeling_llama.LlamaRMSNorm`` for a module instance."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def module_state(module: torch.nn.Module) -> list[list[object]]:
    """The module's parameters and buffers as ``[name, tensor]`` pairs, in registration order."""
    state: list[list[object]] = [[n, p] for n, p in module.named_parameters()]
    state += [[n, b] for n, b in module.named_buffers()]
    return state


def module_attributes(module: torch.nn.Module) -> dict[str, object]:
    """The public plain attributes (``eps``, ``num_groups``, ``training``, ...) of the module tree.

    They change what its forward computes, so they are part of its variant and a kernel bakes
    them in. A submodule's are named by its path (``norm.eps``): a norm + activation block with
    another ``num_groups`` in its norm is another variant.
    """
    attributes: dict[str, object] = {}
    for path, submodule in module.named_modules():
        for name, value in vars(submodule).items():
            if name.startswith("_") or not is_plain_attribute(value):
                continue
            qualified = f"{path}.{name}" if path else name
            attributes[qualified] = list(value) if isinstance(value, (list, tuple)) else value
    return attributes


def is_plain_attribute(value: object) -> bool:
    """A scalar, string, dtype or None, or a list or tuple of them: what a module's key records."""
    if isinstance(value, (list, tuple)):
        return all(isinstance(v, _PLAIN) for v in value)
    return isinstance(value, _PLAIN)


def module_variant_key(module: torch.nn.Module, args: Sequence[object], kwargs: Mapping[str, object]) -> VariantKey:
    """The variant key of a module call: class, attributes, forward arguments, parameter/buffer layouts.

    The module's state travels as the ``__state__`` keyword and its attributes as
    ``__attributes__``, so its tensors follow the forward's tensors in the kernel's input order
    and two instances that differ only in ``eps`` are different variants.
    """
    return variant_key(qualified_class_name(module), args, module_call_kwargs(module, kwargs))


def module_call_kwargs(module: torch.nn.Module, kwargs: Mapping[str, object]) -> dict[str, object]:
    """A module call's keywords plus its attributes and state, as its variant key sees them."""
    return {
        **kwargs,
        ATTRIBUTES_KWARG: [[name, value] for name, value in sorted(module_attributes(module).items())],
        STATE_KWARG: module_state(module),
    }

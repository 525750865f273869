"""A card's call, bound to argument names: what a template generator reads its constants from.

Aten cards are bound through the op's schema (defaults filled in), so a generator reads
``call["dim"]`` whether the model passed it by position, by keyword or not at all. Tensors
become :class:`TensorArg` (their index in the kernel's inputs and their exact layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kforge_domain.card import OperatorCard, TensorSpec
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG


class UnsupportedCard(Exception):
    """The offline proposer has no template for this card; the message says why."""


@dataclass(frozen=True)
class TensorArg:
    """A tensor argument of the call: its position among the kernel's inputs and its layout."""

    index: int
    spec: TensorSpec
    device: str


def decode_argument(value: Any, card: OperatorCard) -> Any:
    """A template-encoded argument: tensors as :class:`TensorArg`, dtypes and enums as tagged strings."""
    if isinstance(value, dict) and len(value) == 1:
        ((tag, payload),) = value.items()
        if tag == "tensor":
            device = card.key.get("tensors", [{}] * (payload + 1))[payload].get("device", card.device)
            return TensorArg(int(payload), card.inputs[payload], str(device))
        if tag == "list":
            return [decode_argument(v, card) for v in payload]
        if tag == "float":
            return float(payload)
        if tag in ("dtype", "device", "enum"):
            return f"{tag}:{payload}"
        raise UnsupportedCard(f"unknown template tag {tag!r}")
    return value


def tensor_argument(call: dict[str, Any], name: str = "self") -> TensorArg:
    """Bound argument ``name`` of ``call``; :class:`UnsupportedCard` where it is not a tensor."""
    value = call.get(name)
    if not isinstance(value, TensorArg):
        raise UnsupportedCard(f"argument {name!r} is not a tensor")
    return value


def split_op_name(op: str) -> tuple[str, str]:
    """``"aten::_softmax.default"`` -> ``("_softmax", "default")``; the overload defaults to ``default``."""
    name = op.removeprefix("aten::").removeprefix("aten.")
    base, _, overload = name.partition(".")
    return base, overload or "default"


def bind_aten_call(card: OperatorCard) -> dict[str, Any]:
    """Arguments of an aten card by schema name, defaults included."""
    args = [decode_argument(a, card) for a in card.template.get("args", [])]
    kwargs = {k: decode_argument(v, card) for k, v in card.template.get("kwargs", {}).items()}
    return bind_schema(card.op, args, kwargs)


def bind_schema(op: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Decoded arguments of a call to the aten overload ``op`` by schema name, defaults included."""
    import torch

    base, overload = split_op_name(op)
    try:
        schema = getattr(getattr(torch.ops.aten, base), overload)._schema
    except (AttributeError, RuntimeError) as exc:
        raise UnsupportedCard(f"{op}: not an aten overload this torch knows") from exc
    kwargs = dict(kwargs)
    bound: dict[str, Any] = {}
    for i, argument in enumerate(schema.arguments):
        if i < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[i]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs.pop(argument.name)
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
        else:
            raise UnsupportedCard(f"{op}: argument {argument.name!r} missing from the call")
    if len(args) > len(schema.arguments):
        raise UnsupportedCard(f"{op}: {len(args)} positional arguments, schema takes {len(schema.arguments)}")
    if kwargs:
        raise UnsupportedCard(f"{op}: unexpected keyword arguments {sorted(kwargs)}")
    return bound


def module_tensors(card: OperatorCard) -> tuple[list[TensorArg], dict[str, TensorArg]]:
    """A module card's forward tensors (in order) and its state tensors by name."""
    args = [decode_argument(a, card) for a in card.template.get("args", [])]
    kwargs = {k: decode_argument(v, card) for k, v in card.template.get("kwargs", {}).items()}
    state_pairs = kwargs.pop(STATE_KWARG, [])
    kwargs.pop(ATTRIBUTES_KWARG, None)  # the same values as card.module_attributes
    if any(not isinstance(a, TensorArg) for a in args) or kwargs:
        raise UnsupportedCard(f"{card.op}: forward takes non-tensor or keyword arguments")
    state = {str(name): t for name, t in state_pairs if isinstance(t, TensorArg)}
    return args, state

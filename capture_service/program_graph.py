"""A module card's exported program as plain JSON: the aten calls its forward makes, in order.

A proposer that sees the card but not the model (the agent may run on another host) reads what
the forward computes from here: each node names its aten overload, its arguments (the card's
inputs as ``{"tensor": i}`` in the call template's encoding, earlier nodes as ``{"node": name}``,
constants as the template encodes them) and the dtype and shape of its result. A program that
cannot be described this way (a lifted constant tensor, a call that writes its arguments, a call that is not
an aten overload, more than :data:`MAX_NODES` calls) has no graph, and the card says nothing
more than before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from packager.variant import STATE_KWARG, UnsupportedArgument, dtype_name, encode_value

MAX_NODES = 64


class NotDescribable(Exception):
    """The program holds something the JSON graph does not describe."""


def program_graph(program: torch.export.ExportedProgram, template: Mapping[str, Any]) -> dict[str, Any] | None:
    """The program's calls as JSON (see the module docstring), or None where it cannot be described."""
    try:
        return _describe(program, _input_indices(program, template))
    except NotDescribable:
        return None


def _input_indices(program: torch.export.ExportedProgram, template: Mapping[str, Any]) -> dict[str, int]:
    """Placeholder name -> the card input it receives: user inputs are the forward's positional
    tensors in order, parameters and buffers the state tensors of the same name."""
    forward = [_tensor_index(a) for a in template.get("args", [])]
    state = {str(name): _tensor_index(value) for name, value in _pairs(template.get("kwargs", {}).get(STATE_KWARG))}
    kinds = torch.export.graph_signature.InputKind
    indices: dict[str, int] = {}
    user = 0
    for spec in program.graph_signature.input_specs:
        name = getattr(spec.arg, "name", None)
        if name is None:
            raise NotDescribable("an input that is not a tensor")
        if spec.kind == kinds.USER_INPUT:
            if user >= len(forward):
                raise NotDescribable("more user inputs than forward tensors")
            indices[name] = forward[user]
            user += 1
        elif spec.kind in (kinds.PARAMETER, kinds.BUFFER) and spec.target in state:
            indices[name] = state[spec.target]
        else:
            raise NotDescribable(f"input {name} of kind {spec.kind}")
    if user != len(forward):
        raise NotDescribable("forward tensors the program does not take")
    return indices


def _tensor_index(encoded: Any) -> int:
    if isinstance(encoded, dict) and set(encoded) == {"tensor"}:
        return int(encoded["tensor"])
    raise NotDescribable("a forward argument that is not a tensor")


def _pairs(encoded: Any) -> Sequence[tuple[Any, Any]]:
    """``[name, tensor]`` pairs of the template's state list."""
    if encoded is None:
        return []
    items = encoded.get("list", []) if isinstance(encoded, dict) else []
    return [tuple(item["list"]) for item in items]


def _describe(program: torch.export.ExportedProgram, inputs: Mapping[str, int]) -> dict[str, Any]:
    kinds = torch.export.graph_signature.OutputKind
    if any(spec.kind != kinds.USER_OUTPUT for spec in program.graph_signature.output_specs):
        raise NotDescribable("the program writes a buffer or returns more than its outputs")
    nodes: list[dict[str, Any]] = []
    outputs: list[Any] = []
    for node in program.graph.nodes:
        if node.op == "call_function":
            if not isinstance(node.target, torch._ops.OpOverload) or len(nodes) >= MAX_NODES:
                raise NotDescribable(f"call {node.target}")
            if node.target._schema.is_mutable:
                raise NotDescribable(f"{node.target} writes its arguments")
            value = node.meta.get("val")
            if value is None and not node.users:  # a check export inserts (_assert_tensor_metadata)
                continue
            if not isinstance(value, torch.Tensor):
                raise NotDescribable(f"{node.target} does not return one tensor")
            nodes.append({"name": node.name, "op": node.target.name(),
                          "args": [_encode(a, inputs) for a in node.args],
                          "kwargs": {k: _encode(v, inputs) for k, v in node.kwargs.items()},
                          "dtype": dtype_name(value.dtype), "shape": list(value.shape)})
        elif node.op == "output":
            outputs = [_encode(a, inputs) for a in node.args[0]]
    return {"nodes": nodes, "outputs": outputs}


def _encode(value: Any, inputs: Mapping[str, int]) -> Any:
    """An argument in the call template's encoding, with ``{"node": name}`` for an earlier call."""
    if isinstance(value, torch.fx.Node):
        if value.op == "placeholder":
            if value.name not in inputs:
                raise NotDescribable(f"placeholder {value.name}")
            return {"tensor": inputs[value.name]}
        return {"node": value.name}
    if isinstance(value, (list, tuple)):
        return {"list": [_encode(v, inputs) for v in value]}
    held: list[torch.Tensor] = []
    try:
        encoded = encode_value(value, held)
    except UnsupportedArgument as exc:
        raise NotDescribable(str(exc)) from exc
    if held:
        raise NotDescribable("a constant tensor argument")
    return encoded

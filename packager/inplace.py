"""Kernels of ops that mutate an input (``relu_``, ``add_``, ``masked_fill_``).

The kernel contract passes a mutated argument as an output, pre-filled: the runtime hands the
kernel the live tensor itself as that output and returns that very object, as eager does. Only
ops whose every written argument is returned are served (``Tensor(a!) self -> Tensor(a!)``):
a mutation the op does not return (running statistics, ``out=``) stays with eager.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from packager.variant import VariantKey

#: Fallback reason: the mutated tensor shares memory with another input of the call (``x.add_(x)``,
#: ``x.add_(x[0])``); the kernel would read what it has already written.
SHARED_MEMORY = "shared_memory"


def aliased_outputs(card: Mapping[str, Any], overload: torch._ops.OpOverload) -> dict[int, int]:
    """``{output index: input index}`` of the inputs ``card``'s op mutates and returns (empty for an
    op that mutates nothing); raises ValueError where the runtime cannot serve the mutation."""
    mutated = list(card.get("mutated_inputs") or [])
    if not mutated:
        return {}
    schema = overload._schema
    template = json.loads(VariantKey.from_json(card["key"]).template)
    written: dict[object, int] = {}  # alias set -> input index
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        encoded = (template["args"][position] if position < len(template["args"])
                   else template["kwargs"].get(argument.name))
        if not (isinstance(encoded, dict) and isinstance(encoded.get("tensor"), int)):
            raise ValueError(f"{card['op']} writes {argument.name}, which is not one tensor of the call")
        written[frozenset(argument.alias_info.before_set)] = encoded["tensor"]
    if sorted(written.values()) != sorted(mutated):
        raise ValueError(f"{card['op']} mutates inputs {mutated}; its schema writes {sorted(written.values())}")
    aliases: dict[int, int] = {}
    for j, returned in enumerate(schema.returns):
        if returned.alias_info is not None and frozenset(returned.alias_info.before_set) in written:
            aliases[j] = written[frozenset(returned.alias_info.before_set)]
    if sorted(aliases.values()) != sorted(mutated):
        raise ValueError(f"{card['op']} mutates an input it does not return")
    for j, i in aliases.items():
        spec, output = card["inputs"][i], card["outputs"][j]
        if (spec["shape"], spec["stride"], spec["dtype"]) != (output["shape"], output["stride"], output["dtype"]):
            raise ValueError(f"output {j} of {card['op']} is input {i} yet laid out differently in the card")
        if any(stride == 0 and size > 1 for size, stride in zip(spec["shape"], spec["stride"], strict=True)):
            raise ValueError(f"mutated input {i} of {card['op']} has a broadcast dimension")
    return aliases


def overlaps_itself(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether two elements of a layout may share an address (conservative: True unless each dim's
    stride, in increasing order, steps past every element the smaller dims reach). A strided view
    into a larger buffer (a KV cache's ``cache[:, :, pos]``) has gaps yet never overlaps."""
    reach = 0  # the farthest offset the dims walked so far reach
    for step, size in sorted((s, n) for n, s in zip(shape, stride, strict=True) if n > 1):
        if step <= reach:
            return True
        reach += step * (size - 1)
    return False


def shares_memory(tensors: Sequence[torch.Tensor], mutated: Sequence[int]) -> bool:
    """Whether a mutated tensor shares a storage with another of the call's tensors (conservative:
    any two views of one storage count, overlapping or not)."""
    for i in mutated:
        storage = tensors[i].untyped_storage().data_ptr()
        if any(k != i and t.untyped_storage().data_ptr() == storage for k, t in enumerate(tensors)):
            return True
    return False

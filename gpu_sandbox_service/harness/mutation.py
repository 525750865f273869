"""Cards of ops that mutate an input (``relu_``, ``add_``): what the harness requires of them.

The kernel contract passes a mutated argument as an output, pre-filled with its value: the kernel
reads and writes that one buffer. Its poison is then the input's own value, so a kernel that
writes nothing is caught only where eager changes it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import torch

from gpu_sandbox_service.harness.reference import CardError


def check_mutated_inputs(mutated: Sequence[int], aliases: Mapping[int, int], changed: Collection[int]) -> None:
    """Raise :class:`CardError` unless every mutated input is returned as an output (the buffer the
    kernel writes is the one it is checked on) and eager changes it on some input set."""
    returned = set(aliases.values())
    for i in mutated:
        if i not in returned:
            raise CardError(f"input {i} is mutated but no output is that tensor: the kernel contract passes it "
                            "as an output, pre-filled, and checks what the op returns")
        if i not in changed:
            raise CardError(f"eager leaves mutated input {i} unchanged on every input set: a kernel that writes "
                            "nothing could not be told from a correct one")


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same values, NaN equal to NaN."""
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)

"""In-place calls that a kernel may serve: elementwise ones (``relu_``, ``add_``, ``masked_fill_``,
``copy_``, ``fill_``) and the scatters into ``self`` (``index_add_``, ``scatter_``, ``scatter_add_``,
``scatter_reduce_``).

The kernel contract passes the mutated argument as an output, pre-filled: the kernel reads and
writes that one buffer, and the runtime hands it the live tensor and returns it. That holds for
an elementwise op that writes only ``self`` and returns it, where ``self`` shares memory with no
other argument and none of its elements with each other; it may be a strided view into a larger
buffer (a KV cache's ``cache[:, :, pos].copy_(k)``). A scatter's sources and index are read, never
written, and may not share ``self``'s memory either. Every other mutation (a batch norm's running
statistics, ``copy_`` from a view of the same buffer, ``out=``) stays unoptimisable.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from capture_service.ops import OpTraits
from packager.inplace import overlaps_itself

#: In-place ops, elementwise or scatters, that torch does not tag pointwise.
SERVED_WITHOUT_TAG = frozenset({"masked_fill_", "copy_", "fill_", "zero_", "index_add_", "scatter_", "scatter_add_",
                                "scatter_reduce_"})


def served_in_place(func: torch._ops.OpOverload, traits: OpTraits, written: Sequence[torch.Tensor],
                    tensors: Sequence[torch.Tensor]) -> bool:
    """Whether this call, which writes ``written`` among its ``tensors``, may become a card."""
    if not (traits.pointwise or traits.packet in SERVED_WITHOUT_TAG):
        return False
    if traits.written_arguments != ("self",) or len(written) != 1 or not _returns_self(func):
        return False
    target = written[0]
    overlap = torch._debug_has_internal_overlap(target)  # 0: none; 1: some; 2: too hard to tell (gaps)
    if overlap == 1 or (overlap == 2 and overlaps_itself(target.shape, target.stride())):
        return False
    storage = target.untyped_storage().data_ptr()
    return sum(t.untyped_storage().data_ptr() == storage for t in tensors) == 1  # ``self`` alone: not ``x.add_(x)``


def _returns_self(func: torch._ops.OpOverload) -> bool:
    """``Tensor(a!) self -> Tensor(a!)``: the op returns the one argument it writes."""
    schema = func._schema
    if len(schema.returns) != 1 or schema.returns[0].alias_info is None:
        return False
    written = next(a for a in schema.arguments if a.name == "self").alias_info
    return written is not None and schema.returns[0].alias_info.before_set == written.before_set

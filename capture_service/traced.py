"""The variants a compiled graph holds: each captured op's calls as torch.compile traces them.

``cast.compile`` chooses an aten kernel while AOTAutograd traces the graph for inductor
(:mod:`packager.compiled`), on fake tensors. Their strides come from meta functions and
inductor's decompositions, not from the kernels eager ran: a convolution that eager returns
contiguous can be traced channels-last, and the group norm after it then reads strides no card
captured in eager has, so the compiled graph never chooses its kernel. This traces the model the
same way (dynamo, AOTAutograd, inductor's decomposition table; no code generated) and counts,
for each op asked about, the variant keys of its traced calls.

A traced key's alignment is assumed: tracing cannot see addresses (the compiled graph checks
them when the op runs), and its storage offset is the fake tensor's.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import get_proxy_mode

from packager.aten_dispatch import UnsupportedOp, resolve_overload
from packager.compiled import composite_overrides
from packager.traced_call import is_static
from packager.variant import (
    TensorSignature,
    UnsupportedArgument,
    VariantKey,
    aligned_line_offset,
    canonical_json,
    dtype_name,
    encode_call,
)

TracedCounts = collections.Counter[VariantKey]


def traced_key(op: str, args: Sequence[object], kwargs: Mapping[str, object]) -> VariantKey | None:
    """The key of a traced call (fake tensors, alignment assumed); None when it has none (an argument
    with no encoding, or a symbolic size)."""
    try:
        template, tensors = encode_call(args, kwargs)
    except UnsupportedArgument:
        return None
    signatures = []
    for tensor in tensors:
        if not is_static(tensor) or type(tensor.storage_offset()) is not int:
            return None
        offset = aligned_line_offset(int(tensor.storage_offset()), tensor.element_size())
        signatures.append(TensorSignature(tuple(tensor.shape), tuple(tensor.stride()), dtype_name(tensor.dtype),
                                          offset, True, tensor.device.type))
    return VariantKey(op, canonical_json(template), tuple(signatures))


def trace_compiled(model: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any],
                   ops: Collection[str]) -> TracedCounts:
    """Traced calls of ``ops`` (aten overload names) per variant key, as torch.compile's graphs of
    ``model`` hold them, in the grad mode the caller runs under. Runs the model once (its graphs run
    as traced, uncompiled); dynamo's process-wide caches are emptied before and after."""
    import torch._inductor.lowering  # inductor's decompositions read it (max_pool*_with_indices)
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.decomposition import select_decomp_table

    counts: TracedCounts = collections.Counter()
    overloads: dict[torch._ops.OpOverload, str] = {}
    for op in ops:
        with contextlib.suppress(UnsupportedOp):
            overloads[resolve_overload(op)] = op

    def recording(overload: torch._ops.OpOverload) -> Callable[[Callable[..., Any] | None], Callable[..., Any]]:
        def wrap(fallback: Callable[..., Any] | None) -> Callable[..., Any]:
            def record(*call_args: Any, **call_kwargs: Any) -> Any:
                if get_proxy_mode() is not None:  # the graph's trace, not AOTAutograd's metadata pass
                    key = traced_key(overloads[overload], call_args, call_kwargs)
                    if key is not None:
                        counts[key] += 1
                return fallback(*call_args, **call_kwargs) if fallback is not None else NotImplemented
            return record
        return wrap

    base = select_decomp_table()
    table = {**base, **{overload: recording(overload)(base.get(overload)) for overload in overloads}}
    backend = aot_autograd(fw_compiler=_as_traced, decompositions=table)
    with _fresh_dynamo(), composite_overrides({overload: recording(overload) for overload in overloads}):
        torch.compile(model, backend=backend, dynamic=False)(*args, **kwargs)
    return counts


def _as_traced(graph: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    return graph


@contextlib.contextmanager
def _fresh_dynamo() -> Iterator[None]:
    """Trace from empty caches (no graph compiled earlier serves the model), and leave none behind."""
    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()

"""``kforge_cast::kernel``: a packaged kernel as one op that torch.compile keeps in its graphs.

Tracing chooses the kernel (a module override or an aten decomposition matches the call's
shapes, strides, dtypes and arguments on fake tensors) and records this op with the card's id;
the compiled graph then calls it with no guard on the way in. Its fake implementation allocates
exactly the card's outputs, so inductor plans around known layouts and fuses the code before
and after it. What tracing cannot see (storage offsets, alignment, and the strides inductor
finally gave the inputs) is checked when the op runs; a miss or a kernel error runs the original
computation there, and its outputs are copied into the card's layouts where they differ.

The op dispatches on the inputs' device through torch's own allocator and the current stream,
so it is captured by CUDA graphs (``mode="reduce-overhead"``) like any other op.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from packager.guard import layout_miss
from packager.stats import REMOVED
from packager.variant import decode_call

if TYPE_CHECKING:
    from packager.kernel import LoadedKernel

_REGISTRY: dict[str, GraphKernels] = {}
_REGISTRY_LOCK = threading.Lock()
_TOKENS = itertools.count()
_TAGS = tuple(tag for tag in (getattr(torch.Tag, "needs_exact_strides", None),) if tag is not None)


class GraphKernels(Protocol):
    """Whoever recorded the op: it runs the card's kernel, or the original, in the compiled graph."""

    def run_in_graph(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]: ...

    def fake_outputs(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]: ...


def register(owner: GraphKernels) -> str:
    """A token naming ``owner`` in the graphs it records. Owners are kept for the process's life:
    a compiled graph may outlive the cast that traced it, and must still find its fallback."""
    with _REGISTRY_LOCK:
        token = str(next(_TOKENS))
        _REGISTRY[token] = owner
    return token


def call(tensors: list[torch.Tensor], token: str, card_id: str) -> list[torch.Tensor]:
    """Record (under tracing) or run the op."""
    return torch.ops.kforge_cast.kernel(tensors, token, card_id)


def _owner(token: str) -> GraphKernels:
    with _REGISTRY_LOCK:
        owner = _REGISTRY.get(token)
    if owner is None:
        raise RuntimeError(f"kforge_cast::kernel: no loaded .cast registered token {token!r} in this process")
    return owner


def _run(inputs: list[torch.Tensor], token: str, card_id: str) -> list[torch.Tensor]:
    return _owner(token).run_in_graph(list(inputs), card_id)


def _fake(inputs: list[torch.Tensor], token: str, card_id: str) -> list[torch.Tensor]:
    return _owner(token).fake_outputs(list(inputs), card_id)


Layout = tuple[tuple[int, ...], tuple[int, ...], torch.dtype]


def conform(results: Sequence[torch.Tensor], layouts: Sequence[Layout],
            inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The original computation's outputs in the layouts (shape, stride, dtype) the fake
    implementation promised, none aliasing an input (a custom op's outputs may not)."""
    storages = {t.untyped_storage().data_ptr() for t in inputs}
    conformed = []
    for result, (shape, stride, dtype) in zip(results, layouts, strict=True):
        if result.stride() != stride or result.dtype != dtype or result.untyped_storage().data_ptr() in storages:
            fresh = torch.empty_strided(shape, stride, dtype=dtype, device=result.device)
            fresh.copy_(result)
            result = fresh
        conformed.append(result)
    return conformed


def run_or_original(kernel: LoadedKernel, tensors: list[torch.Tensor], active: bool,
                    original: Callable[[list[Any], dict[str, Any]], Any]) -> list[torch.Tensor]:
    """The compiled graph's call: the kernel where the tensors are still its card's (what tracing
    could not see is checked here) and the cast is still applied, else ``original(args, kwargs)``
    on the call rebuilt from the card's template, in the layouts the fake implementation promised."""
    if not active:
        kernel.stats.fallback(REMOVED)
    elif (miss := layout_miss(tensors, kernel.key.tensors)) is not None:
        kernel.stats.fallback(miss)
    else:
        outputs = kernel.try_launch(tensors)
        if outputs is not None:
            return outputs
    args, kwargs = decode_call(kernel.template, tensors)
    result = original(args, kwargs)
    results = list(result) if isinstance(result, (tuple, list)) else [result]
    return conform(results, kernel.output_layouts, tensors)


_LIBRARY = torch.library.Library("kforge_cast", "FRAGMENT")
_LIBRARY.define("kernel(Tensor[] inputs, str token, str card_id) -> Tensor[]", tags=_TAGS)
_LIBRARY.impl("kernel", _run, "CompositeExplicitAutograd")
torch.library.register_fake("kforge_cast::kernel", _fake, lib=_LIBRARY)

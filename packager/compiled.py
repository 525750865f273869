"""A .cast inside torch.compile: aten kernels chosen while the graph is traced, inductor around them.

Inductor generates its own code for aten ops, so the eager overrides never run inside a compiled
graph. Instead the cast's backend hands inductor a decomposition table with an entry per
overridden aten overload: while AOTAutograd traces the graph (on fake tensors, below autograd,
so gradients keep the op's own formula), the entry matches the call against the op's cards and,
on an exact match, records :mod:`packager.graph_op`'s op in place of the aten op; otherwise it
defers to inductor's own decomposition, or leaves the op as it is. The choice is made once per
compilation and adds no dynamo guard: the graph carries no guard, breaks nowhere, and recompiles
exactly when it would without the cast.

An overload implemented by decomposition (``CompositeImplicitAutograd``: ``group_norm``,
``layer_norm``, ``softmax.int``, ...) is decomposed before any decomposition table is consulted,
so for the length of the backend's compilation the same choice is registered as the overload's
Python kernel at that key, which AOTAutograd's Python dispatcher runs in place of the C++
decomposition; the overload's own decomposition serves every call no card matches.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from packager import graph_op
from packager.aten_dispatch import resolve_overload, result_shape, shape_result
from packager.kernel import KernelSet, LoadedKernel

Decompositions = dict[torch._ops.OpOverload, Callable[..., Any]]
# Python kernels of aten overloads are process-wide: one compilation at a time replaces them.
_COMPOSITE_LOCK = threading.RLock()


def _decompose(overload: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The overload's own decomposition: its C++ ``CompositeImplicitAutograd`` kernel (``decompose``
    would call the Python kernel this module put in its place)."""
    return overload._op_dk(torch._C.DispatchKey.CompositeImplicitAutograd, *args, **kwargs)


@contextlib.contextmanager
def composite_overrides(
    overrides: Mapping[torch._ops.OpOverload, Callable[[Callable[..., Any]], Callable[..., Any]]],
) -> Iterator[None]:
    """While the block runs, each overload implemented by decomposition (``CompositeImplicitAutograd``)
    runs ``overrides[overload](its own kernel)`` as its Python kernel there, which AOTAutograd's Python
    dispatcher calls in place of the C++ decomposition; other overloads are left alone."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    with _COMPOSITE_LOCK:
        replaced: list[tuple[torch._ops.OpOverload, Callable[..., Any] | None]] = []
        try:
            for overload, wrap in overrides.items():
                if not torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd"):
                    continue
                before = overload.py_kernels.get(key)
                overload.py_kernels[key] = wrap(before or functools.partial(_decompose, overload))
                overload._dispatch_cache.clear()
                replaced.append((overload, before))
            yield
        finally:
            for overload, before in replaced:
                if before is None:
                    overload.py_kernels.pop(key, None)
                else:
                    overload.py_kernels[key] = before
                overload._dispatch_cache.clear()


def inductor_config(mode: str | None, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Inductor's settings for torch.compile's ``mode`` and ``options``, as its own wrapper reads them."""
    from torch._inductor import list_mode_options

    config: dict[str, Any] = dict(list_mode_options(mode)) if mode and mode != "default" else {}
    config.update({key.replace("-", "_"): value for key, value in (options or {}).items()})
    return config


def graph_mode(config: Mapping[str, Any]) -> str:
    """``cuda_graphs`` where inductor's settings capture the graph in CUDA graphs (``mode="reduce-overhead"``,
    ``"max-autotune"``, or ``options={"triton.cudagraphs": True}``), else ``compiled``."""
    return "cuda_graphs" if config.get("triton.cudagraphs") else "compiled"


class AtenGraphKernels(graph_op.GraphOwner):
    """A cast's aten kernels for compiled graphs, one decomposition entry per overload.

    Each compilation uses the kernels whose verdict keeps them in its mode (``compiled`` or
    ``cuda_graphs``, :func:`graph_mode`): a kernel that pays off between inductor's fused kernels
    may not once CUDA graphs have removed the launch costs around it, and the reverse.
    """

    def __init__(self, kernels: Sequence[LoadedKernel]) -> None:
        self._kernels = list(kernels)
        self._overloads = {op: resolve_overload(op) for op in {k.record.op for k in kernels}}
        self._by_id = {k.card_id: k for k in kernels}
        super().__init__()
        self.active = True

    def compiled_kernels(self) -> Iterable[LoadedKernel]:
        return self._by_id.values()

    def kernel_sets(self, mode: str) -> dict[str, KernelSet]:
        """Per op, the kernels compiled graphs of ``mode`` use."""
        grouped: dict[str, list[LoadedKernel]] = defaultdict(list)
        for kernel in self._kernels:
            if kernel.serves_graphs(mode):
                grouped[kernel.record.op].append(kernel)
        return {op: KernelSet(members) for op, members in grouped.items()}

    def decompositions(self, base: Mapping[torch._ops.OpOverload, Callable[..., Any]],
                       mode: str = "compiled") -> Decompositions:
        """``base`` (inductor's table) with this cast's overloads routed through their cards first."""
        table: Decompositions = dict(base)
        for op, kernels in self.kernel_sets(mode).items():
            overload = self._overloads[op]
            table[overload] = self._decomposition(overload, kernels, base.get(overload))
        return table

    def composite_choices(self, mode: str = "compiled") -> contextlib.AbstractContextManager[None]:
        """While the block runs, each decomposed overload's Python kernel at ``CompositeImplicitAutograd``
        chooses among its cards first (what AOTAutograd's Python dispatcher runs while it traces)."""
        return composite_overrides({
            self._overloads[op]: functools.partial(self._decomposition, self._overloads[op], kernels)
            for op, kernels in self.kernel_sets(mode).items()})

    def _decomposition(self, overload: torch._ops.OpOverload, kernels: KernelSet,
                       fallback: Callable[..., Any] | None) -> Callable[..., Any]:
        result = result_shape(overload)

        def choose_kernel(*args: Any, **kwargs: Any) -> Any:
            found = kernels.match_traced(args, kwargs)
            if found is not None and not (torch.is_grad_enabled() and any(t.requires_grad for t in found[1])):
                kernel, tensors = found
                return shape_result(result, graph_op.call(tensors, self, kernel))
            return fallback(*args, **kwargs) if fallback is not None else NotImplemented

        return choose_kernel

    def run_in_graph(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        kernel = self._by_id[card_id]
        overload = self._overloads[kernel.record.op]
        return graph_op.run_or_original(kernel, tensors, self.active, lambda args, kwargs: overload(*args, **kwargs))

    def fake_outputs(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        return self._by_id[card_id].fake_outputs(tensors)


class CastBackend:
    """``torch.compile(model, backend=cast.backend())``: inductor, with the cast's kernels in its graphs.

    Accepts what torch.compile passes a custom backend (``mode``, ``options``), and applies them
    as inductor's own wrapper does. Its compilations neither read nor write inductor's caches
    (the FX graph cache, and with it AOTAutograd's): a cache key does not cover the decomposition
    table, so a graph cached with this cast's op could serve a compile without it, and the reverse.
    """

    def __init__(self, aten: AtenGraphKernels) -> None:
        self.aten = aten
        self.__name__ = "kforge_cast"

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                 mode: str | None = None, options: Mapping[str, Any] | None = None) -> Any:
        from torch._inductor.compile_fx import compile_fx
        from torch._inductor.decomposition import select_decomp_table

        config = inductor_config(mode, options)
        kernels_mode = graph_mode(config)
        config.update(fx_graph_cache=False, fx_graph_remote_cache=False)
        with self.aten.composite_choices(kernels_mode):
            return compile_fx(graph, list(example_inputs), config_patches=config,
                              decompositions=self.aten.decompositions(select_decomp_table(), kernels_mode))

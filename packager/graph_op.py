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

Where the runtime's native library can be built (:mod:`packager.native.graph`), tracing records
``kforge_cast::native`` instead: the same call, checked and launched in C++ with no Python on the
way in, handing every call it does not run to ``kforge_cast::kernel``.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from packager.guard import layout_miss
from packager.native.graph import NativeGraphOp, native_graph_op
from packager.stats import REMOVED
from packager.variant import decode_call

if TYPE_CHECKING:
    from packager.kernel import LoadedKernel

# Every owner something still holds, by token: a graph names its owner by token only.
_REGISTRY: weakref.WeakValueDictionary[str, GraphOwner] = weakref.WeakValueDictionary()
_REGISTRY_LOCK = threading.Lock()
# The owners some graph recorded, by token, each held until its graph anchor is gone.
_RECORDED: dict[str, GraphOwner] = {}
# The owner's token and the card id of each native slot, for the slot's fake implementation.
_SLOT_NAMES: dict[int, tuple[str, str]] = {}
_TOKENS = itertools.count()
_TAGS = tuple(tag for tag in (getattr(torch.Tag, "needs_exact_strides", None),) if tag is not None)


class GraphOwner:
    """Whoever records the op: it runs the card's kernel, or the original, in the compiled graph.

    An owner is registered under a token that the graphs it records carry, for as long as something
    holds it: its cast (a module override only while the cast is applied), the backends that trace
    it (torch.compile keeps a backend as long as the graphs it compiled), and, once a graph has
    recorded it, its :meth:`graph_anchor`. So a compiled graph that outlives the cast that traced it
    still finds its fallback, and an owner no graph can run any more is freed with what it holds
    (a module's override holds the module's tensors while the cast is applied). Its ``active`` flag
    (off once its cast is removed) reaches its native slots, which :meth:`prepare_native` makes
    before anything is traced: the traced path only reads ``native_slots``, which then never
    changes, so it adds no guard that could fail later.
    """

    def __init__(self) -> None:
        self._active = False
        self.native_slots: dict[str, int] = {}
        self._native: NativeGraphOp | None = None  # the library that holds native_slots
        self._anchored = False
        with _REGISTRY_LOCK:
            self.token = str(next(_TOKENS))
            _REGISTRY[self.token] = self

    def run_in_graph(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        raise NotImplementedError

    def fake_outputs(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        raise NotImplementedError

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, value: bool) -> None:
        self._active = value
        if self._native is not None:
            for slot in self.native_slots.values():
                self._native.set_active(slot, value)

    def compiled_kernels(self) -> Iterable[LoadedKernel]:
        """The kernels this owner may record in a graph."""
        raise NotImplementedError

    def graph_anchor(self) -> object | None:
        """What every graph that records this owner needs alive to run at all, if anything: once
        a graph has recorded the owner, the owner stays registered as long as the anchor lives.
        None: whoever traces the owner's graphs holds it."""
        return None

    def recorded(self) -> None:
        """A graph records this owner's op (its fake implementation runs): keep the owner while
        the graph anchor lives."""
        if self._anchored or (anchor := self.graph_anchor()) is None:
            return
        _RECORDED[self.token] = self
        # The finalizer takes no lock: the collector may run it while this thread holds _REGISTRY_LOCK.
        weakref.finalize(anchor, _RECORDED.pop, self.token, None)
        self._anchored = True

    def prepare_native(self) -> None:
        """Native slots for the owner's compiled kernels where the native library is here and can run them."""
        missing = [k for k in self.compiled_kernels() if k.card_id not in self.native_slots]
        native = native_graph_op() if missing else None
        if native is None:
            return
        self._native = native
        for kernel in missing:
            slot = native.add_slot(kernel.launcher.library.launch_address, kernel.output_device_type,
                                   kernel.key.tensors, kernel.output_layouts,
                                   kernel.launcher.descriptors.workspace_bytes, self.token, kernel.card_id)
            if slot is None:
                continue
            native.set_active(slot, self._active)
            with _REGISTRY_LOCK:
                _SLOT_NAMES[slot] = (self.token, kernel.card_id)
            kernel.stats.add_counter(functools.partial(_hit_counts, native, slot))
            self.native_slots[kernel.card_id] = slot


def _hit_counts(native: NativeGraphOp, slot: int) -> tuple[int, dict[str, int]]:
    return native.hits(slot), {}


def call(tensors: list[torch.Tensor], owner: GraphOwner, kernel: LoadedKernel) -> list[torch.Tensor]:
    """Record (under tracing) or run the op: ``kforge_cast::native`` where the owner has a slot
    for the kernel, else ``kforge_cast::kernel``."""
    return call_chosen(tensors, owner.token, owner.native_slots.get(kernel.card_id, -1), kernel.card_id)


def call_chosen(tensors: list[torch.Tensor], token: str, slot: int, card_id: str) -> list[torch.Tensor]:
    """:func:`call` with the owner's choice already made: ``slot`` -1 where it has no native slot."""
    if slot >= 0:
        return torch.ops.kforge_cast.native(tensors, slot)
    return torch.ops.kforge_cast.kernel(tensors, token, card_id)


def registered_owner(token: str) -> GraphOwner:
    """The registered owner of ``token``."""
    with _REGISTRY_LOCK:
        owner = _REGISTRY.get(token)
    if owner is None:
        raise RuntimeError(f"kforge_cast::kernel: no loaded .cast registered token {token!r} in this process")
    return owner


def _run(inputs: list[torch.Tensor], token: str, card_id: str) -> list[torch.Tensor]:
    return registered_owner(token).run_in_graph(list(inputs), card_id)


def _fake(inputs: list[torch.Tensor], token: str, card_id: str) -> list[torch.Tensor]:
    owner = registered_owner(token)
    owner.recorded()
    return owner.fake_outputs(list(inputs), card_id)


def _native_fake(inputs: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    with _REGISTRY_LOCK:
        token, card_id = _SLOT_NAMES[slot]
    return _fake(inputs, token, card_id)


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
# Implemented in C++ (packager/native/graph_op.cpp) for CPU and CUDA once the library is loaded.
_LIBRARY.define("native(Tensor[] inputs, int slot) -> Tensor[]", tags=_TAGS)
torch.library.register_fake("kforge_cast::native", _native_fake, lib=_LIBRARY)

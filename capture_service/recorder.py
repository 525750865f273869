"""The aten-level recorder: a TorchDispatchMode that sees every op the model runs.

It sits below autograd, so it sees ``Tensor`` methods and functional calls alike, and the ops
it sees are those of the grad mode the capture runs under. Each call is grouped by
:func:`packager.variant.variant_key` — the same function the runtime guard uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from capture_service.inplace import served_in_place
from capture_service.layout import clone_exact, tensor_spec
from capture_service.ops import (
    OpTraits,
    bound_arguments,
    is_identity_adaptive_pool,
    is_random_call,
    op_traits,
    operates_on_empty,
    written_tensors,
)
from capture_service.records import CallSample, SamplePolicy, VariantRecord, cpu_copy
from packager.variant import (
    UnsupportedArgument,
    VariantKey,
    canonical_json,
    decode_call,
    encode_call,
    tensor_signature,
    variant_key,
)

MUTATES = "mutates its arguments"
RETURNS_NO_TENSOR = "metadata-only: returns no tensor"
FACTORY = "factory: creates a tensor without reading another's values"
VIEW = "view: returns an alias of its input"
RANDOM = "random: draws from the generator, so there is no fixed reference"
EMPTY = "operates on an empty tensor"
IDENTITY_POOL = "adaptive pool whose output size equals its input size"


class OpObserver(Protocol):
    """Told about every recorded op (the module recorder tracks purity and mutation with it)."""

    def current_path(self) -> str: ...

    def op_ran(self, traits: OpTraits, record: VariantRecord, written: Sequence[torch.Tensor]) -> None: ...


class OperatorRecorder(TorchDispatchMode):
    """Records each aten call into a :class:`VariantRecord` per variant key."""

    def __init__(self, policy: SamplePolicy, observer: OpObserver | None = None) -> None:
        super().__init__()
        self.policy = policy
        self.observer = observer
        self.records: dict[VariantKey, VariantRecord] = {}
        self._active = True

    @contextmanager
    def suspended(self) -> Iterator[None]:
        """Ops run inside are capture bookkeeping, not the model's: do not record them."""
        previous, self._active = self._active, False
        try:
            yield
        finally:
            self._active = previous

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if not self._active:
            return func(*args, **kwargs)
        traits = op_traits(func)
        bound = bound_arguments(func, args, kwargs)
        written = written_tensors(traits, bound)
        key, unsupported = _key_of(traits.name, args, kwargs)
        record = self.records.get(key)
        first_inputs: list[torch.Tensor] | None = None
        extra_inputs: list[torch.Tensor] | None = None  # copied before the call: it may write them
        if record is None:
            first_inputs = [clone_exact(t) for t in _call_tensors(args, kwargs, unsupported)]
        elif self.policy.wants_extra(record):
            extra_inputs = [cpu_copy(t) for t in _call_tensors(args, kwargs, unsupported)]
        out = func(*args, **kwargs)
        outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if record is None:
            assert first_inputs is not None
            record = self._new_record(func, traits, key, unsupported, bound, written, args, kwargs, outputs)
            self.policy.add(record, CallSample(first_inputs, [clone_exact(t) for t in outputs]))
            self.records[key] = record
        elif extra_inputs is not None:
            self.policy.add(record, CallSample(extra_inputs, [cpu_copy(t) for t in outputs]))
        record.call_count += 1
        if self.observer is not None:
            record.add_path(self.observer.current_path())
            self.observer.op_ran(traits, record, written)
        return out

    def _new_record(
        self,
        func: torch._ops.OpOverload,
        traits: OpTraits,
        key: VariantKey,
        unsupported: str,
        bound: Mapping[str, object],
        written: Sequence[torch.Tensor],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        outputs: Sequence[torch.Tensor],
    ) -> VariantRecord:
        tensors = _call_tensors(args, kwargs, unsupported)
        template = json.loads(key.template)
        record = VariantRecord(
            key=key,
            kind="aten",
            op=traits.name,
            outputs=[tensor_spec(t) for t in outputs],
            eager_call=None if unsupported else _eager_call(func, template),
            vendor_op=traits.vendor,
        )
        written_ids = {id(t) for t in written}
        record.mutated_inputs = [i for i, t in enumerate(tensors) if id(t) in written_ids]
        in_place = bool(written) and served_in_place(func, traits, written, tensors)
        if unsupported:
            record.mark_not_optimisable(unsupported)
        if written and not in_place:
            record.mark_not_optimisable(MUTATES)
        if not outputs:
            record.mark_not_optimisable(RETURNS_NO_TENSOR)
        if is_random_call(traits, bound):
            record.mark_not_optimisable(RANDOM)
        if traits.factory or not tensors:
            record.mark_not_optimisable(FACTORY)
        if _aliases(outputs, [t for t in tensors if id(t) not in written_ids] if in_place else tensors):
            record.mark_not_optimisable(VIEW)  # an in-place op returns the tensor it writes: no view
        if operates_on_empty(traits, tensors, outputs):
            record.degenerate = EMPTY
            record.mark_not_optimisable(EMPTY)
        elif is_identity_adaptive_pool(traits, bound):
            record.degenerate = IDENTITY_POOL
        return record


def _key_of(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[VariantKey, str]:
    """The call's variant key, or a key by op and tensor layouts when an argument has no encoding."""
    try:
        return variant_key(op, args, kwargs), ""
    except UnsupportedArgument as exc:
        reason = f"unsupported argument: {exc}"
        tensors = [t for t in tree_leaves((list(args), dict(kwargs))) if isinstance(t, torch.Tensor)]
        template = canonical_json({"unsupported": reason})
        return VariantKey(op, template, tuple(tensor_signature(t) for t in tensors)), reason


def _call_tensors(args: Sequence[Any], kwargs: Mapping[str, Any], unsupported: str) -> list[torch.Tensor]:
    """The call's tensors in template order (the kernel's input order)."""
    if unsupported:
        return [t for t in tree_leaves((list(args), dict(kwargs))) if isinstance(t, torch.Tensor)]
    return encode_call(args, kwargs)[1]


def _aliases(outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> bool:
    storages = {t.untyped_storage().data_ptr() for t in inputs if t.numel()}
    return any(t.numel() and t.untyped_storage().data_ptr() in storages for t in outputs)


def _eager_call(
    func: torch._ops.OpOverload, template: Mapping[str, Any]
) -> Callable[[Sequence[torch.Tensor]], Callable[[], Any]]:
    """Binds ``func`` to a call's tensors: the call's arguments decoded once, then called as is."""

    def bind(tensors: Sequence[torch.Tensor]) -> Callable[[], Any]:
        args, kwargs = decode_call(template, tensors)
        return lambda: func(*args, **kwargs)

    return bind

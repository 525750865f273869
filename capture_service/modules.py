"""Module cards: leaf modules, and modules whose forward is only elementwise/normalisation work.

One kernel for a whole module's forward (RMSNorm, a gated activation, GroupNorm + SiLU) is how
per-operator search reaches fusion. Forward hooks see each module call; the aten recorder tells
this recorder which ops ran inside it, so a composite module qualifies only when every op it ran
was elementwise, a normalisation, a reduction, a copy or a view.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from capture_service.layout import clone_exact, tensor_spec
from capture_service.ops import OpTraits
from capture_service.program_graph import program_graph
from capture_service.recorder import MUTATES, OperatorRecorder
from capture_service.records import CallSample, SamplePolicy, VariantRecord, cpu_copy
from kforge_torch.eviction import held_tensors
from packager.variant import (
    STATE_KWARG,
    UnsupportedArgument,
    VariantKey,
    decode_call,
    encode_call,
    module_state,
    module_variant_key,
    qualified_class_name,
)

NO_WORK = "runs no computing operator (only views or nothing)"
NO_TENSOR_OUTPUT = "returns no tensor"
MUTATES_STATE = "mutates its own parameters or buffers"


@dataclass
class _Frame:
    """One module call in progress."""

    module: torch.nn.Module
    path: str
    key: VariantKey | None
    unsupported: str
    # The call's tensors in template order (forward tensors and state), as passed, and their
    # version counters when the call began: what tells which of them the forward wrote.
    tensors: list[torch.Tensor]
    versions: list[int | None]
    first_inputs: list[torch.Tensor] | None
    fusable: bool = True
    computes: bool = False
    vendor: bool = False
    mutated_storages: set[int] = field(default_factory=set)


@dataclass
class ModuleVariant:
    """A module record plus what decides whether it becomes a card."""

    record: VariantRecord
    module: torch.nn.Module
    template: dict[str, Any]
    leaf: bool
    fusable: bool = True


class ModuleRecorder:
    """Forward hooks on every submodule of a model, feeding module variants and module paths."""

    def __init__(self, root: torch.nn.Module, operators: OperatorRecorder, policy: SamplePolicy) -> None:
        self.root = root
        self.operators = operators
        self.policy = policy
        self.variants: dict[VariantKey, ModuleVariant] = {}
        self._stack: list[_Frame] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> ModuleRecorder:
        seen: set[int] = set()
        for path, module in self.root.named_modules():
            if id(module) in seen:
                continue
            seen.add(id(module))
            self._handles.append(module.register_forward_pre_hook(self._pre_hook(path), with_kwargs=True))
            self._handles.append(
                module.register_forward_hook(self._post_hook, with_kwargs=True, always_call=True)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._stack.clear()

    # OpObserver
    def current_path(self) -> str:
        return self._stack[-1].path if self._stack else ""

    def op_ran(self, traits: OpTraits, record: VariantRecord, written: Sequence[torch.Tensor]) -> None:
        computes = record.optimisable or record.reason == MUTATES
        fusable = traits.elementwise_or_norm or not computes
        written_storages = {t.untyped_storage().data_ptr() for t in written}
        for frame in self._stack:
            frame.computes = frame.computes or computes
            frame.fusable = frame.fusable and fusable
            frame.vendor = frame.vendor or traits.vendor
            frame.mutated_storages |= written_storages

    def _suspended(self) -> AbstractContextManager[None]:
        return self.operators.suspended()

    def _pre_hook(self, path: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            with self._suspended():
                self._stack.append(self._open_frame(module, path, args, kwargs))

        return hook

    def _open_frame(
        self, module: torch.nn.Module, path: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> _Frame:
        try:
            key, unsupported = module_variant_key(module, args, kwargs), ""
            tensors = _module_call_tensors(module, args, kwargs)
        except UnsupportedArgument as exc:
            key, unsupported, tensors = None, f"unsupported argument: {exc}", []
        first_inputs = None
        if key is not None and key not in self.variants:
            # The state is copied when the call returns (see _first_inputs), the inputs now.
            state_ids = _state_ids(module)
            first_inputs = [t.detach() if id(t) in state_ids else clone_exact(t) for t in tensors]
        return _Frame(module, path, key, unsupported, tensors, [_version(t) for t in tensors], first_inputs)

    def _post_hook(
        self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
    ) -> None:
        frame = self._pop(module)
        if frame is None or output is None or frame.key is None:
            return  # the forward raised, or the call cannot be keyed
        with self._suspended():
            self._record_call(frame, args, kwargs, output)

    def _pop(self, module: torch.nn.Module) -> _Frame | None:
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i].module is module:
                frame = self._stack[i]
                del self._stack[i:]
                return frame
        return None

    def _record_call(self, frame: _Frame, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        assert frame.key is not None
        outputs = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]
        written = _written_positions(frame)
        variant = self.variants.get(frame.key)
        if variant is None:
            variant = self._new_variant(frame, args, kwargs, outputs)
            first_inputs = _first_inputs(frame, variant.leaf or frame.fusable, written)
            self.policy.add(variant.record, CallSample(first_inputs, [clone_exact(t) for t in outputs]))
            self.variants[frame.key] = variant
        elif self.policy.wants_extra(variant.record) and not written:
            inputs = [cpu_copy(t) for t in frame.tensors]
            self.policy.add(variant.record, CallSample(inputs, [cpu_copy(t) for t in outputs]))
        record = variant.record
        record.call_count += 1
        record.add_path(frame.path)
        variant.fusable = variant.fusable and frame.fusable
        record.vendor_op = record.vendor_op or frame.vendor
        if not frame.computes:
            record.mark_not_optimisable(NO_WORK)
        if written:
            _mark_mutation(record, frame, written)

    def _new_variant(
        self, frame: _Frame, args: tuple[Any, ...], kwargs: dict[str, Any], outputs: Sequence[torch.Tensor]
    ) -> ModuleVariant:
        assert frame.key is not None
        module = frame.module
        template = encode_call(args, {**kwargs, STATE_KWARG: module_state(module)})[0]
        record = VariantRecord(
            key=frame.key,
            kind="module",
            op=qualified_class_name(module),
            outputs=[tensor_spec(t) for t in outputs],
            eager_call=_module_eager_call(module, template),
            eager_state=held_tensors(module),
        )
        if not outputs:
            record.mark_not_optimisable(NO_TENSOR_OUTPUT)
        leaf = next(iter(module.children()), None) is None
        return ModuleVariant(record, module, template, leaf)

    def card_variants(self) -> Iterator[ModuleVariant]:
        """The variants that become module cards: leaf modules and fusable composites."""
        for variant in self.variants.values():
            if variant.leaf or variant.fusable:
                yield variant


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's version counter (bumped by in-place writes); inference tensors keep none."""
    return None if tensor.is_inference() else tensor._version


def _state_ids(module: torch.nn.Module) -> set[int]:
    return {id(t) for _, t in module_state(module)}


def _written_positions(frame: _Frame) -> list[int]:
    """Positions of the call's tensors its forward wrote in place, forward inputs and state alike.

    A write is seen by the ops the aten recorder saw write a tensor's storage, or by a bumped
    version counter (running stats updated by batch norm bump none; inference tensors have none).
    """
    return [
        i
        for i, (t, version) in enumerate(zip(frame.tensors, frame.versions, strict=True))
        if (t.numel() and t.untyped_storage().data_ptr() in frame.mutated_storages)
        or (version is not None and t._version != version)
    ]


def _first_inputs(frame: _Frame, may_be_card: bool, written: Sequence[int]) -> list[torch.Tensor]:
    """The first sample's inputs, its buffers copied now that the call has returned.

    The state is held by reference during the call; buffers are copied only for a module that
    can become a card and did not write them (so they still hold their values at call time).
    The sample must hold a copy, since timing replays and later calls (a parent stepping a
    counter) may change a live buffer before samples are written. Parameters stay shared:
    copying them would duplicate the model's weights, and a forward that writes its own
    parameters is caught above and makes the card not optimisable, its sample never written.
    """
    inputs = frame.first_inputs
    if inputs is None or not may_be_card or written:
        return inputs or []
    buffer_ids = {id(b) for b in frame.module.buffers()}
    return [clone_exact(t) if id(s) in buffer_ids else t for t, s in zip(inputs, frame.tensors, strict=True)]


def _mark_mutation(record: VariantRecord, frame: _Frame, written: Sequence[int]) -> None:
    """Record the written positions as aten cards do; a kernel would have to repeat the writes."""
    record.mutated_inputs = sorted({*record.mutated_inputs, *written})
    state_ids = _state_ids(frame.module)
    writes_input = any(id(frame.tensors[i]) not in state_ids for i in written)
    record.mark_not_optimisable(MUTATES if writes_input else MUTATES_STATE)


def _module_call_tensors(module: torch.nn.Module, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
    """The module call's tensors in template order (forward tensors and ``__state__``)."""
    return encode_call(args, {**kwargs, STATE_KWARG: module_state(module)})[1]


def forward_call(
    template: Mapping[str, Any], tensors: Sequence[torch.Tensor]
) -> tuple[list[object], dict[str, object]]:
    """The forward's ``(args, kwargs)`` from a module card's template and inputs (state dropped)."""
    args, kwargs = decode_call(template, tensors)
    kwargs.pop(STATE_KWARG, None)
    return args, kwargs


def _module_eager_call(
    module: torch.nn.Module, template: Mapping[str, Any]
) -> Callable[[Sequence[torch.Tensor]], Callable[[], Any]]:
    """Binds the module to a sample's forward tensors (decoded once); the state tensors are the module's own."""

    def bind(tensors: Sequence[torch.Tensor]) -> Callable[[], Any]:
        args, kwargs = forward_call(template, tensors)
        return lambda: module(*args, **kwargs)

    return bind


def export_program(variant: ModuleVariant) -> tuple[bytes, dict[str, Any] | None]:
    """The module's forward on its first sample as a saved ``torch.export`` program, and the
    program's calls as JSON (:mod:`capture_service.program_graph`) where they can be described.

    Runs outside inference mode on fresh copies of the sample, since export cannot trace
    inference tensors.
    """
    sample = variant.record.samples[0]
    args, kwargs = forward_call(variant.template, [t.detach().clone() for t in sample.inputs])
    with torch.no_grad():
        program = torch.export.export(variant.module, tuple(args), kwargs)
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue(), program_graph(program, variant.template)

"""Records for the layouts only a compiled graph gives a captured op's calls.

A traced call (:mod:`capture_service.traced`) whose layout no eager record has, but whose op,
arguments, shapes and dtypes one has, is the same computation on differently laid-out memory. Its
record re-lays that eager record's sample inputs out as the trace holds them, and takes its
reference outputs from running the op eagerly on them, as capture does for every card: the kernel
searched for it is checked against eager on exactly the call the compiled graph will make.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from capture_service.layout import clone_exact, spanned_elements, tensor_spec
from capture_service.records import CallSample, SamplePolicy, VariantRecord, cpu_copy
from capture_service.traced import TracedCounts
from packager.variant import TensorSignature, VariantKey, tensor_signature

LayoutFree = tuple[str, str, tuple[tuple[tuple[int, ...], str, str], ...]]
Strides = tuple[tuple[int, ...], ...]


def layout_free(key: VariantKey) -> LayoutFree:
    """What a key says besides its tensors' layouts: op, arguments, shapes, dtypes, devices."""
    return key.op, key.template, tuple((s.shape, s.dtype, s.device) for s in key.tensors)


def strides(key: VariantKey) -> Strides:
    """The strides a traced call is matched on (offsets and alignment are checked when it runs)."""
    return tuple(s.stride for s in key.tensors)


def compiled_variant_records(
    records: Iterable[VariantRecord], traced: TracedCounts, policy: SamplePolicy,
) -> list[VariantRecord]:
    """A record per traced layout that eager never ran, derived from the eager record of the same
    call; traced calls with no such record (other arguments or shapes) get none."""
    sources: dict[LayoutFree, VariantRecord] = {}
    eager_layouts: set[tuple[LayoutFree, Strides]] = set()
    for record in records:
        if record.kind != "aten":
            continue
        eager_layouts.add((layout_free(record.key), strides(record.key)))
        if record.optimisable and record.samples and record.eager_call is not None and not record.mutated_inputs:
            sources.setdefault(layout_free(record.key), record)
    calls: collections.Counter[tuple[LayoutFree, Strides]] = collections.Counter()
    keys: dict[tuple[LayoutFree, Strides], VariantKey] = {}
    for key, count in traced.items():  # keys that differ in storage offset only are one layout
        variant = (layout_free(key), strides(key))
        calls[variant] += count
        keys.setdefault(variant, key)
    derived = []
    for variant, count in calls.most_common():
        source = sources.get(variant[0])
        if source is None or variant in eager_layouts or not _fits(keys[variant].tensors):
            continue
        made = _derive(source, keys[variant], count, policy)
        if made is not None:
            derived.append(made)
    return derived


def _fits(signatures: Sequence[TensorSignature]) -> bool:
    """Whether each layout can hold distinct values in every element (no overlapping strides)."""
    return all(spanned_elements(s.shape, s.stride) >= math.prod(s.shape) for s in signatures)


def relaid(values: torch.Tensor, signature: TensorSignature, device: torch.device) -> torch.Tensor:
    """``values`` copied into fresh memory on ``device`` laid out as ``signature`` says."""
    flat = torch.empty(signature.storage_offset + spanned_elements(signature.shape, signature.stride),
                       dtype=values.dtype, device=device)
    view = flat.as_strided(signature.shape, signature.stride, signature.storage_offset)
    view.copy_(values)
    return view


def _derive(source: VariantRecord, key: VariantKey, count: int, policy: SamplePolicy) -> VariantRecord | None:
    """The record of ``key``'s layout, its samples re-laid from ``source``'s; None where eager fails on it."""
    assert source.eager_call is not None
    first = source.samples[0]
    device = first.inputs[0].device if first.inputs else torch.device("cpu")
    try:
        inputs = [relaid(t, s, device) for t, s in zip(first.inputs, key.tensors, strict=True)]
        outputs = _run(source, inputs)
    except Exception:  # eager refuses this layout: the compiled graph's call stays inductor's
        return None
    record = VariantRecord(
        key=VariantKey(key.op, key.template, tuple(tensor_signature(t) for t in inputs)),
        kind="aten", op=source.op, outputs=[tensor_spec(t) for t in outputs], eager_call=source.eager_call,
        eager_state=source.eager_state, call_count=count, module_paths=list(source.module_paths),
        vendor_op=source.vendor_op, degenerate=source.degenerate, compiled_only=True,
    )
    policy.add(record, CallSample([clone_exact(t) for t in inputs], [clone_exact(t) for t in outputs]))
    for extra in source.samples[1:]:
        if not policy.wants_extra(record):
            break
        extra_inputs = [relaid(t, s, device) for t, s in zip(extra.inputs, key.tensors, strict=True)]
        policy.add(record, CallSample(extra.inputs, [cpu_copy(t) for t in _run(source, extra_inputs)]))
    return record


def _run(source: VariantRecord, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    assert source.eager_call is not None
    out: Any = source.eager_call(inputs)()
    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]

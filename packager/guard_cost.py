"""What the guarded dispatch costs per call, measured on a synthetic call of a card's signature.

A kernel is packaged only if its speedup survives this cost (see :func:`packager.format.build_cast`).
The measurement covers everything the runtime adds to a hit: entering a Python kernel from the
dispatcher (aten cards; measured on a probe op whose implementation returns at once, which
over- rather than under-states it), matching the call, allocating outputs and the kernel's
workspace (when it exports ``kf_workspace_bytes``) and filling the kernel's descriptors. It runs
on the CPU whatever the card's device: the guard is host code. An aten card that the eager guard's
native front serves is charged what a hit through that front costs, measured the same way; a
module card that the module guard's native front serves (positional tensor arguments only), what
a hit through that front costs.
"""

from __future__ import annotations

import json
import statistics
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from packager.aten_dispatch import UnsupportedOp, python_only, resolve_overload, result_shape
from packager.guard import CallMatcher
from packager.inplace import aliased_outputs
from packager.launcher import CallDescriptors, spec_layout
from packager.module_state import ModuleKeyReader
from packager.native.eager import native_eager_guard
from packager.native.module import DECLINED, native_module_guard
from packager.synthetic import allocated_outputs, allocated_workspace_bytes, synthetic_call
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, VariantKey, decode_call

_PROBE_LIBRARY: torch.library.Library | None = None


def median_us(fn: Callable[[], object], *, repeats: int = 7, number: int = 200) -> float:
    """Median over ``repeats`` batches of the per-call time of ``fn`` in microseconds."""
    fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(samples)


def dispatch_entry_us() -> float:
    """Cost of calling an op whose kernel is a Python function that returns at once."""
    global _PROBE_LIBRARY
    if _PROBE_LIBRARY is None:
        library = torch.library.Library("kforge_probe", "FRAGMENT")
        library.define("probe(Tensor x) -> Tensor")
        library.impl("probe", lambda keyset, x: x, "CPU", with_keyset=True)
        _PROBE_LIBRARY = library
    probe = torch.ops.kforge_probe.probe.default
    x = torch.empty(1)
    with torch.inference_mode():
        return median_us(lambda: probe(x))


def synthetic_module(kwargs: Mapping[str, object]) -> torch.nn.Module:
    """A module holding a module call's state tensors and attributes, as many slots as the real one."""
    module = torch.nn.Module()
    state = cast("list[tuple[str, torch.Tensor]]", kwargs.get(STATE_KWARG) or [])
    for i, (_, tensor) in enumerate(state):
        module.register_buffer(f"state_{i}", tensor)
    for name, value in cast("list[tuple[str, object]]", kwargs.get(ATTRIBUTES_KWARG) or []):
        if name not in vars(module):
            setattr(module, name, value)
    return module


def native_guard_cost_us(card: Mapping[str, Any], workspace_bytes: int = 0, *, calls: int = 200) -> float | None:
    """Per-call cost of an aten card's hit through the eager guard's native front, kernel excluded:
    the call decided on a copy of its own dispatcher stack, outputs (and workspace) allocated,
    descriptors filled and a kf_launch that does nothing called, timed in C++ (median of 7 runs of
    ``calls``). An in-place card's output is its input, as in the runtime. None for a module card, a
    call the front never serves (one naming a device), or where the front cannot be built here or
    cannot learn the card's call: the runtime's Python override then serves it, and
    :func:`guard_cost_us` charges that path."""
    if card.get("kind") == "module" or python_only(json.loads(VariantKey.from_json(card["key"]).template)):
        return None
    guard = native_eager_guard()
    if guard is None:
        return None
    try:
        overload = resolve_overload(str(card["op"]))
        result = result_shape(overload)
        aliased = aliased_outputs(card, overload)
    except (UnsupportedOp, ValueError):
        return None
    front = guard.front(overload, "CPU", "CPU", result)
    if front is None:
        return None
    key, tensors = synthetic_call(VariantKey.from_json(card["key"]))
    try:  # the front only measures: it is never installed, and freed afterwards
        index = front.add_call(key, json.loads(key.template), [spec_layout(o) for o in allocated_outputs(card)],
                               "cpu", guard.noop_launch_address, allocated_workspace_bytes(card, workspace_bytes),
                               aliased)
        if index is None:
            return None
        with torch.inference_mode():
            samples = [front.time_hit_us(index, tensors, calls) for _ in range(7)]
    finally:
        front.release()
    measured = [s for s in samples if s is not None]
    return statistics.median(measured) if len(measured) == len(samples) else None


def native_module_cost_us(card: Mapping[str, Any], workspace_bytes: int = 0) -> float | None:
    """Per-call cost of a module card's hit through the module guard's native front, kernel
    excluded: the override's own lines before it (the module's weak reference, the compile check),
    the module compared with its snapshot, the tensors checked, outputs (and workspace) allocated,
    descriptors filled and a kf_launch that does nothing called, on a synthetic module holding the
    card's state. None for an aten card, a call the front cannot serve (keywords, or arguments
    other than tensors), or where either native library cannot be built here."""
    if card.get("kind") != "module":
        return None
    guard, eager = native_module_guard(), native_eager_guard()
    if guard is None or eager is None:
        return None
    key, tensors = synthetic_call(VariantKey.from_json(card["key"]))
    args, kwargs = decode_call(json.loads(key.template), tensors)
    if set(kwargs) - {STATE_KWARG, ATTRIBUTES_KWARG}:
        return None
    front = guard.front()
    index = front.add_call(key.tensors, [spec_layout(o) for o in allocated_outputs(card)], "cpu",
                           eager.noop_launch_address, allocated_workspace_bytes(card, workspace_bytes))
    module, call = synthetic_module(kwargs), tuple(args)
    if index is None or not front.arm_index(index, module, call, tensors):
        return None
    module_ref = weakref.ref(module)

    def guarded_hit() -> object:  # as ModuleOverride.forward reaches the front
        held = module_ref()
        if torch.compiler.is_compiling():
            return DECLINED
        return front.hit(held, call)

    with torch.inference_mode():
        if guarded_hit() is DECLINED:
            return None
        return median_us(guarded_hit)


def guard_cost_us(card: Mapping[str, Any], workspace_bytes: int = 0) -> float:
    """Per-call cost of the runtime's path for ``card`` (a parsed OperatorCard), kernel excluded.

    An aten card that the eager guard's native front serves costs what that front costs
    (:func:`native_guard_cost_us`), a module card that the module guard's front serves what that
    front costs (:func:`native_module_cost_us`); otherwise the Python path is measured, as follows.

    Module cards add reading the module's side of the key (:class:`ModuleKeyReader`), measured
    on a synthetic module with the card's tensors and attributes; aten cards add entering the
    kernel from the dispatcher. ``workspace_bytes`` is what the kernel's ``kf_workspace_bytes``
    returns (:attr:`packager.abi.KernelLibrary.workspace_bytes`): a kernel with a workspace costs
    one more allocation per call. The outputs and workspace of a card for another device are
    allocated as one-element CPU tensors: that device's caching allocator costs the same whatever
    the size, while a CPU allocation of hundreds of MiB maps fresh pages on every call.
    """
    native = native_guard_cost_us(card, workspace_bytes)
    if native is None:
        native = native_module_cost_us(card, workspace_bytes)
    if native is not None:
        return native
    key, tensors = synthetic_call(VariantKey.from_json(card["key"]))
    args, kwargs = decode_call(json.loads(key.template), tensors)
    is_module = card.get("kind") == "module"
    matcher = CallMatcher(key, remembered=(ATTRIBUTES_KWARG,) if is_module else ())
    descriptors = CallDescriptors(card["inputs"], card["outputs"], workspace_bytes)
    allocation = CallDescriptors(card["inputs"], allocated_outputs(card),
                                 allocated_workspace_bytes(card, workspace_bytes))
    device = torch.device("cpu")

    def guarded_path() -> None:
        found: list[torch.Tensor] = []
        if matcher.miss_reason(args, kwargs, found) is not None:
            raise AssertionError("the synthetic call does not match its own card")
        descriptors.prepare(found, allocation.allocate_outputs(device, found), allocation.allocate_workspace(device))

    with torch.inference_mode():
        cost = median_us(guarded_path)
        if not is_module:
            return cost + dispatch_entry_us()
        module, reader = synthetic_module(kwargs), ModuleKeyReader()
        call_kwargs = {name: value for name, value in kwargs.items() if name not in (STATE_KWARG, ATTRIBUTES_KWARG)}
        return cost + median_us(lambda: reader.call_kwargs(module, call_kwargs))

"""What the guarded dispatch costs per call, measured on a synthetic call of a card's signature.

A kernel is packaged only if its speedup survives this cost (see :func:`packager.format.build_cast`).
The measurement covers everything the runtime adds to a hit: entering a Python kernel from the
dispatcher (aten cards; measured on a probe op whose implementation returns at once, which
over- rather than under-states it), matching the call, allocating outputs and the kernel's
workspace (when it exports ``kf_workspace_bytes``) and filling the kernel's descriptors. It runs
on the CPU whatever the card's device: the guard is host code.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from packager.guard import CallMatcher
from packager.launcher import CallDescriptors
from packager.module_state import ModuleKeyReader
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, TensorSignature, VariantKey, decode_call, dtype_from_name

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


def synthetic_tensor(signature: TensorSignature, device: str = "cpu") -> torch.Tensor:
    """A tensor on ``device`` with the signature's shape, strides, dtype and storage offset (alignment as it falls)."""
    dtype = dtype_from_name(signature.dtype)
    extent = 0 if 0 in signature.shape else 1 + sum(
        (size - 1) * abs(step) for size, step in zip(signature.shape, signature.stride, strict=True)
    )
    storage = torch.empty(signature.storage_offset + extent, dtype=dtype, device=device)
    return storage.as_strided(signature.shape, signature.stride, signature.storage_offset)


def _synthetic_call(key: VariantKey) -> tuple[VariantKey, list[torch.Tensor]]:
    """CPU tensors for the key's signature, and the key adjusted to their device and alignment."""
    tensors = [synthetic_tensor(t) for t in key.tensors]
    signatures = tuple(
        t._replace(device="cpu", aligned16=x.data_ptr() % 16 == 0) for t, x in zip(key.tensors, tensors, strict=True)
    )
    return key._replace(tensors=signatures), tensors


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


def allocated_outputs(card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The outputs the measurement allocates: the card's own, or one-element stand-ins for another device."""
    if card.get("device", "cpu") == "cpu":
        return [dict(out) for out in card["outputs"]]
    return [{**out, "shape": [1] * len(out["shape"]), "stride": [1] * len(out["shape"])} for out in card["outputs"]]


def allocated_workspace_bytes(card: Mapping[str, Any], workspace_bytes: int) -> int:
    """The workspace the measurement allocates: the kernel's own, or a one-byte stand-in for another device."""
    if workspace_bytes <= 0 or card.get("device", "cpu") == "cpu":
        return max(workspace_bytes, 0)
    return 1


def guard_cost_us(card: Mapping[str, Any], workspace_bytes: int = 0) -> float:
    """Per-call cost of the runtime's path for ``card`` (a parsed OperatorCard), kernel excluded.

    Module cards add reading the module's side of the key (:class:`ModuleKeyReader`), measured
    on a synthetic module with the card's tensors and attributes; aten cards add entering the
    kernel from the dispatcher. ``workspace_bytes`` is what the kernel's ``kf_workspace_bytes``
    returns (:attr:`packager.abi.KernelLibrary.workspace_bytes`): a kernel with a workspace costs
    one more allocation per call. The outputs and workspace of a card for another device are
    allocated as one-element CPU tensors: that device's caching allocator costs the same whatever
    the size, while a CPU allocation of hundreds of MiB maps fresh pages on every call.
    """
    key, tensors = _synthetic_call(VariantKey.from_json(card["key"]))
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

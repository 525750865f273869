"""Guarded aten overrides: a kernel replaces one overload at one dispatch key, for exact matches only.

The override is registered with ``torch.library.Library("aten", "IMPL")`` at ``CPU`` or ``CUDA``
(below autograd, so gradients still use the op's own derivative formula). It matches the live
call against the op's kernels (:class:`packager.kernel.KernelSet`); on an exact hit the kernel
runs, on a miss or a kernel error the original kernel (``torch.library.get_kernel``, taken
before the override was registered) runs with the same dispatch key set. torch.compile with inductor generates its own
code for aten ops and so bypasses these overrides (graphs run by the ``eager`` and ``aot_eager``
backends call them); compiled graphs reach the kernels through :mod:`packager.compiled`.

A Python number in a tensor slot (``x + 1e-5``) reaches the override as a number: a miss hands
it back to the original kernel as the tensor it expects (:mod:`packager.wrapped_numbers`).

Where the runtime's native library can be built, a front in C++ (:mod:`packager.native.eager`)
is installed over the Python override: it serves exact hits and clear misses itself, and hands
the Python override only the calls it does not judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from packager.device_args import OTHER_DEVICE, names_a_device, names_another_device
from packager.guard import REAL_TENSOR_TYPES
from packager.inplace import SHARED_MEMORY, shares_memory
from packager.kernel import KernelSet, LoadedKernel, inside_kernel
from packager.native.eager import EagerFront, learn_all, native_eager_guard
from packager.wrapped_numbers import TensorSlots

DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


class UnsupportedOp(ValueError):
    """An aten card whose op this runtime cannot override."""


def resolve_overload(op: str) -> torch._ops.OpOverload:
    """``aten::_softmax.default`` -> ``torch.ops.aten._softmax.default``."""
    namespace, _, qualified = op.partition("::")
    if namespace != "aten" or not qualified:
        raise UnsupportedOp(f"{op!r} is not an aten overload name")
    name, _, overload = qualified.partition(".")
    try:
        return getattr(getattr(torch.ops.aten, name), overload or "default")
    except (AttributeError, RuntimeError) as exc:
        raise UnsupportedOp(f"{op!r} is not an operator of this torch build") from exc


def result_shape(overload: torch._ops.OpOverload) -> str:
    returns = overload._schema.returns
    kinds = [str(r.type) for r in returns]
    if kinds == ["Tensor"]:
        return "single"
    if kinds == ["List[Tensor]"] or kinds == ["Tensor[]"]:
        return "list"
    if kinds and all(k == "Tensor" for k in kinds):
        return "tuple"
    raise UnsupportedOp(f"{overload.name()} returns {kinds}; only tensors can come from a kernel")


COMPOSITE = "CompositeImplicitAutograd"


def _wants_grad(args: Sequence[object], kwargs: dict[str, object]) -> bool:
    """Whether autograd must record this call: grad mode on and an input (or one in a list) requiring grad."""
    if not torch.is_grad_enabled():
        return False
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                return True
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) and v.requires_grad for v in value):
            return True
    return False


def python_only(template: Mapping[str, object]) -> bool:
    """Whether a kernel's call is one the native front never serves, so its op keeps the Python
    override alone: one naming a device (the front does not compare a device argument's index). An
    in-place call is the front's too: it writes the live tensor and returns it, and leaves a call
    whose written tensor shares memory with another to the Python override."""
    return names_a_device(template)


class AtenOverride:
    """The guarded implementation of one aten overload at one dispatch key.

    An overload implemented by decomposition (``CompositeImplicitAutograd``: ``softmax.int``,
    ``layer_norm``, ``max_pool2d``, ...) is overridden at that key instead of ``CPU``/``CUDA``: a
    backend kernel would make autograd skip the decomposition, so gradients would be lost (or a
    backward with no kernel would run). There, a call autograd must record always decomposes.
    """

    def __init__(self, op: str, backend: str, kernels: Sequence[LoadedKernel]) -> None:
        self.op = op
        self.overload = resolve_overload(op)
        self.backend_key = DISPATCH_KEYS[backend]
        self.composite = torch._C._dispatch_has_kernel_for_dispatch_key(self.overload.name(), COMPOSITE)
        self.dispatch_key = COMPOSITE if self.composite else self.backend_key
        self._result = result_shape(self.overload)
        self._kernels = KernelSet(kernels)
        # ``to(..., device=...)``: the key records the device's type alone (packager.device_args)
        self._checks_devices = any(names_a_device(k.template) for k in kernels)
        self._slots = TensorSlots(self.overload)
        self._original: torch._C._SafeKernelFunction | None = None
        self._library: torch.library.Library | None = None
        self.front: EagerFront | None = None  # the native front, while installed

    @property
    def impl_name(self) -> str:
        schema = self.overload._schema
        base = schema.name.partition("::")[2]
        return f"{base}.{schema.overload_name}" if schema.overload_name else base

    def install(self) -> None:
        """Register the override, and the native front over it where it can learn every kernel;
        the kernel they replace stays reachable for misses."""
        # For a decomposed op the backend's computed kernel is the decomposition itself.
        self._original = torch.library.get_kernel(self.overload, self.backend_key)
        front = self._native_front()  # made before the override, it keeps the same original
        library = torch.library.Library("aten", "IMPL")
        library.impl(self.impl_name, self, self.dispatch_key, with_keyset=True)
        self._library = library
        self.front = front if front is not None and front.install() else None
        if front is not None and self.front is None:
            front.release()

    def _native_front(self) -> EagerFront | None:
        if any(python_only(k.template) for k in self._kernels.kernels):
            return None
        guard = native_eager_guard() if self._kernels.kernels else None
        front = guard.front(self.overload, self.backend_key, self.dispatch_key, self._result) if guard else None
        if front is not None and not learn_all(front, self._kernels.kernels):
            front.release()
            return None
        return front

    def uninstall(self) -> None:
        if self.front is not None:
            self.front.uninstall()
            self.front = None
        if self._library is not None:
            self._library._destroy()
            self._library = None

    def __call__(self, keyset: torch._C.DispatchKeySet, *args: object, **kwargs: object) -> object:
        if not (inside_kernel() or (self.composite and self._decomposes(args, kwargs))):
            found = self._kernels.match(args, kwargs)
            reason = self._fallback_reason(*found, args, kwargs) if found is not None else ""
            if found is not None and reason:
                found[0].stats.fallback(reason)
                found = None
            if found is not None:
                kernel, tensors = found
                outputs = kernel.try_launch(tensors)
                if outputs is not None:
                    return self._shape(outputs)
                # the kernel failed and was counted; eager serves this call
        assert self._original is not None
        try:
            return self._original.call_boxed(keyset, *args, **kwargs)
        except RuntimeError:
            # A Python number in a tensor slot fails the boxed call before any kernel runs.
            if not self._slots.holds_number(args, kwargs):
                raise
        return self._slots.call_original(self._original, keyset, args, kwargs)

    def _fallback_reason(self, kernel: LoadedKernel, tensors: Sequence[torch.Tensor], args: Sequence[object],
                         kwargs: dict[str, object]) -> str:
        """Why a call that matches ``kernel`` still goes to eager; "" where the kernel serves it."""
        if kernel.mutated_inputs and shares_memory(tensors, kernel.mutated_inputs):
            return SHARED_MEMORY
        if self._checks_devices and tensors and names_another_device(args, kwargs, tensors[0].device):
            return OTHER_DEVICE
        return ""

    @staticmethod
    def _decomposes(args: Sequence[object], kwargs: dict[str, object]) -> bool:
        """A decomposed op's call that never reaches a kernel: autograd must record it, or its
        tensors are the fake ones of a trace (only decomposed ops see those here)."""
        first = args[0] if args else None
        if isinstance(first, torch.Tensor) and type(first) not in REAL_TENSOR_TYPES:
            return True
        return _wants_grad(args, kwargs)

    def _shape(self, outputs: list[torch.Tensor]) -> object:
        return shape_result(self._result, outputs)


def shape_result(kind: str, outputs: list[torch.Tensor]) -> object:
    """A kernel's outputs as the overload returns them (see :func:`result_shape`)."""
    if kind == "single":
        return outputs[0]
    return outputs if kind == "list" else tuple(outputs)

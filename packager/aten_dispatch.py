"""Guarded aten overrides: a kernel replaces one overload at one dispatch key, for exact matches only.

The override is registered with ``torch.library.Library("aten", "IMPL")`` at ``CPU`` or ``CUDA``
(below autograd, so gradients still use the op's own derivative formula). It matches the live
call against each of the op's kernels; on an exact hit the kernel runs, on a miss or a kernel
error the original kernel (``torch.library.get_kernel``, taken before the override was
registered) runs with the same dispatch key set. torch.compile with inductor generates its own
code for aten ops and so bypasses these overrides; graphs run by the ``eager`` and
``aot_eager`` backends call them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from packager.guard import SHAPE
from packager.kernel import LoadedKernel, inside_kernel

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


def _result_shape(overload: torch._ops.OpOverload) -> str:
    returns = overload._schema.returns
    kinds = [str(r.type) for r in returns]
    if kinds == ["Tensor"]:
        return "single"
    if kinds == ["List[Tensor]"] or kinds == ["Tensor[]"]:
        return "list"
    if kinds and all(k == "Tensor" for k in kinds):
        return "tuple"
    raise UnsupportedOp(f"{overload.name()} returns {kinds}; only tensors can come from a kernel")


def _index_by_first_shape(kernels: Sequence[LoadedKernel]) -> dict[torch.Size, tuple[LoadedKernel, ...]] | None:
    """Kernels by the shape of their first argument, or None when one of them takes no tensor there.

    Most calls an override sees are misses (other shapes of the same op); a dictionary lookup
    turns them away without running each kernel's matcher.
    """
    index: dict[torch.Size, tuple[LoadedKernel, ...]] = {}
    for kernel in kernels:
        shape = kernel.matcher.first_shape
        if shape is None:
            return None
        index[shape] = (*index.get(shape, ()), kernel)
    return index


class AtenOverride:
    """The guarded implementation of one aten overload at one dispatch key."""

    def __init__(self, op: str, backend: str, kernels: Sequence[LoadedKernel]) -> None:
        self.op = op
        self.dispatch_key = DISPATCH_KEYS[backend]
        self.overload = resolve_overload(op)
        self._result = _result_shape(self.overload)
        self._kernels = tuple(kernels)
        self._by_first_shape = _index_by_first_shape(self._kernels)
        self._original: torch._C._SafeKernelFunction | None = None
        self._library: torch.library.Library | None = None

    @property
    def impl_name(self) -> str:
        schema = self.overload._schema
        base = schema.name.partition("::")[2]
        return f"{base}.{schema.overload_name}" if schema.overload_name else base

    def install(self) -> None:
        """Register the override; the kernel it replaces stays reachable for misses."""
        self._original = torch.library.get_kernel(self.overload, self.dispatch_key)
        library = torch.library.Library("aten", "IMPL")
        library.impl(self.impl_name, self, self.dispatch_key, with_keyset=True)
        self._library = library

    def uninstall(self) -> None:
        if self._library is not None:
            self._library._destroy()
            self._library = None

    def __call__(self, keyset: torch._C.DispatchKeySet, *args: object, **kwargs: object) -> object:
        if not inside_kernel():
            candidates = self._candidates(args)
            misses: dict[int, str] = {}
            for kernel in candidates:
                tensors: list[torch.Tensor] = []
                reason = kernel.matcher.miss_reason(args, kwargs, tensors)
                if reason is not None:
                    misses[id(kernel)] = reason
                    continue
                outputs = kernel.try_launch(tensors)
                if outputs is not None:
                    return self._shape(outputs)
                break  # the kernel failed and was counted; eager serves this call
            else:
                for kernel in self._kernels:  # those not tried differ in the first argument's shape
                    kernel.stats.fallback(misses.get(id(kernel), SHAPE))
        assert self._original is not None
        return self._original.call_boxed(keyset, *args, **kwargs)

    def _candidates(self, args: Sequence[object]) -> Sequence[LoadedKernel]:
        """The kernels whose first argument has the live call's first argument's shape."""
        if self._by_first_shape is None or not args or not isinstance(args[0], torch.Tensor):
            return self._kernels
        return self._by_first_shape.get(args[0].shape, ())

    def _shape(self, outputs: list[torch.Tensor]) -> object:
        if self._result == "single":
            return outputs[0]
        return outputs if self._result == "list" else tuple(outputs)

"""The eager guard's native front (``eager_guard.cpp``): an aten overload's kernels matched in C++.

:class:`packager.aten_dispatch.AtenOverride` prepares a front before it registers its Python
override (the front keeps the kernel it replaces as the original), teaches it each kernel's call
by boxing the card's own call once on meta tensors through a learner op that has the overload's
schema, and installs it on top of the Python override once that is registered. If any kernel's
call holds what the front cannot compare, no front is installed and the Python override serves
the op alone, as before.
"""

from __future__ import annotations

import ctypes
import functools
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from packager.guard import MISS_REASONS
from packager.launcher import Layout
from packager.native.build import NativeBuildError, load_once
from packager.native.graph import card_words
from packager.stats import KERNEL_ERROR, Counts
from packager.synthetic import synthetic_tensor
from packager.variant import VariantKey, decode_call

if TYPE_CHECKING:
    from packager.kernel import LoadedKernel

ABI_VERSION = 2
RESULT_KINDS = {"single": 0, "tuple": 1, "list": 2}
# eager_guard.cpp's counters after the hits, in kf::Miss order, then kernel errors.
_COUNTED = ("shape", "dtype", "stride", "device", "storage_offset", "alignment", "args", KERNEL_ERROR)
assert set(_COUNTED[:-1]) == set(MISS_REASONS)
_LEARNED = "kforge_cast: arguments learned"

_LEARNERS = torch.library.Library("kforge_cast", "FRAGMENT")
# A TensorImpl's address as the capsule torch._C._wrap_tensor_impl takes.
_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))
_LEARNER_NAMES: dict[str, str] = {}
_LEARNERS_LOCK = threading.Lock()


class NativeEagerGuard:
    """The loaded library."""

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        lib.kfe_abi_version.restype = ctypes.c_int32
        if (version := lib.kfe_abi_version()) != ABI_VERSION:
            raise NativeBuildError(f"{path.name} speaks version {version}, this runtime {ABI_VERSION}")
        lib.kfe_has_cuda.restype = ctypes.c_int32
        self.has_cuda = bool(lib.kfe_has_cuda())
        lib.kfe_register_learner.restype = ctypes.c_int32
        lib.kfe_register_learner.argtypes = [ctypes.c_char_p]
        lib.kfe_front_new.restype = ctypes.c_int64
        lib.kfe_front_new.argtypes = [ctypes.c_char_p] * 4 + [ctypes.c_int32]
        lib.kfe_add_kernel.restype = ctypes.c_int32
        words = ctypes.POINTER(ctypes.c_int64)
        lib.kfe_add_kernel.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, words,
                                       ctypes.c_int32, words, ctypes.c_int64, words, ctypes.POINTER(ctypes.c_int32)]
        lib.kfe_install.restype = ctypes.c_int32
        lib.kfe_install.argtypes = [ctypes.c_int64]
        lib.kfe_uninstall.argtypes = [ctypes.c_int64]
        lib.kfe_release.argtypes = [ctypes.c_int64]
        lib.kfe_counts.restype = ctypes.c_int32
        lib.kfe_counts.argtypes = [ctypes.c_int64, ctypes.c_int32, words]
        lib.kfe_noop_launch.restype = ctypes.c_void_p
        lib.kfe_time_hit.restype = ctypes.c_double
        lib.kfe_time_hit.argtypes = [ctypes.c_int64, ctypes.c_int32, words, ctypes.c_int32, ctypes.c_int32]
        lib.kfe_wrapped_number.restype = ctypes.c_void_p
        lib.kfe_wrapped_number.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.c_double]
        self._lib = lib
        self.noop_launch_address = int(lib.kfe_noop_launch())  # a kf_launch that does nothing

    def learner(self, overload: torch._ops.OpOverload) -> str | None:
        """The name of ``overload``'s learner op (defined once per process), or None if its schema
        cannot be copied."""
        name = overload.name()
        with _LEARNERS_LOCK:
            if name not in _LEARNER_NAMES:
                learner = "learn_" + re.sub(r"\W", "_", name)
                schema = str(overload._schema)
                prefix = overload._schema.name + (f".{overload._schema.overload_name}"
                                                  if overload._schema.overload_name else "")
                try:
                    if not schema.startswith(prefix):
                        raise ValueError(schema)
                    _LEARNERS.define(learner + schema[len(prefix):])
                    if self._lib.kfe_register_learner(learner.encode()) != 0:
                        raise RuntimeError(learner)
                except (RuntimeError, ValueError):
                    learner = ""
                _LEARNER_NAMES[name] = learner
            return _LEARNER_NAMES[name] or None

    def wrapped_number(self, value: complex) -> torch.Tensor | None:
        """``value`` as the wrapped number the Python argument parser passes for it in a Tensor slot;
        None for a complex number or an int beyond int64 (those calls keep to the Python override)."""
        if isinstance(value, bool):
            kind, integer, real = 2, int(value), 0.0
        elif isinstance(value, int) and -(2**63) <= value < 2**63:
            kind, integer, real = 1, value, 0.0
        elif isinstance(value, float):
            kind, integer, real = 0, 0, value
        else:
            return None
        address = self._lib.kfe_wrapped_number(kind, integer, real)
        if not address:
            return None
        tensor: torch.Tensor = torch._C._wrap_tensor_impl(  # type: ignore[attr-defined]  # missing from the stubs
            _capsule(address, None, None))
        return tensor

    def front(self, overload: torch._ops.OpOverload, backend_key: str, dispatch_key: str,
              result: str) -> EagerFront | None:
        """A front holding the kernel ``backend_key`` runs now as the original (make it before the
        Python override is registered)."""
        schema = overload._schema
        front = int(self._lib.kfe_front_new(schema.name.encode(), schema.overload_name.encode(), backend_key.encode(),
                                            dispatch_key.encode(), RESULT_KINDS[result]))
        return EagerFront(self, front, overload) if front >= 0 else None


class EagerFront:
    """One overload's front: its kernels, learned, and whether it is installed."""

    def __init__(self, guard: NativeEagerGuard, front: int, overload: torch._ops.OpOverload) -> None:
        self._guard = guard
        self._lib = guard._lib
        self._front = front
        self._overload = overload
        self._learner = guard.learner(overload)
        self.learned = self._learner is not None
        self.kernels: list[tuple[LoadedKernel, int]] = []

    def add(self, kernel: LoadedKernel) -> bool:
        """Teach the front ``kernel``'s call; False when it cannot be learned (the front is then off)."""
        descriptors = kernel.launcher.descriptors
        index = self.add_call(kernel.key, kernel.template, kernel.output_layouts, kernel.output_device_type,
                              kernel.launcher.library.launch_address, descriptors.workspace_bytes, descriptors.aliased)
        if index is None:
            return False
        self.kernels.append((kernel, index))
        return True

    def add_call(self, key: VariantKey, template: Mapping[str, Any], output_layouts: Sequence[Layout],
                 device_type: str, launch_address: int, workspace_bytes: int,
                 aliased: Mapping[int, int] | None = None) -> int | None:
        """Learn the call of ``key`` (its ``template`` decoded) served by the kf_launch at ``launch_address``;
        the kernel's index in the front, or None when the call cannot be learned (the front is then off).
        ``aliased`` maps an output to the input an in-place op writes and returns as it."""
        if not self.learned or (device_type == "cuda" and not self._guard.has_cuda):
            self.learned = False
            return None
        tensors = [synthetic_tensor(signature, device="meta") for signature in key.tensors]
        args, kwargs = decode_call(template, tensors)
        try:
            args, kwargs = self._wrap_numbers(args, kwargs)
        except ValueError:
            self.learned = False
            return None
        learner = getattr(torch.ops.kforge_cast, str(self._learner)).default
        try:
            with torch._C._AutoDispatchBelowADInplaceOrView():
                learner(*args, **kwargs)
        except RuntimeError as exc:
            if _LEARNED not in str(exc):
                self.learned = False
                return None
        try:
            input_words, output_words = card_words(key.tensors, output_layouts)
        except ValueError:
            self.learned = False
            return None
        ids = (ctypes.c_int64 * max(len(tensors), 1))(*(t._cdata for t in tensors))
        same = (ctypes.c_int32 * max(len(output_layouts), 1))(
            *((aliased or {}).get(j, -1) for j in range(len(output_layouts))))
        index = int(self._lib.kfe_add_kernel(self._front, launch_address, int(device_type == "cuda"), len(tensors),
                                             input_words, len(output_layouts), output_words, workspace_bytes, ids,
                                             same))
        if index < 0:
            self.learned = False
            return None
        return index

    def _wrap_numbers(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The call with each Python number in a Tensor slot made the wrapped number the dispatcher
        sees there; ValueError where one cannot be made."""
        slots = {a.name: i for i, a in enumerate(self._overload._schema.arguments)
                 if isinstance(a.type, torch.TensorType)}

        def wrapped(value: Any) -> Any:
            if isinstance(value, torch.Tensor) or not isinstance(value, (bool, int, float, complex)):
                return value
            number = self._guard.wrapped_number(value)
            if number is None:
                raise ValueError(f"no wrapped number for {value!r}")
            return number

        positions = set(slots.values())
        return ([wrapped(v) if i in positions else v for i, v in enumerate(args)],
                {name: wrapped(v) if name in slots else v for name, v in kwargs.items()})

    def time_hit_us(self, index: int, tensors: Sequence[torch.Tensor], calls: int) -> float | None:
        """Mean µs of one hit of kernel ``index`` on ``tensors`` (the card's, in key order), measured
        in C++ over ``calls`` calls; None when they do not hit."""
        impls = (ctypes.c_int64 * max(len(tensors), 1))(*(t._cdata for t in tensors))
        spent = float(self._lib.kfe_time_hit(self._front, index, impls, len(tensors), calls))
        return spent if spent >= 0 else None

    def install(self) -> bool:
        """Register over the Python override; its kernels' stats then count the front's calls too."""
        if not self.learned or self._lib.kfe_install(self._front) != 0:
            return False
        for kernel, index in self.kernels:
            kernel.stats.add_counter(functools.partial(self.counts, index))
        return True

    def uninstall(self) -> None:
        self._lib.kfe_uninstall(self._front)

    def release(self) -> None:
        """Free a front that was never installed (installed fronts keep their counters)."""
        self._lib.kfe_release(self._front)

    def counts(self, index: int) -> Counts:
        values = (ctypes.c_int64 * (1 + len(_COUNTED)))()
        self._lib.kfe_counts(self._front, index, values)
        return int(values[0]), {reason: int(n) for reason, n in zip(_COUNTED, values[1:], strict=True) if n}


def native_eager_guard() -> NativeEagerGuard | None:
    """The library, built on first use; None where it cannot be had (the Python override serves alone)."""
    return load_once("eager_guard", NativeEagerGuard, "the eager guard")


def learn_all(front: EagerFront, kernels: Sequence[LoadedKernel]) -> bool:
    """Teach ``front`` every kernel; False as soon as one cannot be learned."""
    return all(front.add(kernel) for kernel in kernels)

"""The module guard's native front (``module_guard.cpp``): a module card's eager hit with no Python per call.

:class:`packager.module_dispatch.ModuleOverride` gives each module instance a front holding its
eager kernels. After the Python guard matches a call and the kernel runs, the override arms the
front with that call; from then on the front serves calls like it by itself while the module
stays unchanged, and hands every other call back to the Python guard (see the C++ file for the
rules). A kernel whose layouts the front cannot hold is simply never armed. Told the kernels'
first shapes and the module class's forward, the front also turns away, from C++, every call
whose first argument no kernel takes.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from packager.guard import REAL_TENSOR_TYPES, SHAPE
from packager.launcher import Layout
from packager.native.build import NativeBuildError, load_once
from packager.native.graph import card_words
from packager.stats import Counts
from packager.variant import TensorSignature

if TYPE_CHECKING:
    from packager.kernel import LoadedKernel

ABI_VERSION = 1
_MODULE_NAME = "kf_module_guard"
#: What :meth:`ModuleFront.hit` returns for a call the Python guard must decide.
DECLINED = object()


class NativeModuleGuard:
    """The loaded extension."""

    def __init__(self, path: Path) -> None:
        loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, str(path))
        spec = importlib.util.spec_from_file_location(_MODULE_NAME, path, loader=loader)
        if spec is None:
            raise NativeBuildError(f"{path} cannot be imported")
        extension: ModuleType = importlib.util.module_from_spec(spec)
        loader.exec_module(extension)
        if (version := extension.abi_version()) != ABI_VERSION:
            raise NativeBuildError(f"{path.name} speaks version {version}, this runtime {ABI_VERSION}")
        self.has_cuda = bool(extension.has_cuda())
        self._extension = extension

    def front(self, kernels: Sequence[LoadedKernel] = ()) -> ModuleFront:
        """A front for one module instance's ``kernels`` (those it cannot hold are left to Python)."""
        front = ModuleFront(self, self._extension.Front(REAL_TENSOR_TYPES, DECLINED))
        for kernel in kernels:
            index = front.add_call(kernel.key.tensors, kernel.output_layouts, kernel.output_device_type,
                                   kernel.launcher.library.launch_address,
                                   kernel.launcher.descriptors.workspace_bytes)
            if index is not None:
                front.index[kernel.card_id] = index
                kernel.stats.add_counter(functools.partial(front.counts, index))
        return front


class ModuleFront:
    """One module instance's kernels in C++."""

    def __init__(self, guard: NativeModuleGuard, front: Any) -> None:
        self._guard = guard
        self._front = front
        self.index: dict[str, int] = {}  # card id -> the kernel's index in the front
        # The one call made per hit, bound once: ``hit(module, args)`` -> outputs, or DECLINED.
        self.hit = front.hit

    def add_call(self, inputs: Sequence[TensorSignature], output_layouts: Sequence[Layout], device_type: str,
                 launch_address: int, workspace_bytes: int) -> int | None:
        """Add the kernel at ``launch_address`` for a card with these tensors and outputs; its index,
        or None where the front cannot hold it."""
        if device_type == "cuda" and not self._guard.has_cuda:
            return None
        try:
            input_words, output_words = card_words(inputs, output_layouts)
        except ValueError:
            return None
        index = int(self._front.add_kernel(launch_address, int(device_type == "cuda"), len(inputs),
                                           ctypes.addressof(input_words), len(output_layouts),
                                           ctypes.addressof(output_words), workspace_bytes))
        return index if index >= 0 else None

    def arm(self, card_id: str, module: torch.nn.Module, args: tuple[Any, ...], tensors: list[torch.Tensor]) -> bool:
        """Serve calls like ``args`` (which the kernel of ``card_id`` just ran on, with ``tensors``
        in key order) while ``module`` stays as it is now; False when the front cannot repeat such
        a call."""
        index = self.index.get(card_id)
        return index is not None and self.arm_index(index, module, args, tensors)

    def arm_index(self, index: int, module: torch.nn.Module, args: tuple[Any, ...],
                  tensors: list[torch.Tensor]) -> bool:
        """:meth:`arm` for the kernel at ``index``."""
        return bool(self._front.arm(index, module, args, tensors))

    def turn_away(self, first_shapes: Sequence[Sequence[int]], class_forward: Callable[..., Any]) -> None:
        """Run ``class_forward(module, *args)`` from C++ for calls whose first argument is a tensor
        of none of ``first_shapes`` (which must cover every kernel the module has), counting a shape
        miss for each kernel."""
        self._front.turn_away([list(shape) for shape in first_shapes], class_forward)

    def disarm(self) -> None:
        self._front.disarm()

    @property
    def armed(self) -> int:
        """How many kernels the front serves now."""
        return int(self._front.armed())

    def counts(self, index: int) -> Counts:
        hits, shape_misses = self._front.counts(index)
        return int(hits), ({SHAPE: int(shape_misses)} if shape_misses else {})


def native_module_guard() -> NativeModuleGuard | None:
    """The extension, built on first use; None where it cannot be had (the Python guard serves alone)."""
    return load_once("module_guard", NativeModuleGuard, "the module guard", python_extension=True)

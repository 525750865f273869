"""A kernel loaded for this device: its record, guard, launcher and counters."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from packager.guard import SHAPE, CallMatcher
from packager.launcher import KernelLauncher
from packager.manifest import GRAPH_MODES, KEPT, PRUNED, KernelRecord
from packager.stats import KERNEL_ERROR, KernelStats
from packager.traced_call import is_static
from packager.variant import ATTRIBUTES_KWARG, VariantKey, dtype_from_name

# Set while a kernel of this runtime runs on the current thread: a guarded op called from
# inside (say, the output allocation) goes straight to eager instead of recursing.
_ACTIVE = threading.local()


def inside_kernel() -> bool:
    return getattr(_ACTIVE, "depth", 0) > 0


@dataclass
class LoadedKernel:
    """One card's kernel, ready to be called on a matching live call."""

    record: KernelRecord
    launcher: KernelLauncher
    key: VariantKey = field(init=False)
    template: dict[str, Any] = field(init=False)
    matcher: CallMatcher = field(init=False)
    trace_matcher: CallMatcher = field(init=False)
    output_layouts: list[tuple[tuple[int, ...], tuple[int, ...], torch.dtype]] = field(init=False)
    stats: KernelStats = field(default_factory=KernelStats)

    def __post_init__(self) -> None:
        self.key = VariantKey.from_json(self.record.card["key"])
        self.template = json.loads(self.key.template)
        # A module's attributes come from ModuleKeyReader, which hands back the same list while
        # the module is unchanged: its verdict is remembered rather than checked on every call.
        remembered = (ATTRIBUTES_KWARG,) if self.record.card.get("kind") == "module" else ()
        self.matcher = CallMatcher(self.key, remembered=remembered)
        # Under torch.compile tensors are fake and have no address: storage offset and
        # alignment are checked when the compiled graph runs the kernel.
        self.trace_matcher = CallMatcher(self.key, traced=True)
        self.output_layouts = [(tuple(o["shape"]), tuple(o["stride"]), dtype_from_name(o["dtype"]))
                               for o in self.record.card["outputs"]]

    @property
    def card_id(self) -> str:
        return self.record.card_id

    @property
    def serves_eager(self) -> bool:
        """Used by ``Cast.apply``: unless the model measured end to end in eager mode ran better without it."""
        return self.record.eager.verdict != PRUNED

    @property
    def mutated_inputs(self) -> tuple[int, ...]:
        """The inputs the kernel writes in place (an in-place op's; see :mod:`packager.inplace`)."""
        return tuple(self.launcher.descriptors.aliased.values())

    @property
    def serves_compiled(self) -> bool:
        """Used in compiled graphs of some mode (see :meth:`serves_graphs`)."""
        return any(self.serves_graphs(mode) for mode in GRAPH_MODES)

    def serves_graphs(self, mode: str | None) -> bool:
        """Used in compiled graphs of ``mode`` (``compiled`` or ``cuda_graphs``) only where the model,
        compiled that way and measured end to end, ran better with it. Where the mode is not known
        (``None``), only a kernel kept in one compiled mode and pruned in none. Never an in-place
        op's: a graph op returns fresh tensors, and AOTAutograd turns in-place ops into functional
        ones before a decomposition could choose it."""
        if self.mutated_inputs:
            return False
        if mode is not None:
            return self.record.mode_verdict(mode).verdict == KEPT
        verdicts = [self.record.mode_verdict(m).verdict for m in GRAPH_MODES]
        return KEPT in verdicts and PRUNED not in verdicts

    @property
    def n_outputs(self) -> int:
        return len(self.record.card["outputs"])

    @property
    def output_device_type(self) -> str:
        return "cuda" if self.record.backend == "cuda" else "cpu"

    def try_launch(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor] | None:
        """Run the kernel on matched tensors; None (counted as kernel_error) if it reports failure."""
        device = tensors[0].device if tensors else torch.device(self.output_device_type)
        _ACTIVE.depth = getattr(_ACTIVE, "depth", 0) + 1
        try:
            status, outputs = self.launcher.run(tensors, device)
        except Exception:
            status, outputs = -1, []
        finally:
            _ACTIVE.depth -= 1
        if status != 0:
            self.stats.fallback(KERNEL_ERROR)
            return None
        self.stats.hit()
        return outputs

    def fake_outputs(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The card's outputs on the call's device (fake under tracing): what the graph op promises."""
        device = tensors[0].device if tensors else torch.device(self.output_device_type)
        return self.launcher.descriptors.allocate_outputs(device)


class KernelSet:
    """The kernels one override chooses from (an op's, or a module instance's), matched on a live call.

    When every kernel takes a tensor as its first argument they are looked up by its shape: most
    calls an override sees are misses (other shapes of the same op), and a dictionary lookup
    turns them away without running each kernel's matcher.
    """

    def __init__(self, kernels: Sequence[LoadedKernel]) -> None:
        self.kernels = tuple(kernels)
        self._by_first_shape: dict[torch.Size, tuple[LoadedKernel, ...]] | None = {}
        for kernel in self.kernels:
            shape = kernel.matcher.first_shape
            if shape is None:
                self._by_first_shape = None
                break
            self._by_first_shape[shape] = (*self._by_first_shape.get(shape, ()), kernel)

    def first_shapes(self) -> list[torch.Size] | None:
        """Every first-argument shape some kernel takes; None when a kernel's first argument is not a tensor."""
        return None if self._by_first_shape is None else list(self._by_first_shape)

    def match(self, args: Sequence[object], kwargs: Mapping[str, object]
              ) -> tuple[LoadedKernel, list[torch.Tensor]] | None:
        """The kernel whose key the call matches, with the call's tensors; None after counting each miss."""
        misses: dict[int, str] = {}
        for kernel in self._candidates(args):
            tensors: list[torch.Tensor] = []
            reason = kernel.matcher.miss_reason(args, kwargs, tensors)
            if reason is None:
                return kernel, tensors
            misses[id(kernel)] = reason
        for kernel in self.kernels:  # those not tried differ in the first argument's shape
            kernel.stats.fallback(misses.get(id(kernel), SHAPE))
        return None

    def match_traced(self, args: Sequence[object], kwargs: Mapping[str, object]
                     ) -> tuple[LoadedKernel, list[torch.Tensor]] | None:
        """The kernel a call being traced matches (fake tensors: no address checks, nothing counted)."""
        if args and isinstance(args[0], torch.Tensor) and not is_static(args[0]):
            return None
        for kernel in self._candidates(args):
            tensors: list[torch.Tensor] = []
            if kernel.trace_matcher.miss_reason(args, kwargs, tensors) is None:
                return kernel, tensors
        return None

    def _candidates(self, args: Sequence[object]) -> Sequence[LoadedKernel]:
        if self._by_first_shape is None or not args or not isinstance(args[0], torch.Tensor):
            return self.kernels
        try:
            shape = args[0].shape
        except RuntimeError:  # a nested tensor has no sizes: no card's
            return ()
        return self._by_first_shape.get(shape, ())


def card_mutates(card: Mapping[str, Any]) -> bool:
    return bool(card.get("mutated_inputs"))

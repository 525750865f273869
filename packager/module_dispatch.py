"""Guarded module replacement: a kernel runs a whole leaf module's forward for exact matches only.

``forward`` of every module instance whose qualified class name equals a card's op is replaced
by a guard on :func:`packager.variant.module_variant_key` (forward arguments plus the module's
parameters and buffers). A miss, a call that needs autograd, or a kernel error runs the
original forward. Once the Python guard has matched a call with positional arguments only,
the module's native front (:mod:`packager.native.module`) serves calls like it from C++ while
the module stays unchanged; it also turns away from C++ the calls whose first argument no kernel
takes, and hands every other call back to the Python guard.

Under torch.compile the kernel stays in the graph: at trace time the call is described in
constants (shapes, strides, dtypes, device, arguments: facts dynamo guards on anyway) and matched
outside the trace (:mod:`packager.traced_call`), so the compiled model's guards hold nothing of
the cast but the override's identity; a match emits :mod:`packager.graph_op`'s
``kforge_cast::kernel``, whose fake implementation allocates the card's outputs. What tracing
cannot see is checked when the compiled graph runs, which falls back to the original forward
there on a miss or a kernel error. Calls that miss at trace time
are not counted (the graph simply contains the original forward). Eager calls use the kernels
that serve eager mode, traced calls those that serve the compiled mode the graph is for (their
manifest verdicts): dynamo traces a module before its backend sees torch.compile's ``mode``, so
the mode comes from ``Cast.backend(model, mode=...)`` or ``Cast.compile``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import torch

from packager import graph_op
from packager.kernel import KernelSet, LoadedKernel
from packager.module_state import ModuleKeyReader
from packager.native.module import DECLINED, ModuleFront, native_module_guard
from packager.stats import AUTOGRAD
from packager.traced_call import KnownValues, describe, rebuild
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG


class KeyNames(NamedTuple):
    """The attribute and state names a module card's key lists, in key order."""

    attributes: tuple[str, ...]
    state: tuple[str, ...]

    @classmethod
    def of(cls, template: dict[str, Any]) -> KeyNames:
        def names(kwarg: str) -> tuple[str, ...]:
            encoded = template["kwargs"].get(kwarg, {"list": []})
            return tuple(item["list"][0] for item in encoded["list"])

        return cls(names(ATTRIBUTES_KWARG), names(STATE_KWARG))


# Dynamo runs these two as constants, outside the trace: what they read of the override adds
# no guard. The traced code names the override by its token (a string: torch 2.11 passes such a
# function constants only), and dynamo guards on the token it read. The override's graph mode is
# read when a graph is traced; a graph already compiled keeps the mode it was traced for (dynamo
# reuses it only for the backend that compiled it).
@torch.compiler.assume_constant_result
def _traced_plan(token: str) -> tuple[tuple[str, ...], KnownValues]:
    """The module attributes and state the override's compiled kernels' keys read that the module
    has (the trace reads them with plain ``getattr``: a guard on each value, none on its presence;
    a kernel whose key names one the module lacks cannot match), and the values the keys hold."""
    override = _override(token)
    module = override.graph_anchor()
    present = tuple(name for name in override.traced_names if module is not None and _has(module, name))
    return present, override.known_values


def _read(module: torch.nn.Module, path: str) -> Any:
    """``module``'s attribute at a dotted ``path`` (``norm.eps``)."""
    value: Any = module
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _has(module: torch.nn.Module, path: str) -> bool:
    try:
        _read(module, path)
    except AttributeError:
        return False
    return True


@torch.compiler.assume_constant_result
def _traced_choice(token: str, grad_enabled: bool,
                   described: list[Any]) -> tuple[str, int, str, tuple[int, ...]] | None:
    """The override's choice for a traced call."""
    return _override(token).choose_traced(grad_enabled, described)


def _override(token: str) -> ModuleOverride:
    owner = graph_op.registered_owner(token)
    if not isinstance(owner, ModuleOverride):
        raise RuntimeError(f"token {token!r} names no module override")
    return owner


def _needs_autograd(tensors: Sequence[torch.Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class ModuleOverride(graph_op.GraphOwner):
    """The guarded forward of one module instance."""

    def __init__(self, module: torch.nn.Module, kernels: Sequence[LoadedKernel]) -> None:
        self._module_ref = weakref.ref(module)
        self._kernels = KernelSet([k for k in kernels if k.serves_eager])
        self._graph_kernels = tuple((k, KeyNames.of(k.template)) for k in kernels if k.serves_compiled)
        # Every module attribute and state name some compiled kernel's key reads, read once per trace.
        self.traced_names = tuple(dict.fromkeys(
            name for _, names in self._graph_kernels for name in (*names.attributes, *names.state)))
        self.known_values = KnownValues.of(kernel.key for kernel, _ in self._graph_kernels)
        self._by_id = {k.card_id: k for k in kernels}
        # The compiled mode traced graphs are for (set by ``Cast.backend``); None: not known.
        self.graph_mode: str | None = None
        self._own_forward: Callable[..., Any] | None = module.__dict__.get("forward")
        self._class_forward = type(module).forward
        self._key_reader = ModuleKeyReader()
        guard = native_module_guard() if self._kernels.kernels else None
        self.front: ModuleFront | None = guard.front(self._kernels.kernels) if guard is not None else None
        first_shapes = self._kernels.first_shapes()
        if self.front is not None and first_shapes is not None and self._own_forward is None \
                and len(self.front.index) == len(self._kernels.kernels):
            self.front.turn_away(first_shapes, self._class_forward)
        super().__init__()

    def compiled_kernels(self) -> Iterable[LoadedKernel]:
        return [kernel for kernel, _ in self._graph_kernels]

    def install(self) -> None:
        module = self._module()
        module.forward = self.forward  # an instance attribute shadows the class's forward
        self.active = True

    def uninstall(self) -> None:
        self.active = False
        self._key_reader.forget()  # a graph that keeps the override must not keep the module's tensors
        if self.front is not None:
            self.front.disarm()
        module = self._module_ref()
        if module is None:
            return
        if self._own_forward is not None:
            module.forward = self._own_forward
        else:
            module.__dict__.pop("forward", None)

    def graph_anchor(self) -> torch.nn.Module | None:
        """The module: a graph that records this override runs in its forward's place, for a model
        that holds it, and its fallback calls the module's original forward."""
        return self._module_ref()

    def belongs_to(self, module: torch.nn.Module) -> bool:
        return self._module_ref() is module

    def _module(self) -> torch.nn.Module:
        module = self._module_ref()
        if module is None:
            raise RuntimeError("the module this override belongs to no longer exists")
        return module

    def original(self, *args: Any, **kwargs: Any) -> Any:
        if self._own_forward is not None:
            return self._own_forward(*args, **kwargs)
        return self._class_forward(self._module(), *args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        module = self._module()
        if torch.compiler.is_compiling():
            return self._forward_traced(module, args, kwargs)
        native = None if kwargs else self.front
        if native is not None and (served := native.hit(module, args)) is not DECLINED:
            return served
        found = self._kernels.match(args, self._key_reader.call_kwargs(module, kwargs))
        if found is None:
            return self.original(*args, **kwargs)
        kernel, tensors = found
        if _needs_autograd(tensors):
            kernel.stats.fallback(AUTOGRAD)
            return self.original(*args, **kwargs)
        outputs = kernel.try_launch(tensors)
        if outputs is None:
            return self.original(*args, **kwargs)
        if native is not None:
            native.arm(kernel.card_id, module, args, tensors)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _forward_traced(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """At trace time the call is described in constants dynamo already guards on (tensor
        layouts, argument values, and the module attributes the kernels' keys name, read with
        plain ``getattr`` as the forward itself would) and the kernel is chosen outside the trace
        (:mod:`packager.traced_call`): the graph gets no guard on this override's state, no break,
        and no per-instance recompile."""
        tensors: list[torch.Tensor] = []
        names, known = _traced_plan(self.token)
        values = [[name, _read(module, name)] for name in names]
        described = describe([list(args), [[name, kwargs[name]] for name in kwargs], values], tensors, known)
        choice = _traced_choice(self.token, torch.is_grad_enabled(), described)
        if choice is None:
            return self.original(*args, **kwargs)
        token, slot, card_id, positions = choice
        outputs = graph_op.call_chosen([tensors[i] for i in positions], token, slot, card_id)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def choose_traced(self, grad_enabled: bool, described: list[Any]) -> tuple[str, int, str, tuple[int, ...]] | None:
        """The graph op's arguments (token, native slot or -1, card id, positions of its tensors in
        the described call) for the first kernel of the graph mode the call matches; None: the original."""
        args, kwarg_pairs, value_pairs = rebuild(described)
        by_name, kwargs = dict(value_pairs), dict(kwarg_pairs)
        for kernel, names in self._graph_kernels:
            if not kernel.serves_graphs(self.graph_mode) or not by_name.keys() >= {*names.attributes, *names.state}:
                continue
            keyed = {**kwargs, ATTRIBUTES_KWARG: [[name, by_name[name]] for name in names.attributes],
                     STATE_KWARG: [[name, by_name[name]] for name in names.state]}
            found: list[Any] = []
            if kernel.trace_matcher.miss_reason(args, keyed, found) is not None:
                continue
            if grad_enabled and any(t.requires_grad for t in found):
                return None
            return (self.token, self.native_slots.get(kernel.card_id, -1), kernel.card_id,
                    tuple(t.position for t in found))
        return None

    def run_in_graph(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        def original(args: list[Any], kwargs: dict[str, Any]) -> Any:
            kwargs.pop(STATE_KWARG, None)
            kwargs.pop(ATTRIBUTES_KWARG, None)
            return self.original(*args, **kwargs)

        return graph_op.run_or_original(self._by_id[card_id], tensors, self.active, original)

    def fake_outputs(self, tensors: list[torch.Tensor], card_id: str) -> list[torch.Tensor]:
        return self._by_id[card_id].fake_outputs(tensors)

"""A module card's program called on its flat inputs, bound once to a call.

``ExportedProgram.module()`` takes the module's own ``(args, kwargs)``: each call flattens them
through the program's input spec and rebuilds its output structure through pytree code, reaches
the forward through ``GraphModule``'s wrapper around ``nn.Module.__call__``, and calls each aten
op through ``OpOverload.__call__``. On a small module that costs more than its ops
(``bench/module_reference.py``), while the card's eager time must be what the live module costs.
Here the inputs are flattened once per bound call, the forward takes them flat and returns the
flat outputs, it is reached through ``nn.Module.__call__`` alone (as the live module's is), and
each op is called through the dispatcher entry ``OpOverload.__call__`` itself calls: the same ops
on the same tensors, none of export's per-call Python around them.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

import torch
from torch.fx._pytree import tree_flatten_spec
from torch.fx.graph import _PyTreeCodeGen
from torch.utils._pytree import TreeSpec

ModuleT = TypeVar("ModuleT", bound=torch.nn.Module)


class _DispatcherCall(functools.partial):  # type: ignore[type-arg]
    """An op called straight through its C++ dispatcher entry (``OpOverload._op``), which
    ``OpOverload.__call__`` calls for any op without a Python dispatch path; a ``partial`` is
    called from C, so this leaves out that ``__call__``'s Python frame (0.5 to 1 µs a call on the
    2-core CPU of ``bench/results``). It carries a name of its own so that fx writes it into the
    generated code as a global rather than as ``torch.ops...``."""

    __name__: str


@functools.cache
def _dispatcher_call(op: torch._ops.OpOverload) -> _DispatcherCall | None:
    """The direct call of ``op`` (one per op, so the generated code names each op once), or None
    where ``OpOverload.__call__`` may route it elsewhere (an op with a Python dispatch path, as
    custom ops have) or ``torch.compile`` could not be shown the op in its place."""
    if getattr(op, "_pyobj_dispatcher", None) is not None:  # torch before 2.12 has none: __call__ is ``_op``
        return None
    try:  # torch.compile cannot trace into the C++ entry (bench/card_compile.py compiles this call)
        torch.compiler.substitute_in_graph(op._op, skip_signature_check=True)(_calling(op))
    except (TypeError, ValueError):  # already registered elsewhere: keep the op's own call
        return None
    call = _DispatcherCall(op._op)
    call.__name__ = f"{op.namespace}_{op.__name__.replace('.', '_')}"
    return call


def _calling(op: torch._ops.OpOverload) -> Callable[..., object]:
    """``op``'s call as a Python function, what ``torch.compile`` traces in place of its C++ entry."""

    def call(*args: object, **kwargs: object) -> object:
        return op(*args, **kwargs)

    return call


def with_state(module: ModuleT, state: Sequence[tuple[str, torch.Tensor]] | None) -> ModuleT:
    """A copy of ``module`` holding the card's parameters and buffers (``__state__``): the card's
    values, not the ones exported. Names the program does not load (non-persistent buffers) keep
    their exported values."""
    module = copy.deepcopy(module)
    if state:
        module.load_state_dict({str(name): tensor for name, tensor in state}, strict=False)
    return module


@dataclass(frozen=True)
class FlatProgram:
    """A lean program (:func:`~gpu_sandbox_service.harness.reference.lean_module`) on the same graph
    and state, its ``forward`` taking the flat inputs ``in_spec`` lays out and returning the flat
    outputs (the tensors of the module's output in pytree order, as capture lists them)."""

    module: torch.fx.GraphModule
    in_spec: TreeSpec

    @classmethod
    def of(cls, lean: torch.nn.Module) -> FlatProgram | None:
        """The flat form of ``lean``; None where it does not take export's ``(args, kwargs)`` pytree
        or keeps hooks (inputs that are modules), so it must be called whole."""
        if not isinstance(lean, torch.fx.GraphModule) or lean._forward_pre_hooks or lean._forward_hooks:
            return None
        codegen = lean.graph._codegen
        if not isinstance(codegen, _PyTreeCodeGen) or not _is_args_kwargs(codegen.pytree_info.in_spec):
            return None
        module = copy.deepcopy(lean)
        module.graph.set_codegen(torch.fx.CodeGen())
        for node in module.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                node.target = _dispatcher_call(node.target) or node.target
        module.recompile()
        return cls(module, codegen.pytree_info.in_spec)

    def bind(self, args: Sequence[object], kwargs: Mapping[str, object],
             state: Sequence[tuple[str, torch.Tensor]] | None) -> Callable[[], tuple[object, ...]]:
        """A zero-argument call of the program on ``(args, kwargs)`` and ``state``, flattened once.

        The call goes through ``nn.Module.__call__`` as the live module's does (``GraphModule``'s
        own wrapper aside): capture's time of the live module includes it, and calling ``forward``
        directly made the reference cheaper than the live module on small modules (``nn.ReLU`` on
        8x64 floats: 0.76 of its time on a CPU), which would understate a kernel's speedup."""
        return self.call_on(with_state(self.module, state), args, kwargs)

    def call_on(self, module: torch.fx.GraphModule, args: Sequence[object],
                kwargs: Mapping[str, object]) -> Callable[[], tuple[object, ...]]:
        """:meth:`bind` with the program's copy holding the card's state made by the caller
        (:func:`with_state` of :attr:`module`), who may need to know its tensors."""
        positional, keywords = self.in_spec.children()
        if len(args) != positional.num_children or set(kwargs) != set(keywords.context):
            raise TypeError(f"the program takes {positional.num_children} positional arguments and keywords "
                            f"{sorted(keywords.context)}; the call has {len(args)} and {sorted(kwargs)}")
        flat = tree_flatten_spec((list(args), dict(kwargs)), self.in_spec)
        return cast(Callable[[], tuple[object, ...]], functools.partial(torch.nn.Module.__call__, module, *flat))


def _is_args_kwargs(spec: TreeSpec) -> bool:
    """Whether ``spec`` is export's ``(args, kwargs)``, the only form flattened here."""
    return (spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple
            and spec.child(1).type is dict)

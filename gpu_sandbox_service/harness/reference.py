"""Eager references: the card's aten overload, or its module's exported program."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, cast

import torch

from gpu_sandbox_service.harness.flat_program import FlatProgram, with_state
from kforge_domain.card import OperatorCard
from kforge_torch.eviction import held_tensors
from packager.variant import ATTRIBUTES_KWARG, STATE_KWARG, decode_call


class CardError(ValueError):
    """The card cannot be replayed (unknown op, unreadable program, wrong output count)."""


def resolve_aten(op: str) -> torch._ops.OpOverload:
    """``"aten::_softmax.default"`` -> ``torch.ops.aten._softmax.default``."""
    namespace, _, qualified = op.partition("::")
    name, _, overload = qualified.partition(".")
    if not namespace or not name:
        raise CardError(f"op {op!r} is not of the form namespace::name.overload")
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as exc:
        raise CardError(f"unknown operator {op!r}") from exc


def flatten_tensors(value: object) -> list[torch.Tensor]:
    """The tensors an op returned, in order (nested tuples and lists flattened)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in flatten_tensors(item)]
    return []


def lean_module(program: torch.export.ExportedProgram) -> torch.nn.Module:
    """The program as a module that runs its ops and nothing else: ``ExportedProgram.module()``
    checks every call's inputs against the exported constraints (a pre-hook, a guard function and
    a metadata assertion per tensor), which on a small module costs several times the module's own
    eager call (``bench/module_reference.py``). The card's eager time must
    be the module's, as capture times it on the live module, so the checks go; a call that does
    not fit the card still fails in the ops themselves or in the checks of their outputs."""
    module = program.module()
    no_module_inputs = not any(isinstance(leaf, torch.nn.Module)
                               for leaf in torch.utils._pytree.tree_leaves(program.example_inputs))
    for key, hook in list(module._forward_pre_hooks.items()):
        if getattr(hook, "__name__", "") == "_check_input_constraints_pre_hook" or (
                no_module_inputs and _module_inputs_hook(hook)):
            del module._forward_pre_hooks[key]
            module._forward_pre_hooks_with_kwargs.pop(key, None)
    for key, hook in list(module._forward_hooks.items()):
        if no_module_inputs and _module_inputs_hook(hook):
            del module._forward_hooks[key]
            module._forward_hooks_with_kwargs.pop(key, None)
            module._forward_hooks_always_called.pop(key, None)
    if not isinstance(module, torch.fx.GraphModule):
        return module
    for node in list(module.graph.nodes):
        checks_only = (node.op == "call_module" and node.target == "_guards_fn") or (
            node.op == "call_function" and node.target is torch.ops.aten._assert_tensor_metadata.default)
        if checks_only and not node.users:
            module.graph.erase_node(node)
    module.recompile()
    return module


def _module_inputs_hook(hook: Callable[..., object]) -> bool:
    """Whether ``hook`` is one of the pair ``ExportedProgram.module()`` adds around each call to let
    ``nn.Module`` inputs through its input flattening. For a program that takes none they do
    nothing, yet any hook at all sends every call through ``nn.Module``'s slow path with hooks
    (about 10 µs a call on a CPU, more than a small module's ops). Recognised by where torch defines
    them; a hook not recognised stays."""
    return "_create_stateful_graph_module" in getattr(hook, "__qualname__", "")


class Reference:
    """Eager PyTorch for one card: ``reference(tensors)`` gives the outputs a kernel must match."""

    def __init__(self, card: OperatorCard, module_program: Path | None) -> None:
        self.card = card
        self._overload = resolve_aten(card.op) if card.kind == "aten" else None
        self._module: torch.nn.Module | None = None
        self._flat: FlatProgram | None = None
        if card.kind == "module":
            if module_program is None:
                raise CardError(f"module card {card.id} has no module_program_blob")
            try:
                lean = lean_module(torch.export.load(str(module_program)))
                self._flat = FlatProgram.of(lean)
                self._module = None if self._flat is not None else lean  # one copy of the module's state held, not two
            except Exception as exc:
                raise CardError(f"cannot load the module program of card {card.id}: {exc}") from exc

    def __call__(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        outputs = flatten_tensors(self.eager_call(tensors)())
        if len(outputs) != len(self.card.outputs):
            raise CardError(f"{self.card.op} returned {len(outputs)} tensors; the card declares "
                            f"{len(self.card.outputs)}")
        return outputs

    def eager_call(self, tensors: Sequence[torch.Tensor]) -> Callable[[], object]:
        """A zero-argument eager call bound to ``tensors``: arguments decoded and state loaded once,
        so timing it measures the op and nothing else. A module card's program is called on its
        inputs flattened once (:class:`FlatProgram`) and returns its flat outputs."""
        return self.bind(tensors).call

    def bind(self, tensors: Sequence[torch.Tensor]) -> BoundEager:
        """:meth:`eager_call`, with the tensors the call reads besides ``tensors``."""
        args, kwargs = decode_call(self.card.template, list(tensors))
        if self._overload is not None:
            overload = self._overload
            return BoundEager(lambda: overload(*args, **kwargs), [])
        state = cast(list[tuple[str, torch.Tensor]] | None, kwargs.pop(STATE_KWARG, None))
        kwargs.pop(ATTRIBUTES_KWARG, None)  # the exported program has them built in
        if self._flat is not None:
            program = with_state(self._flat.module, state)
            return BoundEager(self._flat.call_on(program, args, kwargs), held_tensors(program))
        assert self._module is not None
        module = with_state(self._module, state)
        return BoundEager(lambda: module(*args, **kwargs), held_tensors(module))


class BoundEager(NamedTuple):
    """An eager call bound to its tensors, and the tensors it reads besides them: a module card's
    program's own copy of its parameters, buffers and constants. A cold start evicts both."""

    call: Callable[[], object]
    state: list[torch.Tensor]


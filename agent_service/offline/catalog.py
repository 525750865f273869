"""Which template family a card belongs to: the one place that maps op names to plans."""

from __future__ import annotations

from agent_service.offline import ops_elementwise, ops_rowwise
from agent_service.offline.call import UnsupportedCard, bind_aten_call, split_op_name
from agent_service.offline.modules import module_plan
from agent_service.offline.plan import KernelPlan
from capture_service.cards import OperatorCard

MAX_DIMS = 8


def _check_card(card: OperatorCard, backend: str) -> None:
    if not card.optimisable:
        raise UnsupportedCard(f"card is not optimisable: {card.reason or 'marked so by capture'}")
    if card.degenerate:
        raise UnsupportedCard(f"degenerate variant: {card.degenerate}")
    if card.mutated_inputs:
        raise UnsupportedCard("the op mutates its inputs; templates write fresh outputs only")
    for spec in [*card.inputs, *card.outputs]:
        if len(spec.shape) > MAX_DIMS:
            raise UnsupportedCard(f"a tensor has {len(spec.shape)} dims; the kernel contract allows {MAX_DIMS}")
    if not card.outputs or any(spec.numel == 0 for spec in card.outputs[:1]):
        raise UnsupportedCard("the card has no output to write")
    for tensor in card.key.get("tensors", []):
        device = str(tensor.get("device", backend))
        if device != backend:
            raise UnsupportedCard(f"an input lives on {device}, the kernel runs on {backend}")


def plan_for_card(card: OperatorCard, backend: str) -> KernelPlan:
    """The plan of the family that covers ``card``; :class:`UnsupportedCard` says why none does."""
    if backend not in ("cpu", "cuda"):
        raise UnsupportedCard(f"backend {backend!r} has no templates")
    _check_card(card, backend)
    if card.kind == "module":
        return module_plan(card)
    base, overload = split_op_name(card.op)
    if base in ops_elementwise.UNARY:
        return ops_elementwise.unary_plan(card, base, bind_aten_call(card))
    if base in ops_elementwise.BINARY:
        return ops_elementwise.binary_plan(card, base, bind_aten_call(card))
    if base in ops_elementwise.COPIES:
        return ops_elementwise.copy_plan(card, (base, overload), bind_aten_call(card))
    if base in ops_elementwise.BATCH_NORM_OPS:
        return ops_elementwise.batch_norm_plan(card, base, bind_aten_call(card))
    if base in ops_rowwise.ROWWISE_OPS:
        return ops_rowwise.rowwise_plan(card, base, bind_aten_call(card))
    raise UnsupportedCard(f"no offline template covers {card.op}")

"""Which template family a card belongs to: the one table from aten op names to family plan builders.

Module cards go to :func:`agent_service.offline.modules.module_plan`, which lists module classes,
and where their class is not listed to the fuser (:mod:`agent_service.offline.fused`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from agent_service.offline import (
    fold,
    ops_compare,
    ops_elementwise,
    ops_fake_quantize,
    ops_gather,
    ops_histc,
    ops_inplace,
    ops_integer,
    ops_rowwise,
    ops_scan,
    ops_scatter,
    ops_scatter_reduce,
    ops_sort,
    ops_ternary,
)
from agent_service.offline.call import UnsupportedCard, bind_aten_call, split_op_name
from agent_service.offline.fused import fused_plan
from agent_service.offline.modules import CoveredByAtenCard, module_plan
from agent_service.offline.plan import KernelPlan
from kforge_domain.card import OperatorCard

MAX_DIMS = 8

#: A family's plan for an aten card: (card, op base name, bound call) -> plan, or UnsupportedCard.
PlanBuilder = Callable[[OperatorCard, str, dict[str, Any]], KernelPlan]


def _integers_first(otherwise: PlanBuilder) -> PlanBuilder:
    """Integer arithmetic where the card writes an integer, else ``otherwise`` (a float formula, or
    the logical ops where the operands are bools)."""
    def build(card: OperatorCard, base: str, call: dict[str, Any]) -> KernelPlan:
        if ops_integer.integer_result(card):
            return ops_integer.integer_plan(card, base, call)
        return otherwise(card, base, call)

    return build


#: aten op base name (``aten::<base>.<overload>``) -> the builder of its family's plan. The
#: elementwise formulas are keyed by op in ops_elementwise (UNARY, BINARY); every other op is
#: named here.
ATEN_OPS: dict[str, PlanBuilder] = {
    **dict.fromkeys(ops_elementwise.UNARY, ops_elementwise.unary_plan),
    **dict.fromkeys((*ops_integer.CLAMPS, "neg", "abs", "pow"), _integers_first(ops_elementwise.unary_plan)),
    **dict.fromkeys(ops_elementwise.BINARY, _integers_first(ops_elementwise.binary_plan)),
    "glu": ops_elementwise.glu_plan,
    "prelu": ops_elementwise.prelu_plan,
    **dict.fromkeys(ops_fake_quantize.OPS, ops_fake_quantize.fake_quantize_plan),
    **dict.fromkeys(("floor_divide", "remainder"), ops_integer.integer_plan),
    **dict.fromkeys(("addcmul", "addcdiv", "lerp"), ops_ternary.ternary_plan),
    "nan_to_num": ops_ternary.nan_to_num_plan,
    **dict.fromkeys(ops_inplace.INPLACE_UNARY, ops_inplace.inplace_unary_plan),
    **dict.fromkeys(ops_inplace.INPLACE_BINARY, ops_inplace.inplace_binary_plan),
    "masked_fill_": ops_inplace.inplace_masked_fill_plan,
    "copy_": ops_inplace.inplace_copy_plan,
    **dict.fromkeys(("fill_", "zero_"), ops_inplace.inplace_fill_plan),
    # type_as decomposes (CompositeImplicitAutograd) to ``to``: the runtime overrides it at that key,
    # which a call reaches whenever autograd need not record it (packager.aten_dispatch.AtenOverride).
    **dict.fromkeys(("clone", "contiguous", "_to_copy", "to", "type_as"), ops_elementwise.copy_plan),
    **dict.fromkeys(("batch_norm", "native_batch_norm", "_native_batch_norm_legit_no_training",
                     "_batch_norm_no_update"), ops_elementwise.batch_norm_plan),
    "sum": partial(ops_rowwise.reduction_plan, kind="sum"),
    "mean": partial(ops_rowwise.reduction_plan, kind="mean"),
    "amax": partial(ops_rowwise.reduction_plan, kind="amax"),
    **dict.fromkeys(("var", "std", "var_mean", "std_mean"), ops_rowwise.variance_plan),
    "linalg_vector_norm": ops_rowwise.vector_norm_plan,
    "logsumexp": partial(ops_rowwise.reduction_plan, kind="logsumexp"),
    "_softmax": partial(ops_rowwise.softmax_plan, kind="softmax"),
    "softmax": partial(ops_rowwise.softmax_plan, kind="softmax"),
    "_log_softmax": partial(ops_rowwise.softmax_plan, kind="log_softmax"),
    "log_softmax": partial(ops_rowwise.softmax_plan, kind="log_softmax"),
    "layer_norm": ops_rowwise.layer_norm_plan,
    "native_layer_norm": ops_rowwise.layer_norm_plan,
    "rms_norm": ops_rowwise.rms_norm_plan,
    "_fused_rms_norm": ops_rowwise.rms_norm_plan,
    "group_norm": ops_rowwise.group_norm_plan,
    "native_group_norm": ops_rowwise.group_norm_plan,
    "instance_norm": ops_rowwise.instance_norm_plan,
    **dict.fromkeys(("adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool3d",
                     "_adaptive_avg_pool3d"), ops_rowwise.adaptive_avg_pool_plan),
    **dict.fromkeys(("max_pool2d", "max_pool1d"), ops_rowwise.max_pool_plan),
    **dict.fromkeys(("avg_pool2d", "avg_pool1d"), ops_rowwise.avg_pool_plan),
    "upsample_bilinear2d": ops_rowwise.upsample_bilinear_plan,
    "upsample_bicubic2d": ops_rowwise.upsample_bicubic_plan,
    "upsample_linear1d": ops_rowwise.upsample_linear_plan,
    **dict.fromkeys(("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
                     "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"), ops_gather.upsample_nearest_plan),
    "cat": ops_gather.cat_plan,
    "stack": ops_gather.stack_plan,
    "index": ops_gather.index_plan,
    "embedding": ops_gather.embedding_plan,
    "one_hot": ops_gather.one_hot_plan,
    **dict.fromkeys(("index_add", *ops_scatter.IN_PLACE), ops_scatter.index_add_plan),
    **dict.fromkeys(("scatter", "scatter_add", "scatter_reduce", *ops_scatter_reduce.IN_PLACE),
                    ops_scatter_reduce.scatter_reduce_plan),
    # pad decomposes (CompositeImplicitAutograd) to constant_pad_nd: overridden at that key, as type_as is
    **dict.fromkeys(("pad", "constant_pad_nd"), ops_gather.pad_plan),
    "masked_fill": ops_gather.masked_fill_plan,
    **dict.fromkeys(("triu", "tril"), ops_gather.triangle_plan),
    "where": ops_gather.where_plan,
    "gather": ops_gather.gather_plan,
    **dict.fromkeys(("argmax", "argmin", "max", "min"), ops_gather.arg_extreme_plan),
    "repeat_interleave": ops_gather.repeat_interleave_plan,
    "flip": ops_gather.flip_plan,
    **dict.fromkeys(("pixel_shuffle", "pixel_unshuffle"), ops_gather.pixel_shuffle_plan),
    "im2col": ops_gather.im2col_plan,
    "affine_grid_generator": ops_gather.affine_grid_plan,
    "col2im": fold.col2im_plan,
    "bucketize": ops_compare.bucketize_plan,
    "roll": ops_gather.roll_plan,
    # reshape, flatten and unflatten decompose (CompositeImplicitAutograd) to a view where the strides
    # allow one and to a contiguous copy where not: only the copies are captured as searchable cards
    **dict.fromkeys(("reshape", "flatten", "unflatten"), ops_gather.reshape_plan),
    **dict.fromkeys(ops_compare.COMPARISONS, ops_compare.compare_plan),
    **dict.fromkeys(("logical_not", *ops_compare.LOGICAL), ops_compare.logical_plan),
    **dict.fromkeys(ops_compare.BOOL_BITWISE, _integers_first(ops_compare.logical_plan)),
    **dict.fromkeys(ops_scan.SCANS, ops_scan.scan_plan),
    "histc": ops_histc.histc_plan,
    **dict.fromkeys(ops_sort.SORTS, ops_sort.sort_plan),
}


def _check_card(card: OperatorCard, backend: str) -> None:
    if not card.optimisable:
        raise UnsupportedCard(f"card is not optimisable: {card.reason or 'marked so by capture'}")
    if card.degenerate:
        raise UnsupportedCard(f"degenerate variant: {card.degenerate}")
    if card.mutated_inputs and not _in_place_op(card):
        raise UnsupportedCard("the op mutates its inputs; only in-place elementwise templates write an input")
    for spec in [*card.inputs, *card.outputs]:
        if len(spec.shape) > MAX_DIMS:
            raise UnsupportedCard(f"a tensor has {len(spec.shape)} dims; the kernel contract allows {MAX_DIMS}")
    if not card.outputs or any(spec.numel == 0 for spec in card.outputs[:1]):
        raise UnsupportedCard("the card has no output to write")
    for tensor in card.key.get("tensors", []):
        device = str(tensor.get("device", backend))
        if device != backend:
            raise UnsupportedCard(f"an input lives on {device}, the kernel runs on {backend}")


def _in_place_op(card: OperatorCard) -> bool:
    """An aten op whose template writes the input it mutates (:mod:`agent_service.offline.ops_inplace`)."""
    base = split_op_name(card.op)[0]
    return card.kind == "aten" and base in (*ops_inplace.INPLACE_UNARY, *ops_inplace.INPLACE_BINARY,
                                            *ops_inplace.INPLACE_GATHER, *ops_scatter.IN_PLACE,
                                            *ops_scatter_reduce.IN_PLACE)


def _module_or_fused_plan(card: OperatorCard) -> KernelPlan:
    """A listed module class's template, else the fuser over the module's captured program."""
    try:
        return module_plan(card)
    except CoveredByAtenCard:
        raise
    except UnsupportedCard as listed:
        try:
            return fused_plan(card)
        except UnsupportedCard as fused:
            raise UnsupportedCard(f"{listed}; the fuser: {fused}") from None


def plan_for_card(card: OperatorCard, backend: str) -> KernelPlan:
    """The plan of the family that covers ``card``; :class:`UnsupportedCard` says why none does."""
    if backend not in ("cpu", "cuda"):
        raise UnsupportedCard(f"backend {backend!r} has no templates")
    _check_card(card, backend)
    if card.kind == "module":
        return _module_or_fused_plan(card)
    base = split_op_name(card.op)[0]
    build = ATEN_OPS.get(base)
    if build is None:
        raise UnsupportedCard(f"no offline template covers {card.op}")
    return build(card, base, bind_aten_call(card))

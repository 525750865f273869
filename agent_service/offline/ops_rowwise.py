"""Aten cards the row engine covers: reductions, softmax, layer/RMS/group norm, global and max pooling.

One builder per family; :mod:`agent_service.offline.catalog` says which ops each builder takes.
"""

from __future__ import annotations

import math
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, tensor_argument
from agent_service.offline.group_norm_nhwc import ChannelsLastGroupNormPlan, is_channels_last
from agent_service.offline.layout import (
    dense_row_layout,
    is_contiguous,
    row_layout,
    storage_rows,
    strided_outer_layout,
)
from agent_service.offline.ops_elementwise import _num
from agent_service.offline.pooling import AdaptivePoolPlan
from agent_service.offline.rowwise.plan import RowPlan
from kforge_domain.card import OperatorCard

FLOAT32_EPS = 1.1920928955078125e-07  # what aten's rms_norm uses when eps is None


def _optional_tensor(call: dict[str, Any], name: str) -> int | None:
    value = call.get(name)
    return value.index if isinstance(value, TensorArg) else None


def _dims(value: Any, ndim: int) -> list[int]:
    if value is None:
        return list(range(ndim))
    if isinstance(value, int):
        return [value % max(ndim, 1)]
    return [int(d) % max(ndim, 1) for d in value] or list(range(ndim))


def _extra_outputs(card: OperatorCard, names: list[str]) -> dict[str, int]:
    """Map the card's extra outputs (after the first) to statistic names, skipping empty ones."""
    mapping = {}
    for offset, spec in enumerate(card.outputs[1:], start=1):
        if offset - 1 >= len(names):
            raise UnsupportedCard(f"{card.op}: output {offset} is not one the template writes")
        if spec.numel:
            mapping[names[offset - 1]] = offset
    return mapping


def _adaptive_pool(card: OperatorCard, x: TensorArg, size: list[int]) -> AdaptivePoolPlan:
    shape = x.spec.shape
    if len(size) != 2 or len(shape) not in (3, 4):
        raise UnsupportedCard(f"adaptive pooling to {size} over {len(shape)} dims is templated for 2-d only")
    if any(s <= 0 for s in size):
        raise UnsupportedCard(f"adaptive pooling output size {size} is not positive")
    planes = x.spec.numel // (shape[-1] * shape[-2])
    return AdaptivePoolPlan(family="adaptive_avg_pool", summary=f"{card.op} of {shape} to {size} {x.spec.dtype}",
                            inputs=tuple(card.inputs), outputs=tuple(card.outputs), x=x.index, planes=planes,
                            in_h=shape[-2], in_w=shape[-1], out_h=size[0], out_w=size[1])


def upsample_bilinear_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> AdaptivePoolPlan:
    """upsample_bilinear2d (.vec and by output size) of NCHW planes, with or without
    align_corners: family ``upsample_bilinear``. A resize to the input's own size is left to eager,
    which copies it (the formula would weigh a neighbouring inf or NaN by 0)."""
    return _resize_plan(card, call, "bilinear", [call.get("scales_h"), call.get("scales_w")])


def upsample_bicubic_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> AdaptivePoolPlan:
    """upsample_bicubic2d (.vec and by output size) of NCHW planes, with or without align_corners:
    family ``upsample_bicubic``, each output from sixteen inputs with eager's cubic weights (the
    antialiased form is another op, not templated). A resize to the input's own size is left to
    eager, which copies it."""
    return _resize_plan(card, call, "bicubic", [call.get("scales_h"), call.get("scales_w")])


def upsample_linear_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> AdaptivePoolPlan:
    """upsample_linear1d (.vec and by output size) of NCL rows, with or without align_corners:
    family ``upsample_linear``, each output from two inputs with eager's weights. A resize to the
    input's own length is left to eager, which copies it."""
    return _resize_plan(card, call, "linear", [call.get("scales")])


def _resize_plan(card: OperatorCard, call: dict[str, Any], kind: str, scales_given: list[Any]) -> AdaptivePoolPlan:
    """Bilinear (two spatial dims) or linear (one) resizing of ``[N, C, *spatial]``: eager's source
    scale per spatial dim from the call's scale factors (``.vec``) or ``scales_given`` (by size)."""
    x = tensor_argument(call, "input" if "input" in call else "self")
    shape, out, n = x.spec.shape, card.outputs[0].shape, len(scales_given)
    if len(shape) != 2 + n or len(out) != 2 + n or out[:2] != shape[:2]:
        raise UnsupportedCard(f"{kind} resizing of {shape} to {out}: eager's op takes [N, C] and {n} spatial dims")
    if out[2:] == shape[2:]:
        raise UnsupportedCard(f"a {kind} resize to the input's own size is a copy in eager")
    align = call.get("align_corners")
    if not isinstance(align, bool):
        raise UnsupportedCard(f"align_corners {align!r} is not a bool")
    factors = call.get("scale_factors") or scales_given
    if len(factors) != n or not all(f is None or (isinstance(f, (int, float)) and not isinstance(f, bool))
                                    for f in factors):
        raise UnsupportedCard(f"{kind} scale factors {factors!r} are not {n} numbers")
    scales = [_source_scale(size_in, size_out, factor, align)
              for size_in, size_out, factor in zip(shape[2:], out[2:], factors, strict=True)]
    in_h, out_h, scale_h = (shape[2], out[2], scales[0]) if n == 2 else (1, 1, "0.0f")
    return AdaptivePoolPlan(
        family=f"upsample_{kind}", summary=f"{card.op} of {shape} to {out} {x.spec.dtype}", inputs=tuple(card.inputs),
        outputs=tuple(card.outputs), x=x.index, planes=shape[0] * shape[1], in_h=in_h, in_w=shape[-1],
        out_h=out_h, out_w=out[-1], kind=kind, scales=(scale_h, scales[-1]), align_corners=align,
    )


def _source_scale(size_in: int, size_out: int, factor: Any, align: bool) -> str:
    """Eager's area_pixel_compute_scale for one dim, as a C float expression."""
    if align:  # (in - 1) / (out - 1) in float, 0 for a single output
        return f"((float){size_in - 1} / (float){size_out - 1})" if size_out > 1 else "0.0f"
    if factor is not None and factor > 0:  # eager: 1 / scale in double, then float
        return f"((float)(1.0 / {float(factor)!r}))"
    return f"((float){size_in} / (float){size_out})"


def _pair(value: Any, what: str, default: list[int] | None = None) -> tuple[int, int]:
    if isinstance(value, int):
        value = [value]
    if (value is None or value == []) and default is not None:
        value = default
    if not isinstance(value, list) or len(value) not in (1, 2) or not all(isinstance(v, int) for v in value):
        raise UnsupportedCard(f"pooling {what} {value!r} is not one or two ints")
    return (value[0], value[-1])


def _window(card: OperatorCard, x: TensorArg, call: dict[str, Any], *, one_d: bool,
            dilated: bool) -> dict[str, Any]:
    """The AdaptivePoolPlan fields of a pooling window over the last two dims (NCHW / CHW) or, for
    1-d pooling (NCL / CL), over the last dim of a plane one row high, as aten pools it: a window
    1 high, stride 1, no padding, dilation 1 along that row."""
    shape, out = x.spec.shape, card.outputs[0].shape
    spatial = 1 if one_d else 2
    if len(shape) not in (spatial + 1, spatial + 2) or len(out) != len(shape):
        raise UnsupportedCard(f"{spatial}-d pooling of {len(shape)} dims is templated for "
                              f"{'NCL / CL' if one_d else 'NCHW / CHW'} only")

    def read(name: str, fill: int, default: list[int] | None = None) -> tuple[int, int]:
        value = call.get(name)
        if one_d and isinstance(value, list) and len(value) > 1:
            raise UnsupportedCard(f"1-d pooling {name} {value!r} is not one int")
        pair = _pair(value, name, default)
        return (fill, pair[1]) if one_d else pair

    kernel = read("kernel_size", 1)
    fields: dict[str, Any] = {
        "x": x.index, "inputs": tuple(card.inputs), "outputs": tuple(card.outputs),
        "planes": x.spec.numel // (shape[-1] * (1 if one_d else shape[-2])),
        "in_h": 1 if one_d else shape[-2], "in_w": shape[-1], "out_h": 1 if one_d else out[-2], "out_w": out[-1],
        "kernel": kernel, "stride": read("stride", 1, list(kernel)), "padding": read("padding", 0, [0]),
        "summary": f"{card.op} of {shape} to {out} {x.spec.dtype}",
    }
    if dilated:
        fields["dilation"] = read("dilation", 1, [1])
    return fields


def _max_pool(card: OperatorCard, call: dict[str, Any], *, one_d: bool = False) -> AdaptivePoolPlan:
    x = tensor_argument(call, "self")
    if len(card.outputs) != 1:
        raise UnsupportedCard(f"{card.op} returns indices too; only the values variant is templated")
    return AdaptivePoolPlan(family="max_pool", kind="max", **_window(card, x, call, one_d=one_d, dilated=True))


def _output_inner(card: OperatorCard, x: TensorArg, dims: list[int], rows: int, length: int) -> int | None:
    """The ``y_inner`` of a per-element output (card output 0) that does not share x's strides.

    Eager writes a norm's or softmax's output of a permuted input contiguously; its rows, in
    logical order like x's (see layout.dense_row_layout), are then laid out by :func:`row_layout`.
    """
    y = card.outputs[0]
    if y.stride == x.spec.stride or is_contiguous(x.spec):
        return None
    if y.shape != x.spec.shape or not is_contiguous(y):
        raise UnsupportedCard(f"output layout stride={y.stride} is neither the input's nor contiguous")
    outer, y_length, inner = row_layout(y, dims)
    if (outer * inner, y_length) != (rows, length):
        raise UnsupportedCard(f"output rows {outer * inner}x{y_length} do not match the input's {rows}x{length}")
    return inner


def max_pool_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> AdaptivePoolPlan:
    """max_pool2d, max_pool1d: family ``max_pool``."""
    return _max_pool(card, call, one_d=base == "max_pool1d")


def avg_pool_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> AdaptivePoolPlan:
    """avg_pool2d with any kernel, stride, padding, ceil_mode and divisor, and avg_pool1d (aten's
    own formula: avg_pool2d of the row as a plane one high): family ``avg_pool``."""
    x = tensor_argument(call, "self")
    divisor = call.get("divisor_override")
    if divisor is not None and (isinstance(divisor, bool) or not isinstance(divisor, int) or divisor == 0):
        raise UnsupportedCard(f"divisor_override {divisor!r} is not a nonzero integer")
    return AdaptivePoolPlan(family="avg_pool", kind="avg", count_include_pad=bool(call.get("count_include_pad", True)),
                            divisor=divisor, **_window(card, x, call, one_d=base == "avg_pool1d", dilated=False))


def _reduced_rows(card: OperatorCard, x: TensorArg, call: dict[str, Any]) -> dict[str, Any]:
    """The RowPlan fields of reducing ``x`` over the call's dims into the card's one output: a dense
    layout walked in storage, else leading dims at their own strides (a slice such as ``x[:, 1:]``)."""
    if len(card.outputs) != 1:
        raise UnsupportedCard(f"{card.op} returns {len(card.outputs)} tensors")
    dims = _dims(call.get("dim"), len(x.spec.shape))
    try:
        outer, length, inner = dense_row_layout(x.spec, dims, kept_any_order=True)
        return {"rows": outer * inner, "length": length, "inner": inner,
                "row_order": storage_rows(x.spec, dims, card.outputs[0])}
    except UnsupportedCard as dense:
        try:
            leading, length, inner = strided_outer_layout(x.spec, dims)
        except UnsupportedCard:
            raise dense from None
        rows = math.prod(size for _, size, _ in leading) * inner
        return {"rows": rows, "length": length, "inner": inner, "x_outer": leading}


def reduction_plan(card: OperatorCard, base: str, call: dict[str, Any], *, kind: str) -> RowPlan:
    """sum, mean, amax, logsumexp over adjacent dims: family ``reduction``, row kind ``kind``."""
    x = tensor_argument(call, "self")
    return RowPlan(family="reduction", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind=kind, x=x.index,
                   row_outputs={"value": 0}, inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                   **_reduced_rows(card, x, call))


def variance_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan:
    """var and std over adjacent dims, with eager's correction: family ``reduction``, row kind ``var``
    or ``std``. var_mean and std_mean are refused: eager's mean of a row holding an infinity is
    infinite or NaN by where the infinity sits (its Welford updates), which no other order repeats."""
    if base.endswith("_mean"):
        raise UnsupportedCard(f"{card.op}: eager's mean of a row with an infinity depends on its element order")
    x = tensor_argument(call, "self")
    rows, correction = _reduced_rows(card, x, call), _correction(call)
    if rows["length"] - correction <= 0:
        raise UnsupportedCard(f"{card.op}: a correction of {correction:g} leaves no divisor for rows of "
                              f"{rows['length']}")
    return RowPlan(family="reduction", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind=base, x=x.index,
                   row_outputs={"value": 0}, correction=correction, inputs=tuple(card.inputs),
                   outputs=tuple(card.outputs), **rows)


def _correction(call: dict[str, Any]) -> float:
    """The divisor's correction of a var or std call: ``correction`` (default 1) or ``unbiased``."""
    if "unbiased" in call:
        return 1.0 if call["unbiased"] else 0.0
    value = call.get("correction")
    return 1.0 if value is None else _num(value, "correction")


def vector_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan:
    """linalg_vector_norm of order 2 over adjacent dims, in the input's dtype: family ``reduction``."""
    x = tensor_argument(call, "self")
    if call.get("ord", 2) not in (2, 2.0) or isinstance(call.get("ord"), bool):
        raise UnsupportedCard(f"vector norm of order {call.get('ord')!r}; order 2 is templated")
    if call.get("dtype") is not None:
        raise UnsupportedCard("vector norm computed in another dtype is not templated")
    return RowPlan(family="reduction", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind="vector_norm",
                   x=x.index, row_outputs={"value": 0}, inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                   **_reduced_rows(card, x, call))


def softmax_plan(card: OperatorCard, base: str, call: dict[str, Any], *, kind: str) -> RowPlan:
    """softmax or log-softmax (``kind``) over one dim: family ``softmax``."""
    x = tensor_argument(call, "self")
    return RowPlan(family="softmax", summary=f"{card.op} over dim {call['dim']} of {x.spec.shape} {x.spec.dtype}",
                   kind=kind, x=x.index, y=0, inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                   **_written_rows(card, x, [int(call["dim"])]))


def adaptive_avg_pool_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan | AdaptivePoolPlan:
    """Adaptive average pooling: to 1 a row mean (family ``global_avg_pool``), else ``adaptive_avg_pool``."""
    x = tensor_argument(call, "self")
    size = call.get("output_size")
    if not isinstance(size, list) or not all(isinstance(s, int) for s in size):
        raise UnsupportedCard(f"adaptive average pooling output size {size!r} is not a list of ints")
    if any(s != 1 for s in size):
        return _adaptive_pool(card, x, size)
    spatial = list(range(len(x.spec.shape) - len(size), len(x.spec.shape)))
    outer, length, inner = dense_row_layout(x.spec, spatial)
    return RowPlan(family="global_avg_pool", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind="mean",
                   x=x.index, rows=outer * inner, length=length, inner=inner, row_outputs={"value": 0},
                   inputs=tuple(card.inputs), outputs=tuple(card.outputs))


def _normalised_rows(card: OperatorCard, call: dict[str, Any]) -> tuple[TensorArg, dict[str, Any]]:
    """Input ``input`` and the RowPlan fields of rows over its last ``len(normalized_shape)`` dims."""
    x = tensor_argument(call, "input")
    norm_dims = len(call["normalized_shape"])
    ndim = len(x.spec.shape)
    rows = _written_rows(card, x, list(range(ndim - norm_dims, ndim)))
    return x, {"x": x.index, "y": 0, "inputs": tuple(card.inputs), "outputs": tuple(card.outputs), **rows}


def _written_rows(card: OperatorCard, x: TensorArg, dims: list[int]) -> dict[str, Any]:
    """The RowPlan fields of rows over ``dims`` of ``x`` that write card output 0 element by element:
    a dense layout (the output in x's layout or contiguous, see :func:`_output_inner`), else an
    input whose leading dims step through storage at their own strides (a slice such as
    ``x[:, 1:]``, an LSTM's batch-first output) written to a contiguous output in logical order."""
    try:
        outer, length, inner = dense_row_layout(x.spec, dims)
    except UnsupportedCard as dense:
        try:
            leading, length, inner = strided_outer_layout(x.spec, dims)
        except UnsupportedCard:
            raise dense from None
        return {"rows": math.prod(size for _, size, _ in leading) * inner, "length": length, "inner": inner,
                "x_outer": leading, "y_inner": inner}
    return {"rows": outer * inner, "length": length, "inner": inner,
            "y_inner": _output_inner(card, x, dims, outer * inner, length)}


def layer_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan:
    """layer_norm, native_layer_norm (mean and rstd written when the card has them): family ``layer_norm``."""
    x, rows = _normalised_rows(card, call)
    return RowPlan(family="layer_norm", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind="layer_norm",
                   row_outputs=_extra_outputs(card, ["mean", "rstd"]),
                   weight=_optional_tensor(call, "weight"), bias=_optional_tensor(call, "bias"),
                   eps=float(call["eps"]), **rows)


def rms_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan:
    """rms_norm, _fused_rms_norm (eps None: float32's epsilon, as aten): family ``rms_norm``."""
    x, rows = _normalised_rows(card, call)
    eps = call.get("eps")
    return RowPlan(family="rms_norm", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}", kind="rms_norm",
                   row_outputs=_extra_outputs(card, ["rstd"]), weight=_optional_tensor(call, "weight"),
                   eps=FLOAT32_EPS if eps is None else float(eps), **rows)


def instance_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan | ChannelsLastGroupNormPlan:
    """instance_norm over each sample's own statistics: a group norm with one group per channel
    (``nn.InstanceNorm*`` without running statistics, the default)."""
    if not call["use_input_stats"]:
        raise UnsupportedCard("instance norm by running statistics (use_input_stats=False) is not templated")
    if call.get("running_mean") is not None or call.get("running_var") is not None:
        raise UnsupportedCard("instance norm given running statistics also updates them: not templated")
    x = tensor_argument(call, "input")
    if len(x.spec.shape) < 3:
        raise UnsupportedCard("instance norm input has no spatial dims")
    return group_norm_plan(card, "group_norm", {**call, "num_groups": x.spec.shape[1]})


def group_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> RowPlan | ChannelsLastGroupNormPlan:
    """group_norm, native_group_norm: family ``group_norm`` (channels-last inputs: group_norm_nhwc)."""
    x = tensor_argument(call, "input")
    groups = int(call["num_groups"] if base == "group_norm" else call["group"])
    if len(x.spec.shape) < 2:
        raise UnsupportedCard("group norm input has no channel dim")
    n, channels = x.spec.shape[0], x.spec.shape[1]
    if channels % groups:
        raise UnsupportedCard(f"{channels} channels do not split into {groups} groups")
    hw = x.spec.numel // max(n * channels, 1)
    if not is_contiguous(x.spec) and is_channels_last(x.spec):  # groups are blocks of adjacent channels
        return ChannelsLastGroupNormPlan(
            summary=f"{card.op} of channels-last {x.spec.shape} {x.spec.dtype}, {groups} groups",
            inputs=tuple(card.inputs), outputs=tuple(card.outputs), x=x.index,
            weight=_optional_tensor(call, "weight"), bias=_optional_tensor(call, "bias"), eps=float(call["eps"]),
            groups=groups, row_outputs=_extra_outputs(card, ["mean", "rstd"]))
    row_layout(x.spec, list(range(1, len(x.spec.shape))))
    return RowPlan(family="group_norm", summary=f"{card.op} of {x.spec.shape} {x.spec.dtype}, {groups} groups",
                   kind="group_norm", x=x.index, rows=n * groups, length=(channels // groups) * hw, y=0,
                   row_outputs=_extra_outputs(card, ["mean", "rstd"]),
                   weight=_optional_tensor(call, "weight"), bias=_optional_tensor(call, "bias"),
                   eps=float(call["eps"]), groups=groups, channels=channels, spatial=hw,
                   inputs=tuple(card.inputs), outputs=tuple(card.outputs))

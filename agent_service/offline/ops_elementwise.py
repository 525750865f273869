"""Aten cards the elementwise engine covers: unary, binary (broadcast, scalars, alpha), batch norm.

Each entry turns the bound call into an :class:`ElementwisePlan`; anything outside what the
kernel handles raises :class:`UnsupportedCard` with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.convert import conversion_helpers, converted
from agent_service.offline.cxx import FLOAT_DTYPES, cfloat
from agent_service.offline.elementwise import ChannelStats, ElementwisePlan, Operand
from agent_service.offline.gather import Branch, GatherPlan, offset
from kforge_domain.card import OperatorCard


def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnsupportedCard(f"{what} {value!r} is not a number")
    return float(value)


def _gelu(call: dict[str, Any]) -> str:
    if call.get("approximate", "none") == "tanh":
        return "0.5f * x0 * (1.0f + KF_TANH(0.7978845608028654f * (x0 + 0.044715f * x0 * x0 * x0)))"
    return "0.5f * x0 * (1.0f + KF_ERF(x0 * 0.7071067811865476f))"


def _keep_nan(expr: str) -> str:
    """``expr`` for a number, NaN for NaN: fminf/fmaxf return the other operand, eager propagates NaN."""
    return f"(x0 != x0 ? x0 : {expr})"


def _clamp(call: dict[str, Any]) -> str:
    """clamp, clamp_min, clamp_max by numbers; a NaN bound makes every element NaN, as in eager."""
    bounds = [_num(call[b], f"clamp {b}") for b in ("min", "max") if call.get(b) is not None]
    if any(math.isnan(b) for b in bounds):
        return cfloat(math.nan)
    expr = "x0"
    if call.get("min") is not None:
        expr = f"fmaxf({expr}, {cfloat(_num(call['min'], 'clamp min'))})"
    if call.get("max") is not None:
        expr = f"fminf({expr}, {cfloat(_num(call['max'], 'clamp max'))})"
    return expr if expr == "x0" else _keep_nan(expr)


def _pow(call: dict[str, Any]) -> str:
    e = _num(call["exponent"], "exponent")
    return {2.0: "x0 * x0", 1.0: "x0", 0.5: "sqrtf(x0)", 3.0: "x0 * x0 * x0", -1.0: "1.0f / x0"}.get(
        e, f"powf(x0, {cfloat(e)})"
    )


def _elu(call: dict[str, Any]) -> str:
    alpha, scale = _num(call.get("alpha", 1.0), "alpha"), _num(call.get("scale", 1.0), "scale")
    input_scale = _num(call.get("input_scale", 1.0), "input_scale")
    return (f"x0 > 0.0f ? x0 * {cfloat(scale)} : "
            f"{cfloat(alpha * scale)} * (KF_EXP(x0 * {cfloat(input_scale)}) - 1.0f)")


def _threshold(call: dict[str, Any]) -> str:
    """``value`` where the input is at most ``threshold``; NaN fails the test and stays NaN, as in eager."""
    return (f"x0 <= {cfloat(_num(call['threshold'], 'threshold'))} ? {cfloat(_num(call['value'], 'value'))} "
            ": x0")


def _sign(call: dict[str, Any]) -> str:
    """eager's (0 < x) - (x < 0): NaN and both zeros give +0."""
    return "(float)((0.0f < x0) - (x0 < 0.0f))"


def _round(call: dict[str, Any]) -> str:
    """round to an integer, ties to even (C's rintf in the default rounding mode, as eager's nearbyint)."""
    if call.get("decimals", 0) != 0:
        raise UnsupportedCard(f"round to {call['decimals']!r} decimals is not templated")
    return "rintf(x0)"


def _softplus(call: dict[str, Any]) -> str:
    """eager's formula: the input itself above ``threshold`` (in units of 1 / beta), log1p(exp) below."""
    beta, threshold = _num(call.get("beta", 1.0), "beta"), _num(call.get("threshold", 20.0), "threshold")
    scaled = "x0" if beta == 1.0 else f"x0 * {cfloat(beta)}"
    below = "KF_LOG1P(KF_EXP(" + scaled + "))" + ("" if beta == 1.0 else f" / {cfloat(beta)}")
    return f"({scaled}) > {cfloat(threshold)} ? x0 : {below}"


# op base name -> (expression in x0, uses exp/tanh/erf/log: fast_math picks their form)
UNARY: dict[str, tuple[Callable[[dict[str, Any]], str], bool]] = {
    "relu": (lambda c: "x0 < 0.0f ? 0.0f : x0", False),
    "gelu": (_gelu, True),
    "silu": (lambda c: "x0 / (1.0f + KF_EXP(-x0))", True),
    "sigmoid": (lambda c: "1.0f / (1.0f + KF_EXP(-x0))", True),
    "tanh": (lambda c: "KF_TANH(x0)", True),
    "exp": (lambda c: "KF_EXP(x0)", True),
    "neg": (lambda c: "-x0", False),
    "abs": (lambda c: "fabsf(x0)", False),
    "sqrt": (lambda c: "sqrtf(x0)", False),
    "rsqrt": (lambda c: "1.0f / sqrtf(x0)", False),
    "reciprocal": (lambda c: "1.0f / x0", False),
    "log": (lambda c: "KF_LOG(x0)", True),
    "sin": (lambda c: "sinf(x0)", False),
    "cos": (lambda c: "cosf(x0)", False),
    "hardswish": (lambda c: "x0 * fminf(fmaxf(x0 + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f)", False),
    "hardsigmoid": (lambda c: _keep_nan("fminf(fmaxf(x0 + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f)"), False),
    "leaky_relu": (lambda c: f"x0 > 0.0f ? x0 : x0 * {cfloat(_num(c['negative_slope'], 'slope'))}", False),
    "hardtanh": (lambda c: _keep_nan(f"fminf(fmaxf(x0, {cfloat(_num(c['min_val'], 'min'))}), "
                                     f"{cfloat(_num(c['max_val'], 'max'))})"), False),
    # relu6: hardtanh(x, 0, 6) as aten decomposes it, NaN kept
    "relu6": (lambda c: _keep_nan("fminf(fmaxf(x0, 0.0f), 6.0f)"), False),
    "clamp": (_clamp, False),
    "pow": (_pow, False),
    "elu": (_elu, True),
    "softplus": (_softplus, True),
    "mish": (lambda c: "x0 * KF_TANH(KF_LOG1P(KF_EXP(x0)))", True),
    # eager's min(x, 0) - log1p(exp(-|x|)): no overflow either side; NaN stays NaN through the log1p
    "log_sigmoid": (lambda c: "fminf(x0, 0.0f) - KF_LOG1P(KF_EXP(-fabsf(x0)))", True),
    "clamp_min": (_clamp, False),
    "clamp_max": (_clamp, False),
    "threshold": (_threshold, False),
    "erf": (lambda c: "KF_ERF(x0)", True),
    "erfinv": (lambda c: "KF_ERFINV(x0)", False),
    "expm1": (lambda c: "expm1f(x0)", False),
    "log1p": (lambda c: "KF_LOG1P(x0)", True),
    "log2": (lambda c: "log2f(x0)", False),
    "exp2": (lambda c: "exp2f(x0)", False),
    "tan": (lambda c: "tanf(x0)", False),
    "atan": (lambda c: "atanf(x0)", False),
    "square": (lambda c: "x0 * x0", False),
    # rounding: C's, which eager's kernels call (round: to nearest, ties to even)
    "floor": (lambda c: "floorf(x0)", False),
    "ceil": (lambda c: "ceilf(x0)", False),
    "trunc": (lambda c: "truncf(x0)", False),
    "round": (_round, False),
    "sign": (_sign, False),
    "sgn": (_sign, False),  # of a real tensor, sign
}

# op base name -> expression of a (x0) and b (x1 or a scalar literal), alpha applied to b
BINARY: dict[str, Callable[[str, str, float], str]] = {
    "add": lambda a, b, alpha: f"{a} + {b}" if alpha == 1.0 else f"{a} + {cfloat(alpha)} * {b}",
    "sub": lambda a, b, alpha: f"{a} - {b}" if alpha == 1.0 else f"{a} - {cfloat(alpha)} * {b}",
    "rsub": lambda a, b, alpha: f"{b} - {a}" if alpha == 1.0 else f"{b} - {cfloat(alpha)} * {a}",
    "mul": lambda a, b, alpha: f"{a} * {b}",
    "div": lambda a, b, alpha: f"{a} / {b}",
    # eager's maximum and minimum propagate NaN; fmaxf/fminf return the other operand (a + b is NaN then)
    "maximum": lambda a, b, alpha: f"(({a}) != ({a}) || ({b}) != ({b}) ? ({a}) + ({b}) : fmaxf({a}, {b}))",
    "minimum": lambda a, b, alpha: f"(({a}) != ({a}) || ({b}) != ({b}) ? ({a}) + ({b}) : fminf({a}, {b}))",
}

def along_dim(t: TensorArg, ndim: int, dim: int) -> Operand:
    """A 1-d tensor read along output dim ``dim`` of ``ndim`` and broadcast over the others (a
    per-channel weight, statistic, scale or zero point)."""
    strides = [0] * ndim
    strides[dim] = t.spec.stride[0]
    return Operand(t.index, t.spec.dtype, strides=tuple(strides))


def _check_single_output(card: OperatorCard) -> None:
    if len(card.outputs) != 1:
        raise UnsupportedCard(f"{card.op} writes {len(card.outputs)} outputs; the elementwise template writes one")


def unary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    _check_single_output(card)
    x = tensor_argument(call)
    make, uses_math = UNARY[base]
    return ElementwisePlan(
        family="elementwise_unary",
        summary=f"{card.op} over {card.outputs[0].shape} {card.outputs[0].dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=(Operand(x.index, x.spec.dtype),), expression=make(call), uses_math=uses_math,
    )


#: Options of a copy (``to.dtype_layout``, ``_to_copy``) that leave it a plain strided copy on the
#: card's device; ``copy=`` and ``non_blocking=`` change nothing a kernel does on one device.
_PLAIN_COPY = {"layout": (None, "enum:torch.strided"), "pin_memory": (None, False)}
#: ``to``'s memory formats that keep or make a plain copy's layout (``contiguous`` is templated as is)
_PLAIN_TO = {**_PLAIN_COPY, "memory_format": (None, "enum:torch.preserve_format", "enum:torch.contiguous_format")}


def _check_copy_options(card: OperatorCard, base: str, call: dict[str, Any]) -> None:
    """Refuse a copy to another device, layout or pinned memory, or a ``to`` into a memory format of its own.

    Python's ``x.to(copy=True)`` and ``x.to(memory_format=...)`` name ``x``'s own device. The variant
    key records a device's type, not its index: on cuda a named device is accepted for ``to``
    alone, whose eager override hands a call naming another GPU to eager (``packager.device_args``);
    a ``_to_copy`` may also run in compiled graphs, which do not check it."""
    device = call.get("device")
    if device is not None and device != f"device:{card.device}":
        raise UnsupportedCard(f"{card.op} to {str(device).removeprefix('device:')} from {card.device}: "
                              "a copy between devices is not a kernel")
    if device is not None and card.device != "cpu" and base != "to":
        raise UnsupportedCard(f"{card.op} names a {card.device} device, whose index its key does not record; "
                              "only aten::to's override checks it")
    for name, accepted in (_PLAIN_TO if base == "to" else _PLAIN_COPY).items():
        if name in call and call[name] not in accepted:
            given, plain = _named(call[name]), " or ".join(_named(a) for a in accepted)
            raise UnsupportedCard(f"{card.op} with {name}={given}: only {plain} is templated")


def _named(value: object) -> str:
    """A decoded enum argument (``enum:torch.strided``) or a plain value, as a reason names it."""
    return str(value).removeprefix("enum:")


def copy_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan | GatherPlan:
    """A copy into the card's output layout or dtype (a cast between float dtypes, a contiguous copy);
    where an int or bool dtype is involved, the gather engine's conversion as eager's ``copy_`` converts.

    ``type_as(self, other)`` is ``self.to(other.dtype)``: ``other`` is an input the kernel never reads."""
    _check_single_output(card)
    overload = split_op_name(card.op)[1]
    if base == "to" and overload not in ("dtype", "dtype_layout"):
        raise UnsupportedCard(f"aten::to.{overload} may change device; only to.dtype and to.dtype_layout are templated")
    _check_copy_options(card, base, call)
    x = tensor_argument(call)
    out = card.outputs[0]
    if x.spec.dtype not in FLOAT_DTYPES or out.dtype not in FLOAT_DTYPES:
        if "complex" in x.spec.dtype or "complex" in out.dtype:
            raise UnsupportedCard(f"{card.op} of {x.spec.dtype} into {out.dtype}: complex dtypes are not templated")
        read = f"in{x.index}[{offset([f'o{d}' for d in range(len(out.shape))], x.spec.stride)}]"
        value = converted(read, x.spec.dtype, out.dtype)
        return GatherPlan(family="gather_convert", summary=f"{card.op}: {x.spec.dtype} {x.spec.stride} to {out.dtype} "
                          f"{out.stride}", inputs=tuple(card.inputs), outputs=tuple(card.outputs),
                          branches=(Branch("", value),), helpers=conversion_helpers(value))
    return ElementwisePlan(
        family="elementwise_copy",
        summary=f"{card.op}: {x.spec.dtype} {x.spec.stride} to {card.outputs[0].dtype} {card.outputs[0].stride}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=(Operand(x.index, x.spec.dtype),), expression="x0",
    )


def binary_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    _check_single_output(card)
    a = tensor_argument(call)
    other = call.get("other")
    alpha = _num(call.get("alpha", 1), "alpha") if call.get("alpha") is not None else 1.0
    if base == "div" and call.get("rounding_mode") is not None:
        raise UnsupportedCard(f"div with rounding_mode={call['rounding_mode']!r} is not templated")
    operands = [Operand(a.index, a.spec.dtype)]
    if isinstance(other, TensorArg):
        operands.append(Operand(other.index, other.spec.dtype))
        b = "x1"
    else:
        b = cfloat(_num(other, "scalar operand"))
    return ElementwisePlan(
        family="elementwise_binary",
        summary=f"{card.op} to {card.outputs[0].shape} {card.outputs[0].dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=tuple(operands), expression=BINARY[base]("x0", b, alpha),
    )


def glu_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    """glu along a dim: the first half times the sigmoid of the second, both read in place as
    views of the input (the second at half the dim's extent further on), eager's formula."""
    _check_single_output(card)
    x = tensor_argument(call)
    shape, out, dim = x.spec.shape, card.outputs[0], call.get("dim", -1)
    if not shape or not isinstance(dim, int) or isinstance(dim, bool) or not -len(shape) <= dim < len(shape):
        raise UnsupportedCard(f"glu of {shape} along dim {dim!r} is not templated")
    dim %= len(shape)
    half = shape[dim] // 2
    if shape[dim] % 2 or out.shape != [*shape[:dim], half, *shape[dim + 1:]] or out.dtype != x.spec.dtype:
        raise UnsupportedCard(f"glu of {shape} {x.spec.dtype} along dim {dim} into {out.shape} {out.dtype}")
    strides = tuple(x.spec.stride)
    first, second = (Operand(x.index, x.spec.dtype, at, strides) for at in (0, half * strides[dim]))
    return ElementwisePlan(
        family="elementwise_binary", summary=f"{card.op} to {out.shape} {out.dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), operands=(first, second),
        expression="x0 * (1.0f / (1.0f + KF_EXP(-x1)))", uses_math=True,
    )


def prelu_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    """prelu (``nn.PReLU``): ``x`` where positive, else ``weight * x``, the weight one value or one per
    channel (dim 1), read as a broadcast view."""
    _check_single_output(card)
    x, weight = tensor_argument(call), call.get("weight")
    if not isinstance(weight, TensorArg) or x.spec.dtype not in FLOAT_DTYPES:
        raise UnsupportedCard("only prelu of a float input by a weight tensor is templated")
    shape, out = x.spec.shape, card.outputs[0]
    channels = shape[1] if len(shape) >= 2 else 1
    if weight.spec.numel not in (1, channels) or len(weight.spec.shape) > 1 or out.shape != shape:
        raise UnsupportedCard(f"prelu of {shape} by a weight of {weight.spec.shape} is not templated")
    per_channel = along_dim(weight, len(shape), 1) if weight.spec.numel > 1 else Operand(
        weight.index, weight.spec.dtype, strides=(0,) * len(shape))
    return ElementwisePlan(
        family="elementwise_binary", summary=f"{card.op} to {out.shape} {out.dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=(Operand(x.index, x.spec.dtype), per_channel),
        expression="(x0 > 0.0f ? x0 : x1 * x0)",
    )


def batch_norm_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    if call.get("training"):
        raise UnsupportedCard("batch norm in training mode updates running statistics; not templated")
    x = tensor_argument(call, "input")
    mean, var = call.get("running_mean"), call.get("running_var")
    if not isinstance(mean, TensorArg) or not isinstance(var, TensorArg):
        raise UnsupportedCard("batch norm without running statistics normalises by batch statistics")
    if len(x.spec.shape) < 2:
        raise UnsupportedCard("batch norm input has no channel dim")
    channels = x.spec.shape[1]
    eps = _num(call["eps"], "eps")
    stats = None
    saved = [i for i, spec in enumerate(card.outputs[1:3], start=1) if spec.numel]
    if any(spec.numel for spec in card.outputs[3:]):
        raise UnsupportedCard(f"{card.op}: a non-empty reserve output is not templated")
    if saved:
        # cuda's inference kernels return the running mean and 1/sqrt(running_var + eps) as saved stats
        if saved != [1, 2] or any(card.outputs[i].shape != [channels] for i in saved):
            raise UnsupportedCard(f"{card.op}: saved statistics of unexpected shape")
        stats = ChannelStats(mean.index, var.index, 1, 2, channels, eps)

    def per_channel(t: TensorArg) -> Operand:
        if t.spec.shape != [channels]:
            raise UnsupportedCard(f"per-channel tensor of shape {t.spec.shape}, expected [{channels}]")
        return along_dim(t, len(x.spec.shape), 1)

    operands = [Operand(x.index, x.spec.dtype), per_channel(mean), per_channel(var)]
    expr = f"(x0 - x1) * (1.0f / sqrtf(x2 + {cfloat(eps)}))"
    weight, bias = call.get("weight"), call.get("bias")
    if isinstance(weight, TensorArg):
        operands.append(per_channel(weight))
        expr = f"{expr} * x{len(operands) - 1}"
    if isinstance(bias, TensorArg):
        operands.append(per_channel(bias))
        expr = f"{expr} + x{len(operands) - 1}"
    return ElementwisePlan(
        family="batch_norm_inference",
        summary=f"{card.op} over {x.spec.shape} {x.spec.dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs),
        operands=tuple(operands), expression=expr, channel_stats=stats,
    )

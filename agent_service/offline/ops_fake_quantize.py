"""Fake quantization (``torch.fake_quantize_per_tensor_affine``, ``..._per_channel_affine``): quantize
to integers and back in one elementwise pass, in eager's own arithmetic.

Eager computes in float and casts to a 64-bit integer at a point that differs between the three
forms and between its cpu and cuda kernels; a cast of NaN or of a value out of range is where they
disagree (x86 gives ``INT64_MIN``, cuda and aarch64 saturate and give 0 for NaN). Each formula here
keeps its form's order of operations, so the kernel gives eager's bits on both devices:

- numbers for scale and zero point: the quotient rounded to nearest even, the zero point added,
  clamped in float (a NaN lands on ``quant_min``), the zero point taken off and scaled;
- a one-element scale and int32 zero point (``tensor_qparams``, the ``FakeQuantize`` module's
  per-tensor call): on the cpu as with numbers; on cuda the sum is cast to an integer before the
  clamp;
- a scale and int32 zero point per channel along ``axis``: the cpu casts the sum before the clamp;
  cuda casts the rounded quotient, adds the zero point as an integer and clamps as integers.
"""

from __future__ import annotations

from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, split_op_name, tensor_argument
from agent_service.offline.cxx import FLOAT_DTYPES, cfloat
from agent_service.offline.elementwise import ElementwisePlan, Operand, ValueRange
from agent_service.offline.ops_elementwise import _check_single_output, _num, along_dim
from kforge_domain.card import OperatorCard

OPS = ("fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine")


def _quant_range(call: dict[str, Any]) -> tuple[int, int]:
    """``quant_min`` and ``quant_max``, refused where integers of the range are not exact in float."""
    low, high = call.get("quant_min"), call.get("quant_max")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
        raise UnsupportedCard(f"fake quantization to [{low!r}, {high!r}]: the range is not two integers")
    assert isinstance(low, int) and isinstance(high, int)
    if not (low <= high and high - low < 2**24 and max(abs(low), abs(high)) < 2**24):
        raise UnsupportedCard(f"fake quantization to [{low}, {high}] is not templated")
    return low, high


def _quotient(scale: str) -> str:
    return f"rintf(x0 * (1.0f / {scale}))"


def _by_numbers(call: dict[str, Any], low: int, high: int) -> str:
    scale, zero = _num(call["scale"], "scale"), _num(call["zero_point"], "zero_point")
    if not low <= zero <= high:
        raise UnsupportedCard(f"fake quantization to [{low}, {high}] with zero point {zero:g} is not templated")
    s, z = cfloat(scale), cfloat(zero)
    return f"(fminf(fmaxf({_quotient(s)} + {z}, {cfloat(low)}), {cfloat(high)}) - {z}) * {s}"


def _tensor(call: dict[str, Any], name: str, dtype: str) -> TensorArg:
    value = call.get(name)
    if not isinstance(value, TensorArg) or value.spec.dtype != dtype:
        given = value.spec.dtype if isinstance(value, TensorArg) else type(value).__name__
        raise UnsupportedCard(f"fake quantization with a {given} {name}: only a {dtype} tensor is templated")
    return value


def _per_tensor(card: OperatorCard, call: dict[str, Any], low: int, high: int) -> ElementwisePlan:
    x = tensor_argument(call)
    if not isinstance(call.get("scale"), TensorArg):
        return _plan(card, (Operand(x.index, x.spec.dtype),), _by_numbers(call, low, high))
    scale, zero = _tensor(call, "scale", "float32"), _tensor(call, "zero_point", "int32")
    if scale.spec.numel != 1 or zero.spec.numel != 1:
        raise UnsupportedCard(f"per-tensor fake quantization by a scale of {scale.spec.shape} and a zero point "
                              f"of {zero.spec.shape}: only one of each is templated")
    lo, hi = cfloat(low), cfloat(high)
    every = tuple(0 for _ in card.outputs[0].shape)
    operands = (Operand(x.index, x.spec.dtype), Operand(scale.index, "float32", strides=every),
                Operand(zero.index, "int32", strides=every))
    cpu = f"(float)((long long)fminf(fmaxf({_quotient('x1')} + x2, {lo}), {hi}) - (long long)x2) * x1"
    cuda = f"(fminf({hi}, fmaxf({lo}, (float)kf_f2ll({_quotient('x1')} + x2))) - x2) * x1"
    return _plan(card, operands, cpu, cuda)


def _per_channel(card: OperatorCard, call: dict[str, Any], low: int, high: int) -> ElementwisePlan:
    x = tensor_argument(call)
    scale, zero = _tensor(call, "scale", "float32"), _tensor(call, "zero_point", "int32")
    axis, shape = call.get("axis"), x.spec.shape
    if not isinstance(axis, int) or isinstance(axis, bool) or not 0 <= axis < len(shape):
        raise UnsupportedCard(f"per-channel fake quantization of {shape} along axis {axis!r} is not templated")
    if scale.spec.shape != [shape[axis]] or zero.spec.shape != [shape[axis]]:
        raise UnsupportedCard(f"per-channel fake quantization of {shape} along axis {axis} by a scale of "
                              f"{scale.spec.shape} and a zero point of {zero.spec.shape}")

    operands = (Operand(x.index, x.spec.dtype), along_dim(scale, len(shape), axis),
                along_dim(zero, len(shape), axis))
    cpu = (f"(fminf(fmaxf(kf_int64_cast_value(x2 + {_quotient('x1')}), {cfloat(low)}), {cfloat(high)}) - x2) * x1")
    integer = f"(long long)((unsigned long long)kf_f2ll({_quotient('x1')}) + (unsigned long long)(long long)x2)"
    cuda = f"(float)(kf_clamp_ll({integer}, {low}LL, {high}LL) - (long long)x2) * x1"
    # eager refuses a zero point outside the range; the cpu kernel reports it so that eager raises
    return _plan(card, operands, cpu, cuda, (ValueRange(zero.index, low, high),))


def _plan(card: OperatorCard, operands: tuple[Operand, ...], expression: str, cuda_expression: str = "",
          value_ranges: tuple[ValueRange, ...] = ()) -> ElementwisePlan:
    return ElementwisePlan(
        family="elementwise_unary", summary=f"{card.op} over {card.outputs[0].shape} {card.outputs[0].dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), operands=operands, expression=expression,
        cuda_expression=cuda_expression, value_ranges=value_ranges, integer_operands=True,
    )


def fake_quantize_plan(card: OperatorCard, base: str, call: dict[str, Any]) -> ElementwisePlan:
    """A fake quantization of a float tensor into its own dtype, by numbers or tensors (see the module)."""
    _check_single_output(card)
    x = tensor_argument(call)
    if x.spec.dtype not in FLOAT_DTYPES or card.outputs[0].dtype != x.spec.dtype:
        raise UnsupportedCard(f"{card.op} of {x.spec.dtype} into {card.outputs[0].dtype} is not templated")
    low, high = _quant_range(call)
    if base == "fake_quantize_per_channel_affine":
        return _per_channel(card, call, low, high)
    if split_op_name(card.op)[1] not in ("default", "tensor_qparams"):
        raise UnsupportedCard(f"{card.op} is not templated")
    return _per_tensor(card, call, low, high)

"""Under an eager .cast, every call form of an overridden op returns what eager PyTorch returns.

For each family the offline proposer covers, a card is captured from one concrete call, the way
capture records it (a dispatch mode under the grad mode the spec names; capture's default is
inference), the offline kernel for it is compiled with g++ and packaged in a .cast of its own.
Hypothesis then draws calls of the same op in other forms: Python numbers and 0-dim tensors of
other dtypes in tensor slots, keywords, ``out=``, broadcasting, empty and non-contiguous
tensors, other dtypes, inference tensors, inputs that require grad, other grad modes, and for
module cards modules that were changed after capture.

Each call is rebuilt from its recipe and run twice, once plain and once inside
``cast.applied_to(...)``. Both runs must agree: the same exception type when eager raises, no
exception otherwise; the same result types, dtypes, shapes, strides, storage offsets,
``requires_grad`` and inference flags, the same aliasing of inputs, the same gradients and the
same input values after the call. Values are compared exactly when no kernel ran (a miss runs
the original kernel) and to the dtype tolerance of tests/agent_service/test_offline_cpu.py
when one did.

Beside the drawn forms, four fixed sweeps report every card at once: each card's own call (the
kernel must run: ``cast.stats()`` counts a hit), the same call with its input and weights
requiring grad, every Python number against every dtype as a 0-dim and a dimensioned tensor
in the number slots of the binary ops, and nan, inf, -inf and -0.0 in one input at a time.

Spellings are Python source over the spec's argument names, evaluated to functions: what a
failing example prints is the code that ran.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from agent_service.offline import ops_elementwise, ops_fake_quantize
from agent_service.offline.proposer import propose_offline
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ProposeRequest
from packager import load_cast
from packager.format import build_cast
from packager.runtime import Cast
from tests.agent_service import agent_modules
from tests.agent_service.agent_cards import aten_card, compile_cpu, module_card
from tests.packager.conftest import MODEL, entry

aten = torch.ops.aten
bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)

# What a kernel's output may differ from eager by (tests/agent_service/test_offline_cpu.py):
# rel_l2 <= tol and max |error| / max |eager| <= 4 * tol. Other dtypes are compared exactly.
TOLERANCE = {f32: 2e-5, f16: 2e-3, bf16: 1.2e-2}

GRAD_MODES: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
    "grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode,
}
DTYPES = (f32, f16, bf16, f64, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool, torch.complex64)
# Python numbers a tensor slot may be given: a float, int, bool or complex, ordinary and extreme.
NUMBERS = (1e-5, 2.5, -0.0, 0.5, float("nan"), float("inf"), 1e39, 2, 0, -3, 300, 2**40, True, False, 1j, 0.5 - 2j)
SPECIAL_VALUES = (float("nan"), float("inf"), float("-inf"), -0.0)
NAMESPACE = {"torch": torch, "F": F, "nn": nn, "agent_modules": agent_modules}


# --- tensors, rebuilt with the same values for every run of a call -----------------------------


@dataclass(frozen=True)
class TensorRecipe:
    """A tensor argument: its layout and values, made afresh (the same each time) for every run."""

    shape: tuple[int, ...]
    dtype: torch.dtype = f32
    layout: str = "contiguous"
    seed: int = 0
    grad: bool = False  # the layout's base is a leaf that requires grad
    inference: bool = False  # made under inference_mode, then used wherever the call runs
    special: bool = False  # its first elements are nan, inf, -inf, -0.0
    positive: bool = False  # |randn| + 0.5, for variances

    def __repr__(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        flags = [f for f, on in (("grad", self.grad), ("inference", self.inference), ("special", self.special),
                                 ("positive", self.positive)) if on]
        return f"{dtype}{list(self.shape)}:{self.layout}:seed={self.seed}" + "".join(f":{f}" for f in flags)

    def build(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tensor the call receives and, when it requires grad, the leaf whose .grad to compare."""
        base_shape, view = _layout(self.shape, self.layout)
        with torch.inference_mode() if self.inference else contextlib.nullcontext():
            base = _values(base_shape, self.dtype, self.seed, positive=self.positive, special=self.special)
            leaf = base.requires_grad_() if self.grad else None
            return view(base), leaf


def _layout(shape: tuple[int, ...], layout: str) -> tuple[tuple[int, ...], Callable[[torch.Tensor], torch.Tensor]]:
    """The shape of the storage to fill and how the argument views it."""
    numel = math.prod(shape)
    if layout == "contiguous":
        return shape, lambda t: t
    if layout == "transposed":
        return (*shape[:-2], shape[-1], shape[-2]), lambda t: t.transpose(-1, -2)
    if layout == "sliced":
        return (*shape[:-1], 2 * shape[-1]), lambda t: t[..., ::2]
    if layout == "offset":  # 4 elements in: aligned to 16 bytes for float32, another storage offset
        return (numel + 4,), lambda t: t[4:].view(shape)
    if layout == "unaligned":
        return (numel + 1,), lambda t: t[1:].view(shape)
    if layout == "channels_last":
        n, c, h, w = shape
        return (n, h, w, c), lambda t: t.permute(0, 3, 1, 2)
    if layout == "expanded":
        return (1, *shape[1:]), lambda t: t.expand(shape)
    raise ValueError(f"unknown layout {layout!r}")


def layouts_for(shape: tuple[int, ...]) -> tuple[str, ...]:
    layouts = ["contiguous", "offset", "unaligned"]
    if len(shape) >= 1:
        layouts.append("sliced")
    if len(shape) >= 2:
        layouts.append("transposed")
    if len(shape) == 4:
        layouts.append("channels_last")
    if len(shape) >= 1 and shape[0] > 1:
        layouts.append("expanded")
    return tuple(layouts)


def _values(shape: tuple[int, ...], dtype: torch.dtype, seed: int, *, positive: bool, special: bool) -> torch.Tensor:
    values = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2
    if positive:
        values = values.abs() + 0.5
    if special and values.numel():
        n = min(values.numel(), len(SPECIAL_VALUES))
        values.view(-1)[:n] = torch.tensor(SPECIAL_VALUES[:n])
    if dtype.is_floating_point or dtype.is_complex:
        return values.to(dtype)
    if dtype is torch.bool:
        return values > 0
    return (values.abs() if dtype is torch.uint8 else values).mul(3).round().to(dtype)


def _is_differentiable(dtype: torch.dtype) -> bool:
    return dtype in (f32, f64, f16, bf16)


# --- specs: one card each, and the other spellings of its op ------------------------------------


@dataclass(frozen=True)
class Slot:
    """What a drawn call may put in one argument instead of the card's value."""

    shapes: tuple[tuple[int, ...], ...] = ()  # other shapes, beside the card's
    numbers: bool = False  # whether a Python number may stand there (a tensor slot of an aten op)


@dataclass(frozen=True)
class OpSpec:
    """One card: the concrete call it is captured from, and other spellings of the same op.

    ``spellings[0]`` is the card's call; every spelling is Python source over ``names`` (and
    ``out`` where it passes one). A module spec names its module's constructor in ``module``;
    its spellings call the module as ``m`` and ``tweaks`` change the module before a call.
    """

    name: str
    family: str
    op: torch._ops.OpOverload | None  # the aten overload the card's call records; None for a module card
    names: tuple[str, ...]
    args: tuple[object, ...]  # the card's arguments: recipes for tensors, or Python numbers
    spellings: tuple[str, ...]
    slots: tuple[Slot, ...]
    capture_mode: str = "inference"
    module: str | None = None
    tweaks: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return self.name

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how hypothesis prints a falsifying example
        printer.text(repr(self))

    def function(self, spelling: str) -> Callable[..., Any]:
        return _function(spelling, self.parameters(spelling))

    def parameters(self, spelling: str) -> tuple[str, ...]:
        own = ("m", *self.names) if self.module else self.names
        return (*own, "out") if "out=out" in spelling else own


@cache
def _function(spelling: str, parameters: tuple[str, ...]) -> Callable[..., Any]:
    return eval(f"lambda {', '.join(parameters)}: {spelling}", NAMESPACE)


X = TensorRecipe((4, 33))
ELEMENTWISE_SHAPES = ((0, 33), (), (33,), (2, 4, 33), (2, 4, 3, 11))
BROADCAST_SHAPES = ((33,), (1, 33), (4, 1), (), (0, 33), (2, 4, 33))


def _unary(name: str, op: torch._ops.OpOverload, *spellings: str) -> OpSpec:
    return OpSpec(name, "elementwise_unary", op, ("x",), (X,), spellings, (Slot(ELEMENTWISE_SHAPES),))


BINARY_SPELLINGS = {
    "add": ("a + b", "b + a", "torch.add(a, b)", "torch.add(a, b, alpha=2)", "a.add(b, alpha=0.5)",
            "torch.add(a, b, out=out)"),
    "sub": ("a - b", "b - a", "torch.sub(a, b)", "torch.sub(a, b, alpha=0.5)", "torch.subtract(a, b, alpha=2)",
            "torch.sub(a, b, out=out)"),
    "rsub": ("b - a", "torch.rsub(a, b)", "torch.rsub(a, b, alpha=2)", "a - b", "torch.sub(b, a)"),
    "mul": ("a * b", "b * a", "torch.mul(a, b)", "a.mul(b)", "torch.multiply(a, b)", "torch.mul(a, b, out=out)"),
    "div": ("a / b", "b / a", "torch.div(a, b)", "torch.div(a, b, rounding_mode='floor')",
            "torch.div(a, b, rounding_mode='trunc')", "torch.true_divide(a, b)", "torch.div(a, b, out=out)"),
    "maximum": ("torch.maximum(a, b)", "torch.max(a, b)", "a.maximum(b)", "torch.maximum(a, b, out=out)"),
    "minimum": ("torch.minimum(a, b)", "torch.min(a, b)", "a.minimum(b)", "torch.minimum(a, b, out=out)"),
}


TERNARY_SPECS = [
    OpSpec("addcmul", "elementwise_ternary", aten.addcmul.default, ("a", "b", "c"),
           (X, replace(X, seed=1), replace(X, seed=2)),
           ("torch.addcmul(a, b, c, value=0.5)", "torch.addcmul(a, b, c)", "a.addcmul(b, c, value=2)",
            "torch.addcmul(a, b, c, value=0.5, out=out)", "a + 0.5 * b * c"),
           (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES, numbers=True), Slot(BROADCAST_SHAPES))),
    OpSpec("lerp_scalar", "elementwise_ternary", aten.lerp.Scalar, ("a", "b"), (X, replace(X, seed=1)),
           ("torch.lerp(a, b, 0.75)", "torch.lerp(a, b, 0.25)", "a.lerp(b, 1.0)", "torch.lerp(a, b, 0.75, out=out)",
            "torch.lerp(a, b, torch.tensor(0.75))"),
           (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES))),
    OpSpec("nan_to_num", "elementwise_unary", aten.nan_to_num.default, ("x",), (X,),
           ("torch.nan_to_num(x)", "x.nan_to_num(0.0)", "torch.nan_to_num(x, nan=1.0, posinf=2.0)",
            "torch.nan_to_num(x, out=out)", "x.nan_to_num_()"), (Slot(ELEMENTWISE_SHAPES),)),
    OpSpec("glu_halves", "elementwise_binary", aten.glu.default, ("x",), (TensorRecipe((4, 34)),),
           ("F.glu(x, -1)", "F.glu(x)", "nn.GLU(1)(x)", "F.glu(x, dim=0)", "F.glu(x.double(), -1)", "F.glu(x, 5)",
            "x.chunk(2, -1)[0] * x.chunk(2, -1)[1].sigmoid()"),
           (Slot(((4, 34), (2, 4, 34), (4, 0), (4, 33), (34,), (1, 2))),)),
]


def _binary(name: str, op: torch._ops.OpOverload, a: TensorRecipe, b: object, card_spelling: str) -> OpSpec:
    base = op._schema.name.removeprefix("aten::")
    others = tuple(s for s in BINARY_SPELLINGS[base] if s != card_spelling)
    slots = (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES, numbers=True))
    return OpSpec(name, "elementwise_binary", op, ("a", "b"), (a, b), (card_spelling, *others), slots)


def _rowwise(name: str, family: str, op: torch._ops.OpOverload, names: tuple[str, ...], args: tuple[object, ...],
             spellings: tuple[str, ...], shapes: tuple[tuple[tuple[int, ...], ...], ...],
             capture_mode: str = "inference") -> OpSpec:
    return OpSpec(name, family, op, names, args, spellings, tuple(Slot(s) for s in shapes), capture_mode)


def _module(name: str, family: str, module: str, args: tuple[TensorRecipe, ...], shapes: tuple[tuple[int, ...], ...],
            tweaks: tuple[str, ...] = ()) -> OpSpec:
    spellings = ("m(x)", "m.forward(x)", "nn.Sequential(m)(x)", "m(x, x)")
    return OpSpec(name, family, None, ("x",), args, spellings, (Slot(shapes),), module=module,
                  tweaks=("m.eval()", "m.requires_grad_(False)", "m.to(torch.bfloat16)", "m.double()", *tweaks))


UNARY_SPECS = [
    _unary("relu", aten.relu.default, "torch.relu(x)", "F.relu(x)", "x.relu()", "nn.ReLU()(x)",
           "torch.relu(x, out=out)"),
    _unary("gelu_tanh", aten.gelu.default, "F.gelu(x, approximate='tanh')", "F.gelu(x)",
           "F.gelu(x, approximate='none')", "nn.GELU('tanh')(x)"),
    _unary("silu", aten.silu.default, "F.silu(x)", "nn.SiLU()(x)", "x * torch.sigmoid(x)"),
    _unary("sigmoid", aten.sigmoid.default, "torch.sigmoid(x)", "x.sigmoid()", "F.sigmoid(x)",
           "torch.sigmoid(x, out=out)"),
    _unary("tanh", aten.tanh.default, "torch.tanh(x)", "x.tanh()", "torch.tanh(x, out=out)"),
    _unary("exp", aten.exp.default, "torch.exp(x)", "x.exp()", "torch.exp(x, out=out)"),
    _unary("neg", aten.neg.default, "-x", "torch.neg(x)", "x.neg()", "torch.negative(x)", "torch.neg(x, out=out)"),
    _unary("abs", aten.abs.default, "torch.abs(x)", "abs(x)", "x.abs()", "torch.absolute(x)",
           "torch.abs(x, out=out)"),
    _unary("sqrt", aten.sqrt.default, "torch.sqrt(x)", "x.sqrt()", "x ** 0.5", "torch.sqrt(x, out=out)"),
    _unary("rsqrt", aten.rsqrt.default, "torch.rsqrt(x)", "x.rsqrt()", "torch.rsqrt(x, out=out)"),
    _unary("reciprocal", aten.reciprocal.default, "torch.reciprocal(x)", "x.reciprocal()", "1 / x", "2 / x",
           "torch.reciprocal(x, out=out)"),
    _unary("log", aten.log.default, "torch.log(x)", "x.log()", "torch.log(x, out=out)"),
    _unary("sin", aten.sin.default, "torch.sin(x)", "x.sin()", "torch.sin(x, out=out)"),
    _unary("cos", aten.cos.default, "torch.cos(x)", "x.cos()", "torch.cos(x, out=out)"),
    _unary("hardswish", aten.hardswish.default, "F.hardswish(x)", "nn.Hardswish()(x)"),
    _unary("hardsigmoid", aten.hardsigmoid.default, "F.hardsigmoid(x)", "nn.Hardsigmoid()(x)"),
    _unary("leaky_relu", aten.leaky_relu.default, "F.leaky_relu(x, 0.2)", "F.leaky_relu(x, negative_slope=0.2)",
           "F.leaky_relu(x)", "F.leaky_relu(x, 2)", "nn.LeakyReLU(0.2)(x)"),
    _unary("hardtanh", aten.hardtanh.default, "F.hardtanh(x, -0.5, 0.5)", "F.hardtanh(x, min_val=-0.5, max_val=0.5)",
           "F.hardtanh(x)", "F.hardtanh(x, -1, 1)", "F.relu6(x)", "F.hardtanh(x, 0.5, -0.5)"),
    _unary("relu6", aten.relu6.default, "F.relu6(x)", "torch._C._nn.relu6(x)", "F.hardtanh(x, 0.0, 6.0)",
           "nn.ReLU6()(x)", "F.relu6(x, inplace=True)"),
    _unary("clamp", aten.clamp.default, "torch.clamp(x, -0.5, 0.7)", "torch.clamp(x, min=-0.5, max=0.7)",
           "x.clamp(-0.5)", "x.clamp(max=0.7)", "torch.clamp(x, -1, 1)", "x.clamp(0.7, -0.5)", "torch.clamp(x)",
           "torch.clamp(x, torch.tensor(-0.5), torch.tensor(0.7))", "torch.clamp(x, -0.5, 0.7, out=out)"),
    _unary("pow", aten.pow.Tensor_Scalar, "x ** 2", "x ** 2.0", "torch.pow(x, 2)", "x.pow(exponent=2)", "x ** 0.5",
           "x ** -1", "2 ** x", "x ** torch.tensor(2)", "torch.pow(x, 2, out=out)"),
    _unary("elu", aten.elu.default, "F.elu(x)", "F.elu(x, alpha=0.5)", "F.elu(x, 1)", "F.selu(x)", "F.celu(x)",
           "nn.ELU()(x)"),
    _unary("softplus", aten.softplus.default, "F.softplus(x)", "F.softplus(x, beta=2)", "F.softplus(x, 1, 20)",
           "F.softplus(x, threshold=0.5)", "nn.Softplus()(x)", "F.softplus(x, 0.5, 1)", "F.mish(x)"),
    _unary("mish", aten.mish.default, "F.mish(x)", "nn.Mish()(x)", "x * torch.tanh(F.softplus(x))",
           "F.mish(x, inplace=True)"),
    _unary("clamp_min", aten.clamp_min.default, "torch.clamp_min(x, 0.25)", "x.clamp_min(0.25)",
           "x.clamp(min=0.25)", "torch.clamp_min(x, torch.tensor(0.25))", "x.clamp_min(float('nan'))",
           "torch.clamp_min(x, 0.25, out=out)"),
    _unary("clamp_max", aten.clamp_max.default, "torch.clamp_max(x, -0.5)", "x.clamp_max(-0.5)", "x.clamp(max=-0.5)",
           "x.clamp_max(2)", "torch.clamp_max(x, -0.5, out=out)"),
    _unary("threshold", aten.threshold.default, "F.threshold(x, 0.1, -3.0)", "nn.Threshold(0.1, -3.0)(x)",
           "F.threshold(x, 0.1, 20)", "torch.threshold(x, 0.1, -3.0)"),
    _unary("log_sigmoid", aten.log_sigmoid.default, "F.logsigmoid(x)", "nn.LogSigmoid()(x)",
           "torch._C._nn.log_sigmoid(x, out=out)", "-F.softplus(-x)"),
    _unary("erf", aten.erf.default, "torch.erf(x)", "x.erf()", "torch.special.erf(x)", "torch.erf(x, out=out)"),
    _unary("erfinv", aten.erfinv.default, "torch.erfinv(x)", "x.erfinv()", "torch.special.erfinv(x)",
           "torch.erfinv(x, out=out)", "torch.erfinv(x.clamp(-0.9, 0.9))", "x.clone().erfinv_()"),
    _unary("expm1", aten.expm1.default, "torch.expm1(x)", "x.expm1()", "torch.special.expm1(x)"),
    _unary("log1p", aten.log1p.default, "torch.log1p(x)", "x.log1p()", "torch.special.log1p(x)"),
    _unary("log2", aten.log2.default, "torch.log2(x)", "x.log2()", "torch.log2(x, out=out)"),
    _unary("exp2", aten.exp2.default, "torch.exp2(x)", "x.exp2()", "torch.special.exp2(x)", "2 ** x"),
    _unary("tan", aten.tan.default, "torch.tan(x)", "x.tan()"),
    _unary("atan", aten.atan.default, "torch.atan(x)", "x.atan()", "torch.arctan(x)"),
    _unary("square", aten.square.default, "torch.square(x)", "x.square()", "x ** 2", "x * x"),
    _unary("floor", aten.floor.default, "torch.floor(x)", "x.floor()", "x // 1", "torch.floor(x, out=out)"),
    _unary("ceil", aten.ceil.default, "torch.ceil(x)", "x.ceil()"),
    _unary("trunc", aten.trunc.default, "torch.trunc(x)", "x.trunc()", "torch.fix(x)"),
    _unary("round", aten.round.default, "torch.round(x)", "x.round()", "torch.round(x, decimals=2)",
           "torch.round(x, decimals=0)"),
    _unary("sign", aten.sign.default, "torch.sign(x)", "x.sign()", "torch.sgn(x)"),
    _unary("sgn", aten.sgn.default, "torch.sgn(x)", "x.sgn()", "torch.sign(x)"),
]

FAKE_QUANTIZE = "torch.fake_quantize_per_tensor_affine"
PER_CHANNEL = "torch.fake_quantize_per_channel_affine"
FAKE_QUANTIZE_SPECS = [
    _unary("fake_quantize", aten.fake_quantize_per_tensor_affine.default,
           "torch.fake_quantize_per_tensor_affine(x, 0.1, 3, 0, 255)",
           "torch.fake_quantize_per_tensor_affine(x, scale=0.1, zero_point=3, quant_min=0, quant_max=255)",
           "torch.fake_quantize_per_tensor_affine(x, 0.2, 3, 0, 255)",
           "torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127)",
           "torch.fake_quantize_per_tensor_affine(x, torch.tensor(0.1), torch.tensor(3, dtype=torch.int32), 0, 255)"),
    OpSpec("fake_quantize_tensor_qparams", "elementwise_unary", aten.fake_quantize_per_tensor_affine.tensor_qparams,
           ("x", "s", "z"), (X, TensorRecipe((1,), positive=True), TensorRecipe((1,), torch.int32)),
           (f"{FAKE_QUANTIZE}(x, s, z, -128, 127)", f"{FAKE_QUANTIZE}(x, s.reshape(()), z.reshape(()), -128, 127)",
            f"{FAKE_QUANTIZE}(x, s, z, 0, 255)", f"{FAKE_QUANTIZE}(x, s.double(), z, -128, 127)",
            f"{FAKE_QUANTIZE}(x, s, z.long(), -128, 127)", f"{FAKE_QUANTIZE}(x, 0.1, 3, -128, 127)",
            f"{FAKE_QUANTIZE}(x, s, z + 200, -128, 127)"),
           (Slot(ELEMENTWISE_SHAPES), Slot(), Slot())),
    OpSpec("fake_quantize_per_channel", "elementwise_unary", aten.fake_quantize_per_channel_affine.default,
           ("x", "s", "z"), (X, TensorRecipe((33,), positive=True), TensorRecipe((33,), torch.int32)),
           (f"{PER_CHANNEL}(x, s, z, 1, -128, 127)", f"{PER_CHANNEL}(x, s, z, -1, -128, 127)",
            f"{PER_CHANNEL}(x, s, z, 1, -8, 7)", f"{PER_CHANNEL}(x, s, z.float(), 1, -128, 127)",
            f"{PER_CHANNEL}(x.t(), s[:4], z[:4], 1, -128, 127)",
            f"{PER_CHANNEL}(x, s, z + 120, 1, -128, 127)",
            f"{PER_CHANNEL}(x[:1], s, z, 1, 0, 255)"),
           (Slot(ELEMENTWISE_SHAPES), Slot(), Slot())),
]

# one card for each binary op whose other operand may be a Python number
NUMBER_CARDS = ("add_python_float", "sub_alpha_column", "rsub_python_int", "mul_python_float", "div_column",
                "floor_divide_by_8", "remainder_by_minus_5")
BINARY_SPECS = [
    _binary("add", aten.add.Tensor, X, replace(X, seed=1), "a + b"),
    _binary("add_python_float", aten.add.Tensor, X, 1e-5, "a + b"),
    _binary("add_row_bf16", aten.add.Tensor, replace(X, dtype=bf16), TensorRecipe((33,), bf16), "a + b"),
    _binary("sub_alpha_column", aten.sub.Tensor, X, TensorRecipe((4, 1)), "torch.sub(a, b, alpha=0.5)"),
    _binary("rsub_python_int", aten.rsub.Scalar, X, 2, "b - a"),
    _binary("mul_python_float", aten.mul.Tensor, X, 2.5, "a * b"),
    _binary("mul_row", aten.mul.Tensor, X, TensorRecipe((33,)), "a * b"),
    _binary("div_column", aten.div.Tensor, X, TensorRecipe((4, 1), positive=True), "a / b"),
    _binary("maximum", aten.maximum.default, X, replace(X, seed=1), "torch.maximum(a, b)"),
    _binary("minimum", aten.minimum.default, X, replace(X, seed=1), "torch.minimum(a, b)"),
]

TO_SPELLINGS = ("x.to(torch.bfloat16)", "x.to(dtype=torch.bfloat16)", "x.bfloat16()", "x.to(torch.bfloat16, copy=True)",
                "x.to(torch.float32)", "x.to(torch.float16)", "x.to('cpu', torch.bfloat16)", "x.type(torch.bfloat16)",
                "x.to(torch.bfloat16, memory_format=torch.channels_last)", "x.to(torch.int32)",
                "x.to(torch.bfloat16, non_blocking=True)", "x.to(torch.ones(1, dtype=torch.bfloat16))")
# ``x.to(copy=True)`` and ``x.to(memory_format=...)`` reach to.dtype_layout, naming x's own dtype and device
TO_LAYOUT_SPELLINGS = ("x.to(copy=True)", "x.to('cpu', copy=True)", "x.to(torch.device('cpu'), copy=True)",
                       "x.to(memory_format=torch.contiguous_format)", "x.to(copy=True, non_blocking=True)",
                       "x.to(memory_format=torch.preserve_format, copy=True)", "x.to('cpu')", "x.to(copy=False)",
                       "x.to(memory_format=torch.channels_last)", "x.to(dtype=torch.bfloat16, copy=True)",
                       "torch.ops.aten.to.dtype_layout(x, dtype=torch.float32, copy=True)",
                       "torch.ops.aten.to.dtype_layout(x, dtype=torch.bfloat16, device='cpu', layout=torch.strided)")
COPY_SPECS = [
    _rowwise("clone", "elementwise_copy", aten.clone.default, ("x",), (X,),
             ("x.clone()", "torch.clone(x)", "x.clone(memory_format=torch.contiguous_format)",
              "x.clone(memory_format=torch.preserve_format)", "x.clone(memory_format=torch.channels_last)",
              "x.detach().clone()"), (ELEMENTWISE_SHAPES,)),
    _rowwise("to_dtype", "elementwise_copy", aten.to.dtype, ("x",), (X,), TO_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    _rowwise("to_dtype_layout", "elementwise_copy", aten.to.dtype_layout, ("x",), (X,), TO_LAYOUT_SPELLINGS,
             (ELEMENTWISE_SHAPES,)),
    _rowwise("_to_copy", "elementwise_copy", aten._to_copy.default, ("x",), (X,), TO_SPELLINGS, (ELEMENTWISE_SHAPES,),
             capture_mode="grad"),
    # type_as decomposes to ``to``: overridden at CompositeImplicitAutograd, reached wherever autograd is off
    _rowwise("type_as", "elementwise_copy", aten.type_as.default, ("x", "y"),
             (replace(X, dtype=bf16), TensorRecipe((1,), f32, seed=1)),
             ("x.type_as(y)", "torch.Tensor.type_as(x, y)", "x.to(y.dtype)", "x.to(y)", "y.type_as(x)",
              "x.type(y.type())", "x.type_as(x)"), (ELEMENTWISE_SHAPES, ((1,), (4, 33), (0,), ()))),
    # an int or bool copied into a float, or the reverse: the gather engine's conversions
    _rowwise("to_float_of_int64", "gather_convert", aten.to.dtype, ("x",), (TensorRecipe((4, 33), torch.int64),),
             ("x.float()", "x.to(torch.float32)", "x.to(torch.bfloat16)", "x.double()", "x.half()", "x.long()",
              "x.to(torch.float32, copy=True)", "x.type(torch.float32)"), (ELEMENTWISE_SHAPES,)),
    _rowwise("to_int32_of_transposed_f32", "gather_convert", aten.to.dtype, ("x",), (replace(X, layout="transposed"),),
             ("x.int()", "x.to(torch.int32)", "x.long()", "x.to(torch.uint8)", "x.bool()", "x.int().float()"),
             (ELEMENTWISE_SHAPES,)),
    _rowwise("contiguous_of_transposed", "elementwise_copy", aten.contiguous.default, ("x",),
             (replace(X, layout="transposed"),),
             ("x.contiguous()", "x.contiguous(memory_format=torch.channels_last)", "x.reshape(-1)",
              "x.clone(memory_format=torch.contiguous_format)"), (ELEMENTWISE_SHAPES,)),
]

ROW_SHAPES = ((0, 33), (4, 0), (), (33,), (2, 4, 33), (2, 4, 3, 11))
SOFTMAX_SPELLINGS = ("torch.softmax(x, -1)", "F.softmax(x, dim=-1)", "x.softmax(-1)", "F.softmax(x, 0)",
                     "F.softmax(x, -1, dtype=torch.float64)", "nn.Softmax(dim=-1)(x)", "torch.softmax(x, -1, out=out)",
                     "torch._softmax(x, -1, False)")
LOG_SOFTMAX_SPELLINGS = tuple(s.replace("softmax", "log_softmax").replace("Softmax", "LogSoftmax")
                              for s in SOFTMAX_SPELLINGS)
X64, W64, B64 = TensorRecipe((6, 64)), TensorRecipe((64,), seed=1), TensorRecipe((64,), seed=2)
NORM_SHAPES = ((2, 3, 64), (0, 64), (64,), (6, 32), (6, 64, 1))
LAYER_NORM_SPELLINGS = ("F.layer_norm(x, (64,), w, b)", "F.layer_norm(x, [64], w, b, 1e-5)",
                        "F.layer_norm(x, (64,), w, b, eps=1e-6)", "F.layer_norm(x, (64,))", "F.layer_norm(x, (64,), w)",
                        "F.layer_norm(x, (64,), bias=b)", "torch.native_layer_norm(x, (64,), w, b, 1e-5)",
                        "F.layer_norm(x, (32,), w, b)")
X4, C8 = TensorRecipe((2, 8, 5, 5)), TensorRecipe((8,), seed=1)
CHANNEL_SHAPES = ((2, 8, 25), (2, 8), (0, 8, 5, 5), (2, 6, 5, 5), (1, 8, 1, 1))
GROUP_NORM_SPELLINGS = ("F.group_norm(x, 2, w, b, 1e-5)", "F.group_norm(x, 2, w, b)", "F.group_norm(x, 4, w, b)",
                        "F.group_norm(x, 2)", "F.group_norm(x, 2, w, b, eps=1e-6)", "F.group_norm(x, 3, w, b)",
                        "nn.GroupNorm(2, 8)(x)")
IM2COL_SPELLINGS = ("F.unfold(x, 3, padding=1)", "F.unfold(x, kernel_size=(3, 3), dilation=1, padding=1, stride=1)",
                    "nn.Unfold(3, padding=1)(x)", "torch._C._nn.im2col(x, (3, 3), (1, 1), (1, 1), (1, 1))",
                    "F.unfold(x, 3, padding=1, stride=2)", "F.unfold(x, 2)",
                    "F.unfold(x.transpose(2, 3), 3, padding=1)")
PIXEL_SHUFFLE_SPELLINGS = ("F.pixel_shuffle(x, 2)", "nn.PixelShuffle(2)(x)", "torch.pixel_shuffle(x, 2)",
                           "F.pixel_shuffle(x, upscale_factor=2)", "F.pixel_shuffle(x.transpose(2, 3), 2)",
                           "F.pixel_shuffle(x, 1)", "F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2)")
PRELU_SPELLINGS = ("F.prelu(x, w)", "torch.prelu(x, w)", "nn.PReLU(8)(x)", "nn.PReLU()(x)", "F.prelu(x, w[:1])",
                   "F.prelu(x.transpose(2, 3), w)", "F.prelu(x, 0.25 * w)")
INSTANCE_NORM_SPELLINGS = ("F.instance_norm(x, weight=w, bias=b)", "F.instance_norm(x)",
                           "F.instance_norm(x, None, None, w, b, True, 0.1, 1e-5)",
                           "F.instance_norm(x, weight=w, bias=b, eps=1e-3)", "nn.InstanceNorm2d(8, affine=True)(x)",
                           "F.instance_norm(x, weight=w)", "F.group_norm(x, 8, w, b)")
BATCH_NORM_ARGS = (X4, replace(C8, seed=3), replace(C8, seed=4, positive=True), C8, replace(C8, seed=2))
BATCH_NORM_SPELLINGS = ("F.batch_norm(x, mean, var, w, b)", "F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5)",
                        "F.batch_norm(x, mean, var)", "F.batch_norm(x, mean, var, w, b, eps=1e-3)",
                        "F.batch_norm(x, mean, var, w, b, training=True)", "F.batch_norm(x, None, None, w, b, True)",
                        "torch.batch_norm(x, w, b, mean, var, False, 0.1, 1e-5, False)")
POOL_X = TensorRecipe((2, 4, 7, 10))
POOL_SHAPES = ((4, 7, 10), (0, 4, 7, 10), (2, 4, 3, 3), (2, 4, 1, 1), (2, 4, 7))
ADAPTIVE_SPELLINGS = ("F.adaptive_avg_pool2d(x, (3, 4))", "F.adaptive_avg_pool2d(x, [3, 4])",
                      "F.adaptive_avg_pool2d(x, 3)", "F.adaptive_avg_pool2d(x, (None, 4))",
                      "nn.AdaptiveAvgPool2d((3, 4))(x)", "F.adaptive_avg_pool2d(x, 1)",
                      "torch._C._nn.adaptive_avg_pool2d(x, (3, 4), out=out)")
MAX_POOL_X = TensorRecipe((2, 4, 11, 11))
MAX_POOL_SPELLINGS = ("F.max_pool2d(x, 3, 2, 1)", "F.max_pool2d(x, kernel_size=3, stride=2, padding=1)",
                      "F.max_pool2d(x, (3, 3), (2, 2), (1, 1))", "F.max_pool2d(x, 3, 2, 1, ceil_mode=True)",
                      "F.max_pool2d(x, 3, 2, 1, dilation=2)", "F.max_pool2d(x, 3)",
                      "F.max_pool2d(x, 3, 2, 1, return_indices=True)", "nn.MaxPool2d(3, 2, 1)(x)",
                      "F.max_pool2d(x, 3, 2, 2)")
POOL_1D_X = TensorRecipe((2, 4, 23))
POOL_1D_SHAPES = ((4, 23), (0, 4, 23), (2, 4, 2), (2, 4, 24), (2, 4, 5, 5))
MAX_POOL_1D_SPELLINGS = ("F.max_pool1d(x, 3, 2, 1)", "F.max_pool1d(x, kernel_size=3, stride=2, padding=1)",
                         "F.max_pool1d(x, (3,), (2,), (1,))", "F.max_pool1d(x, 3, 2, 1, ceil_mode=True)",
                         "F.max_pool1d(x, 3, 2, 1, dilation=2)", "F.max_pool1d(x, 3)", "nn.MaxPool1d(3, 2, 1)(x)",
                         "F.max_pool1d(x, 3, 2, 1, return_indices=True)", "torch.max_pool1d(x, 3, 2, 1)")
AVG_POOL_1D_SPELLINGS = ("F.avg_pool1d(x, 4, 3, 2)", "F.avg_pool1d(x, kernel_size=4, stride=3, padding=2)",
                         "F.avg_pool1d(x, 4, 3, 2, ceil_mode=True)",
                         "F.avg_pool1d(x, 4, 3, 2, count_include_pad=False)", "F.avg_pool1d(x, 4)",
                         "nn.AvgPool1d(4, 3, 2)(x)", "torch.avg_pool1d(x, 4, 3, 2)")

ROW_SPECS = [
    _rowwise("sum_last", "reduction", aten.sum.dim_IntList, ("x",), (X,),
             ("x.sum(-1)", "x.sum(dim=-1)", "x.sum((-1,))", "x.sum(1)", "x.sum(-1, keepdim=True)",
              "x.sum(-1, dtype=torch.float64)", "torch.sum(x, -1, out=out)", "x.sum()", "x.sum([])", "x.sum(2)"),
             (ROW_SHAPES,)),
    _rowwise("sum_all", "reduction", aten.sum.default, ("x",), (X,),
             ("x.sum()", "torch.sum(x)", "x.sum(dtype=torch.float64)", "x.sum((0, 1))", "x.sum(-1)"), (ROW_SHAPES,)),
    _rowwise("mean_last_keepdim", "reduction", aten.mean.dim, ("x",), (X,),
             ("x.mean(-1, keepdim=True)", "x.mean(dim=-1, keepdim=True)", "x.mean([-1], True)", "x.mean(-1)",
              "x.mean((0, 1), True)", "x.mean(-1, True, dtype=torch.float64)", "torch.mean(x, -1, True, out=out)",
              "x.mean()"), (ROW_SHAPES,)),
    _rowwise("amax_last", "reduction", aten.amax.default, ("x",), (X,),
             ("x.amax(-1)", "torch.amax(x, dim=-1)", "x.amax((-1,))", "x.amax(-1, keepdim=True)", "x.amax()",
              "x.amax(0)", "torch.amax(x, -1, out=out)", "x.max(-1).values"), (ROW_SHAPES,)),
    _rowwise("var_last", "reduction", aten.var.dim, ("x",), (X,),
             ("x.var(-1)", "torch.var(x, -1)", "x.var(-1, unbiased=False)", "x.var(-1, correction=0)",
              "x.var(-1, keepdim=True)", "x.var()", "torch.var(x, -1, out=out)", "torch.var_mean(x, -1)[0]",
              "x.var(0)"), (ROW_SHAPES,)),
    _rowwise("std_last_biased", "reduction", aten.std.correction, ("x",), (X,),
             ("x.std(-1, correction=0)", "x.std(-1, unbiased=False)", "x.std(-1)", "torch.std(x, -1, correction=2)",
              "x.std(-1, correction=0, keepdim=True)", "torch.std(x, -1, correction=0, out=out)"), (ROW_SHAPES,)),
    _rowwise("mean_of_a_slice", "reduction", aten.mean.dim, ("x",), (X,),
             ("x[:, 1:].mean(1)", "x[:, 1:].mean(-1, keepdim=True)", "x[:, 2:].mean(1)", "x[1:, 1:].mean(1)",
              "x.mean(1)", "x[:, 1:].contiguous().mean(1)", "x[:, 1:].sum(1) / 32"), (ROW_SHAPES,)),
    _rowwise("logsumexp_last", "reduction", aten.logsumexp.default, ("x",), (X,),
             ("torch.logsumexp(x, -1)", "x.logsumexp(-1)", "torch.logsumexp(x, dim=-1, keepdim=True)",
              "torch.logsumexp(x, (0, 1))", "torch.logsumexp(x, -1, out=out)", "torch.special.logsumexp(x, -1)",
              "torch.logsumexp(x, 0)"), (ROW_SHAPES,)),
    _rowwise("vector_norm_last", "reduction", aten.linalg_vector_norm.default, ("x",), (X,),
             ("torch.linalg.vector_norm(x, dim=-1)", "x.norm(dim=-1)", "torch.norm(x, dim=-1)",
              "torch.linalg.vector_norm(x, 2, -1, True)", "torch.linalg.vector_norm(x, 1, -1)",
              "torch.linalg.vector_norm(x)", "torch.linalg.vector_norm(x, dim=-1, dtype=torch.float64)",
              "F.normalize(x, dim=-1)"), (ROW_SHAPES,)),
    _rowwise("softmax_int", "softmax", aten.softmax.int, ("x",), (X,), SOFTMAX_SPELLINGS, (ROW_SHAPES,)),
    _rowwise("_softmax", "softmax", aten._softmax.default, ("x",), (X,), SOFTMAX_SPELLINGS, (ROW_SHAPES,),
             capture_mode="grad"),
    _rowwise("log_softmax_int", "softmax", aten.log_softmax.int, ("x",), (X,), LOG_SOFTMAX_SPELLINGS, (ROW_SHAPES,)),
    _rowwise("_log_softmax", "softmax", aten._log_softmax.default, ("x",), (X,), LOG_SOFTMAX_SPELLINGS,
             (ROW_SHAPES,), capture_mode="grad"),
    _rowwise("layer_norm", "layer_norm", aten.layer_norm.default, ("x", "w", "b"), (X64, W64, B64),
             LAYER_NORM_SPELLINGS, (NORM_SHAPES, ((32,),), ((32,),))),
    _rowwise("native_layer_norm", "layer_norm", aten.native_layer_norm.default, ("x", "w", "b"), (X64, W64, B64),
             LAYER_NORM_SPELLINGS, (NORM_SHAPES, ((32,),), ((32,),)), capture_mode="grad"),
    _rowwise("rms_norm", "rms_norm", aten.rms_norm.default, ("x", "w"), (X64, W64),
             ("F.rms_norm(x, (64,), w, 1e-6)", "F.rms_norm(x, [64], w, eps=1e-6)", "F.rms_norm(x, (64,), w)",
              "F.rms_norm(x, (64,))", "F.rms_norm(x, (64,), w, 1e-5)", "nn.RMSNorm(64, eps=1e-6)(x)"),
             (NORM_SHAPES, ((32,),))),
    _rowwise("group_norm", "group_norm", aten.group_norm.default, ("x", "w", "b"), (X4, C8, replace(C8, seed=2)),
             GROUP_NORM_SPELLINGS[1:2] + GROUP_NORM_SPELLINGS[:1] + GROUP_NORM_SPELLINGS[2:],
             (CHANNEL_SHAPES, ((4,),), ((4,),))),
    _rowwise("native_group_norm", "group_norm", aten.native_group_norm.default, ("x", "w", "b"),
             (X4, C8, replace(C8, seed=2)), GROUP_NORM_SPELLINGS, (CHANNEL_SHAPES, ((4,),), ((4,),)),
             capture_mode="grad"),
    _rowwise("im2col", "gather_reshape", aten.im2col.default, ("x",), (X4,), IM2COL_SPELLINGS,
             (((4, 5, 6), (0, 3, 5, 6), (2, 3, 2, 2), (2, 3, 6, 5)),)),
    _rowwise("pixel_shuffle", "gather_reshape", aten.pixel_shuffle.default, ("x",), (X4,), PIXEL_SHUFFLE_SPELLINGS,
             (CHANNEL_SHAPES,)),
    _rowwise("prelu", "elementwise_binary", aten.prelu.default, ("x", "w"), (X4, C8), PRELU_SPELLINGS,
             (CHANNEL_SHAPES, ((1,),))),
    _rowwise("instance_norm", "group_norm", aten.instance_norm.default, ("x", "w", "b"), (X4, C8, replace(C8, seed=2)),
             INSTANCE_NORM_SPELLINGS, (CHANNEL_SHAPES, ((4,),), ((4,),))),
    _rowwise("batch_norm", "batch_norm_inference", aten.batch_norm.default, ("x", "mean", "var", "w", "b"),
             BATCH_NORM_ARGS, BATCH_NORM_SPELLINGS, (CHANNEL_SHAPES, ((4,),), ((4,),), ((4,),), ((4,),))),
    _rowwise("native_batch_norm", "batch_norm_inference", aten.native_batch_norm.default,
             ("x", "mean", "var", "w", "b"), BATCH_NORM_ARGS, BATCH_NORM_SPELLINGS,
             (CHANNEL_SHAPES, ((4,),), ((4,),), ((4,),), ((4,),)), capture_mode="grad"),
    _rowwise("adaptive_avg_pool2d", "adaptive_avg_pool", aten.adaptive_avg_pool2d.default, ("x",), (POOL_X,),
             ADAPTIVE_SPELLINGS, (POOL_SHAPES,)),
    _rowwise("_adaptive_avg_pool2d", "adaptive_avg_pool", aten._adaptive_avg_pool2d.default, ("x",), (POOL_X,),
             ADAPTIVE_SPELLINGS, (POOL_SHAPES,), capture_mode="grad"),
    _rowwise("global_avg_pool", "global_avg_pool", aten.adaptive_avg_pool2d.default, ("x",), (POOL_X,),
             ("F.adaptive_avg_pool2d(x, 1)", *ADAPTIVE_SPELLINGS[:-2]), (POOL_SHAPES,)),
    _rowwise("max_pool2d", "max_pool", aten.max_pool2d.default, ("x",), (MAX_POOL_X,), MAX_POOL_SPELLINGS,
             (((4, 11, 11), (0, 4, 11, 11), (2, 4, 2, 2), (2, 4, 12, 9)),)),
    _rowwise("max_pool1d", "max_pool", aten.max_pool1d.default, ("x",), (POOL_1D_X,), MAX_POOL_1D_SPELLINGS,
             (POOL_1D_SHAPES,)),
    _rowwise("avg_pool1d", "avg_pool", aten.avg_pool1d.default, ("x",), (POOL_1D_X,), AVG_POOL_1D_SPELLINGS,
             (POOL_1D_SHAPES,)),
]

# Data movement (the gather engine): raw copies, so any dtype of the card's is exact.
UPSAMPLE_X = TensorRecipe((2, 3, 4, 5))
UPSAMPLE_SPELLINGS = ("F.interpolate(x, scale_factor=2.0, mode='nearest')", "F.interpolate(x, scale_factor=2)",
                      "F.interpolate(x, size=(8, 10))", "nn.Upsample(scale_factor=2.0)(x)",
                      "F.upsample_nearest(x, scale_factor=2)", "F.interpolate(x, scale_factor=(2.0, 3.0))",
                      "F.interpolate(x, scale_factor=2.0, mode='nearest-exact')",
                      "torch._C._nn.upsample_nearest2d(x, None, [2.0, 2.0])",
                      "torch._C._nn.upsample_nearest2d(x, [8, 10], out=out)")
CAT_SPELLINGS = ("torch.cat([a, b], -1)", "torch.cat((a, b), dim=-1)", "torch.cat([a, b], 1)",
                 "torch.concat([a, b], -1)", "torch.concatenate([a, b], axis=-1)", "torch.cat([a, b])",
                 "torch.cat([b, a], -1)", "torch.cat([a, b], -1, out=out)", "torch.hstack([a, b])",
                 "torch.cat([a], -1)", "torch.cat([a, a, b], -1)")
CAT_AFTER_EMPTY_SPELLINGS = ("torch.cat([e, x])", "torch.cat([e, x], 0)", "torch.cat((e, x), dim=-1)",
                             "torch.cat([x, e])", "torch.cat([e, e, x])", "torch.cat([e, x], out=out)",
                             "torch.cat([e.to(torch.bfloat16), x])")
# ``i % 6``: indices in range for the card's 6 rows (a drawn ``x[i]`` may be out of range: eager raises)
INDEX_SPELLINGS = ("x[i % 6]", "x[i]", "torch.ops.aten.index.Tensor(x, [i % 6])", "x[i % 6, :]", "x[:, i % 6]",
                   "x[(i % 6).unsqueeze(1)]", "x[i % 6, i % 6]", "x.index_select(0, i % 6)", "x[i % 6 > 2]")
# ``i % 6``: rows in range; ``F.embedding(i, w)`` may be out of range or negative: eager raises, the kernel refuses
EMBEDDING_SPELLINGS = ("F.embedding(i % 6, w)", "torch.embedding(w, i % 6)", "F.embedding(i % 6, w, padding_idx=0)",
                       "torch.ops.aten.embedding.default(w, i % 6)", "nn.functional.embedding(i % 6, w, max_norm=1.0)",
                       "F.embedding(i, w)", "w[i % 6]", "F.embedding((i % 6).int(), w)",
                       "F.embedding(i % 6, w, scale_grad_by_freq=True)")
PAD_SPELLINGS = ("F.pad(x, (1, 2))", "F.pad(x, (1, 2), value=0.5)", "F.pad(x, [1, 2], 'constant', 0.0)",
                 "F.pad(x, (1, 2, 0, 3))", "F.pad(x, (-1, 2))", "torch.constant_pad_nd(x, (1, 2))",
                 "F.pad(x, (1, 2), mode='reflect')", "F.pad(x, (1, 2), mode='replicate')",
                 "nn.ConstantPad1d((1, 2), 0.0)(x)", "F.pad(x, (1, 2), value=True)")
MASKED_FILL_SPELLINGS = ("x.masked_fill(m, float('-inf'))", "torch.masked_fill(x, m, -1e4)", "x.masked_fill(m, 0)",
                         "x.masked_fill(m, True)", "x.masked_fill(m, torch.tensor(2.0))",
                         "x.masked_fill(~m, float('-inf'))", "x.masked_fill(m.float(), 1.0)",
                         "torch.where(m, float('-inf'), x)")
WHERE_SPELLINGS = ("torch.where(c, a, b)", "a.where(c, b)", "torch.where(c, a, 0.0)", "torch.where(c, b, a)",
                   "torch.where(c, a, b, out=out)", "torch.where(c)")
REPEAT_SPELLINGS = ("x.repeat_interleave(2, dim=1)", "torch.repeat_interleave(x, 2, 1)", "x.repeat_interleave(2, -1)",
                    "x.repeat_interleave(2, dim=1, output_size=66)", "x.repeat_interleave(2, dim=1, output_size=65)",
                    "x.repeat_interleave(3, dim=1)", "x.repeat_interleave(2, dim=0)", "x.repeat_interleave(2)",
                    "x.repeat_interleave(torch.tensor(2), dim=1)", "x.repeat_interleave(torch.tensor([2, 1, 0, 1]), 0)",
                    "x.unsqueeze(2).expand(-1, -1, 2).reshape(x.shape[0], -1)")
FLIP_SPELLINGS = ("torch.flip(x, [1])", "x.flip(1)", "x.flip(-1)", "torch.flip(x, (0, 1))", "x.fliplr()", "x.flipud()",
                  "torch.flip(x, [])", "x.flip(0)")
ROLL_SPELLINGS = ("torch.roll(x, 1, 1)", "x.roll(1, dims=1)", "torch.roll(x, (1, -2), (0, 1))", "torch.roll(x, 5)",
                  "x.roll(-1, -1)", "torch.roll(x, (3, 3), (1, 1))", "torch.roll(x, 0, 0)", "x.roll(40, 1)")
RESHAPE_SPELLINGS = ("x.reshape(-1)", "torch.reshape(x, (-1,))", "x.reshape(x.numel())", "x.flatten()",
                     "torch.flatten(x)", "x.reshape(-1, 1)", "x.contiguous().reshape(-1)", "x.view(-1)",
                     "x.reshape(x.shape[-1], -1)", "x.mT.reshape(-1)", "x.reshape(-1).add_(1)")
FLATTEN_SPELLINGS = ("x.flatten(1)", "torch.flatten(x, 1)", "x.flatten(1, 2)", "x.flatten(start_dim=1, end_dim=-1)",
                     "x.reshape(x.shape[0], -1)", "nn.Flatten()(x)", "x.flatten(0, 1)", "x.flatten(-2)")
BOOL_X = TensorRecipe((4, 33), torch.bool, seed=1)
GATHER_SPECS = [
    _rowwise("upsample_nearest2d", "gather_upsample_nearest", aten.upsample_nearest2d.vec, ("x",), (UPSAMPLE_X,),
             UPSAMPLE_SPELLINGS,
             (((0, 3, 4, 5), (1, 3, 4, 5), (2, 3, 1, 1), (2, 3, 5, 4), (3, 4, 5), (2, 3, 4, 5, 2)),)),
    _rowwise("cat_last", "gather_cat", aten.cat.default, ("a", "b"), (X, TensorRecipe((4, 7), seed=1)),
             CAT_SPELLINGS, (ELEMENTWISE_SHAPES, ((4, 7), (0,), (4, 0), (2, 4, 7), ()))),
    # capture keeps a cat whose empty part eager skips (a legacy 1-D [0]): the part's exact layout is in the key
    _rowwise("stack_last", "gather_cat", aten.stack.default, ("a", "b"), (X, replace(X, seed=1)),
             ("torch.stack([a, b], -1)", "torch.stack((a, b), dim=-1)", "torch.stack([a, b])", "torch.stack([a, b], 1)",
              "torch.stack([b, a], -1)", "torch.stack([a, b], -1, out=out)", "torch.stack([a, b, a], -1)",
              "torch.dstack([a, b])", "torch.cat([a, b], -1)"),
             (ELEMENTWISE_SHAPES, ELEMENTWISE_SHAPES)),
    _rowwise("cat_after_legacy_empty", "gather_cat", aten.cat.default, ("e", "x"), (TensorRecipe((0,)), X),
             CAT_AFTER_EMPTY_SPELLINGS, (((0, 33), (4, 0), (3,), ()), ELEMENTWISE_SHAPES)),
    _rowwise("index_rows", "gather_index", aten.index.Tensor, ("x", "i"),
             (TensorRecipe((6, 33)), TensorRecipe((5,), torch.int64, seed=1)), INDEX_SPELLINGS,
             (((6, 33), (0, 33), (6,), (2, 6, 33), ()), ((2, 3), (), (0,), (5, 1)))),
    _rowwise("embedding", "gather_embedding", aten.embedding.default, ("w", "i"),
             (TensorRecipe((6, 33)), TensorRecipe((2, 5), torch.int64, seed=1)), EMBEDDING_SPELLINGS,
             (((6, 33), (0, 33), (6,), (2, 6, 33), (6, 1)), ((5,), (), (0,), (5, 1)))),
    _rowwise("one_hot", "gather_select", aten.one_hot.default, ("i",), (TensorRecipe((2, 5), torch.int64, seed=1),),
             ("F.one_hot(i % 5, 5)", "F.one_hot(i % 5, num_classes=5)", "F.one_hot(i % 5)", "F.one_hot(i, 5)",
              "F.one_hot(i % 5, 7)", "F.one_hot((i % 5).t(), 5)", "F.one_hot(i % 5, 5).float()"),
             (((5,), (), (0,), (5, 1), (2, 3, 5)),)),
    _rowwise("affine_grid", "gather_affine_grid", aten.affine_grid_generator.default, ("t",),
             (TensorRecipe((2, 2, 3)),),
             ("F.affine_grid(t, [2, 3, 9, 11], align_corners=False)", "F.affine_grid(t, (2, 3, 9, 11), False)",
              "F.affine_grid(t, [2, 3, 9, 11], align_corners=True)", "F.affine_grid(t, [2, 5, 4, 11], False)",
              "F.affine_grid(t, [2, 3, 1, 1], False)", "F.affine_grid(t.double(), [2, 3, 9, 11], False)",
              "torch.affine_grid_generator(t, [2, 3, 9, 11], False)"),
             (((1, 2, 3), (2, 3, 4), (0, 2, 3)),)),
    _rowwise("pad_last", "gather_pad", aten.pad.default, ("x",), (TensorRecipe((2, 4, 33)),), PAD_SPELLINGS,
             (((4, 33), (0, 4, 33), (2, 4, 1), (2, 4, 3, 11)),)),
    _rowwise("upsample_bilinear", "upsample_bilinear", aten.upsample_bilinear2d.vec, ("x",),
             (TensorRecipe((2, 3, 5, 6)),),
             ("F.interpolate(x, scale_factor=2, mode='bilinear')", "nn.Upsample(scale_factor=2, mode='bilinear')(x)",
              "F.interpolate(x, scale_factor=2.0, mode='bilinear', align_corners=False)",
              "F.interpolate(x, size=(10, 12), mode='bilinear')",
              "F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=True)",
              "F.interpolate(x, scale_factor=2, mode='bilinear', antialias=True)",
              "F.interpolate(x, scale_factor=2, mode='nearest')"),
             (((1, 3, 5, 6), (2, 3, 1, 1), (0, 3, 5, 6), (2, 3, 6, 5)),)),
    _rowwise("upsample_bicubic", "upsample_bicubic", aten.upsample_bicubic2d.vec, ("x",),
             (TensorRecipe((2, 3, 5, 6)),),
             ("F.interpolate(x, scale_factor=2, mode='bicubic')", "nn.Upsample(scale_factor=2, mode='bicubic')(x)",
              "F.interpolate(x, scale_factor=2.0, mode='bicubic', align_corners=False)",
              "F.interpolate(x, size=(10, 12), mode='bicubic')",
              "F.interpolate(x, scale_factor=2, mode='bicubic', align_corners=True)",
              "F.interpolate(x, scale_factor=2, mode='bicubic', antialias=True)",
              "F.interpolate(x, scale_factor=0.5, mode='bicubic')",
              "F.interpolate(x, scale_factor=2, mode='bilinear')"),
             (((1, 3, 5, 6), (2, 3, 1, 1), (0, 3, 5, 6), (2, 3, 6, 5)),)),
    _rowwise("upsample_linear", "upsample_linear", aten.upsample_linear1d.vec, ("x",), (TensorRecipe((2, 3, 33)),),
             ("F.interpolate(x, scale_factor=2, mode='linear')", "nn.Upsample(scale_factor=2, mode='linear')(x)",
              "F.interpolate(x, scale_factor=2.0, mode='linear', align_corners=False)",
              "F.interpolate(x, size=70, mode='linear')", "F.interpolate(x, size=(70,), mode='linear')",
              "F.interpolate(x, scale_factor=2, mode='linear', align_corners=True)",
              "F.interpolate(x, scale_factor=0.5, mode='linear')", "F.interpolate(x, scale_factor=2, mode='nearest')"),
             (((1, 3, 33), (2, 3, 1), (0, 3, 33), (2, 33, 3), (3, 33)),)),
    _rowwise("pad_reflect", "gather_pad", aten.pad.default, ("x",), (TensorRecipe((2, 4, 5, 33)),),
             ("F.pad(x, (1, 2, 2, 1), mode='reflect')", "F.pad(x, (1, 2, 2, 1), 'reflect')",
              "nn.ReflectionPad2d((1, 2, 2, 1))(x)", "F.pad(x, (1, 2, 2, 1), mode='replicate')",
              "F.pad(x, (1, 2, 2, 1), mode='circular')", "F.pad(x, (1, 2, 2, 1))",
              "F.pad(x, (4, 4, 6, 6), mode='reflect')", "F.pad(x, (1, 2), mode='reflect')"),
             (((4, 5, 33), (2, 4, 3, 11), (1, 4, 2, 2)),)),
    _rowwise("constant_pad_nd", "gather_pad", aten.constant_pad_nd.default, ("x",), (TensorRecipe((2, 4, 33)),),
             ("torch.constant_pad_nd(x, (1, 2, 0, 3), 0.5)", *PAD_SPELLINGS), (((4, 33), (0, 4, 33), (2, 4, 1)),)),
    _rowwise("repeat_interleave_dim", "gather_repeat", aten.repeat_interleave.self_int, ("x",), (X,),
             REPEAT_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    _rowwise("repeat_interleave_flat", "gather_repeat", aten.repeat_interleave.self_int, ("x",),
             (replace(X, layout="transposed"),), ("x.repeat_interleave(3)", "torch.repeat_interleave(x, 3)",
                                                  "x.repeat_interleave(3, output_size=396)", *REPEAT_SPELLINGS),
             (ELEMENTWISE_SHAPES,)),
    _rowwise("flip", "gather_shift", aten.flip.default, ("x",), (X,), FLIP_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    _rowwise("roll_of_transposed", "gather_shift", aten.roll.default, ("x",), (replace(X, layout="transposed"),),
             ROLL_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    # a reshape that copies (no view expresses it); every spelling that eager serves with a view never reaches it
    _rowwise("reshape_copy", "elementwise_copy", aten.reshape.default, ("x",), (replace(X, layout="transposed"),),
             RESHAPE_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    _rowwise("flatten_copy", "gather_reshape", aten.flatten.using_ints, ("x",),
             (TensorRecipe((2, 4, 3, 11), torch.int64, layout="channels_last"),), FLATTEN_SPELLINGS,
             (((2, 4, 3, 11), (0, 4, 3, 11), (2, 4, 1, 1), (1, 4, 3, 11)),)),
    _rowwise("masked_fill", "gather_select", aten.masked_fill.Scalar, ("x", "m"), (X, BOOL_X), MASKED_FILL_SPELLINGS,
             (ELEMENTWISE_SHAPES, BROADCAST_SHAPES)),
    _rowwise("where", "gather_select", aten.where.self, ("c", "a", "b"), (BOOL_X, X, TensorRecipe((33,), seed=2)),
             WHERE_SPELLINGS, (BROADCAST_SHAPES, ELEMENTWISE_SHAPES, BROADCAST_SHAPES)),
    _rowwise("where_bf16_by_f32_row", "gather_select", aten.where.self, ("c", "a", "b"),
             (BOOL_X, replace(X, dtype=torch.bfloat16), TensorRecipe((33,), seed=2)), WHERE_SPELLINGS,
             (BROADCAST_SHAPES, ELEMENTWISE_SHAPES, BROADCAST_SHAPES)),
    _rowwise("where_scalar_other", "gather_select", aten.where.ScalarOther, ("c", "a"), (BOOL_X, X),
             ("torch.where(c, a, -1e4)", "torch.where(c, a, 0.5)", "torch.where(c, a, a.new_tensor(-1e4))",
              "torch.where(c, a.bfloat16(), -1e4)", "torch.where(c, a.long(), -1e4)", "torch.where(c, a, 2**40)",
              "torch.where(c, -1e4, a)", "torch.where(c, a, -1e4).float()", "a.masked_fill(~c, -1e4)"),
             (BROADCAST_SHAPES, ELEMENTWISE_SHAPES)),
    _rowwise("argmax_rows", "arg_extreme", aten.argmax.default, ("x",), (X,),
             ("x.argmax(-1)", "torch.argmax(x, dim=1)", "x.argmax(1, keepdim=True)", "x.argmax()", "x.argmin(-1)",
              "torch.argmax(x, -1, out=out)", "x.max(-1).indices", "x.argmax(0)", "torch.argmax(x.double(), -1)"),
             (((4, 33), (4, 0), (2, 4, 33), (33,), (), (1, 1)),)),
    _rowwise("max_dim_rows", "arg_extreme", aten.max.dim, ("x",), (X,),
             ("torch.max(x, -1)", "x.max(dim=1)", "x.max(1, keepdim=True)", "torch.max(x, -1).values", "x.min(-1)",
              "torch.max(x, -1, out=(torch.empty(0, dtype=x.dtype), torch.empty(0, dtype=torch.long)))",
              "x.max(-1)[1]", "x.max(0)", "x.max()", "torch.max(x.double(), -1)"),
             (((4, 33), (4, 0), (2, 4, 33), (33,), (), (1, 1)),)),
    _rowwise("bucketize", "bucketize", aten.bucketize.Tensor, ("x", "b"),
             (replace(X, special=True), TensorRecipe((6,))),
             ("torch.bucketize(x, b)", "torch.bucketize(x, b, right=True)", "torch.bucketize(x, b, out_int32=True)",
              "torch.bucketize(x, b.sort().values)", "torch.bucketize(x.double(), b.double())",
              "torch.bucketize(x, b, out=out)", "torch.searchsorted(b.sort().values, x)"),
             (ELEMENTWISE_SHAPES, ((6,), (1,), (0,), (2, 3)))),
    _rowwise("fold", "col2im", aten.col2im.default, ("x",), (TensorRecipe((2, 12, 9)),),
             ("F.fold(x, (4, 4), (2, 2))", "F.fold(x, output_size=4, kernel_size=2)", "nn.Fold((4, 4), 2)(x)",
              "F.fold(x, (4, 4), (2, 2), dilation=1, padding=0, stride=1)", "F.fold(x, (5, 3), (2, 2))",
              "F.fold(x[0], (4, 4), (2, 2))", "F.fold(x.double(), (4, 4), (2, 2))",
              "F.fold(x, (6, 6), (2, 2), stride=2)"),
             (((2, 12, 9), (12, 9), (2, 12, 1), (0, 12, 9)),)),
    _rowwise("index_add_rows", "index_add", aten.index_add.default, ("x", "i", "s"),
             (TensorRecipe((6, 33)), TensorRecipe((9,), torch.int64, seed=1), TensorRecipe((9, 33), seed=2)),
             ("torch.index_add(x, 0, i % 6, s)", "x.index_add(0, i % 6, s)", "x.index_add(0, i % 6, s, alpha=2)",
              "torch.index_add(x, 0, i % 6, s, out=out)", "x.index_add(0, i, s)", "x.index_add(0, (i % 6).int(), s)",
              "x.clone().index_add_(0, i % 6, s)", "x.index_add(-2, i % 6, s.bfloat16())", "x.index_add(1, i % 33, s)"),
             (((6, 33), (6, 1), (0, 33), (2, 6, 33)), ((9,), (0,), (9, 1)), ((9, 33), (9, 1), (0, 33)))),
    _rowwise("scatter_reduce_mean", "scatter_reduce", aten.scatter_reduce.two, ("x", "i", "s"),
             (TensorRecipe((6, 33)), TensorRecipe((4, 33), torch.int64, seed=1), TensorRecipe((5, 33), seed=2)),
             ("torch.scatter_reduce(x, 0, i % 6, s, 'mean')", "x.scatter_reduce(0, i % 6, s, reduce='mean')",
              "x.scatter_reduce(0, i % 6, s, 'mean', include_self=False)", "x.scatter_reduce(0, i % 6, s, 'amax')",
              "torch.scatter_reduce(x, 0, i % 6, s, 'mean', out=out)", "x.scatter_reduce(0, i, s, 'mean')",
              "x.scatter_add(0, i % 6, s)", "torch.scatter_add(x, 0, i % 6, s)", "x.scatter(0, i % 6, s, reduce='add')",
              "x.clone().scatter_reduce_(0, i % 6, s, 'mean')", "x.scatter_reduce(1, i % 33, s, 'mean')"),
             (((6, 33), (6, 1), (2, 6, 33)), ((4, 33), (0, 33), (4, 1)), ((5, 33), (4, 33), (5, 40)))),
    _rowwise("gather_rows", "gather_index", aten.gather.default, ("x", "i"),
             (X, TensorRecipe((4, 5), torch.int64, seed=1, positive=True)),
             ("torch.gather(x, 1, i)", "x.gather(1, i)", "torch.gather(x, -1, i)", "torch.gather(x, 0, i)",
              "torch.gather(x, 1, i, sparse_grad=True)", "torch.gather(x, 1, i, out=out)",
              "torch.take_along_dim(x, i, 1)", "torch.gather(x, 1, i.int())", "torch.gather(x, 1, -i)"),
             (ELEMENTWISE_SHAPES, ((4, 5), (2, 3), (4, 0), (4, 40), (1, 1)))),
]

# Comparisons and logical ops (bool outputs): in eager's common dtype of the operands, so exact.
COMPARE_SPELLINGS = ("a < b", "torch.lt(a, b)", "a.lt(b)", "torch.less(a, b)", "b > a", "a <= b", "a == b", "a != b",
                     "a >= b", "torch.gt(a, b)", "torch.lt(a, b, out=out)", "torch.eq(a, b, out=out)",
                     "torch.ne(a, 0.5)", "a < 2", "torch.lt(a.float(), b)")
LOGICAL_SPELLINGS = ("torch.logical_and(a, b)", "a.logical_and(b)", "torch.logical_or(a, b)", "a.logical_or(b)",
                     "torch.logical_xor(a, b)", "torch.logical_and(a, b, out=out)", "a & b", "a | b", "a ^ b",
                     "torch.logical_and(a, True)", "a.bool() & b.bool()", "torch.bitwise_and(a, b)")
INT_X = TensorRecipe((4, 33), torch.int64)


def _compare(name: str, op: torch._ops.OpOverload, a: TensorRecipe, b: object, card_spelling: str) -> OpSpec:
    spellings = (card_spelling, *(s for s in COMPARE_SPELLINGS if s != card_spelling))
    return OpSpec(name, "compare", op, ("a", "b"), (a, b), spellings,
                  (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES, numbers=True)))


def _logical(name: str, op: torch._ops.OpOverload, a: TensorRecipe, b: TensorRecipe, card_spelling: str) -> OpSpec:
    spellings = (card_spelling, *(s for s in LOGICAL_SPELLINGS if s != card_spelling))
    return OpSpec(name, "logical", op, ("a", "b"), (a, b), spellings,
                  (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES, numbers=True)))


COMPARE_SPECS = [
    _compare("lt_row", aten.lt.Tensor, X, TensorRecipe((33,), seed=1), "a < b"),
    _compare("eq_int_by_float", aten.eq.Scalar, INT_X, 2.0, "a == b"),
    _compare("ge_bf16_by_f32_0dim", aten.ge.Tensor, replace(X, dtype=bf16), TensorRecipe((), seed=1), "a >= b"),
    _compare("ne_f16_by_tenth", aten.ne.Scalar, replace(X, dtype=f16), 0.1, "a != b"),
    _compare("gt_int32_by_int64", aten.gt.Tensor, replace(INT_X, dtype=torch.int32), TensorRecipe((33,), torch.int64),
             "torch.gt(a, b)"),
    _compare("le_f64_by_f32_0dim", aten.le.Tensor, replace(X, dtype=f64), TensorRecipe((), seed=1), "a <= b"),
    _logical("logical_and_bool_f32", aten.logical_and.default, BOOL_X, TensorRecipe((33,), seed=2),
             "torch.logical_and(a, b)"),
    _logical("logical_or_f16_bool", aten.logical_or.default, replace(X, dtype=f16), replace(BOOL_X, shape=(4, 1)),
             "torch.logical_or(a, b)"),
    _logical("and_bool", aten.__and__.Tensor, BOOL_X, TensorRecipe((33,), torch.bool, seed=3), "a & b"),
    _rowwise("logical_not", "logical", aten.logical_not.default, ("x",), (X,),
             ("torch.logical_not(x)", "x.logical_not()", "~(x > 0)", "torch.logical_not(x, out=out)",
              "torch.logical_not(x.bool())", "x == 0"), (ELEMENTWISE_SHAPES,)),
]

# Integer arithmetic (integer outputs): in eager's common dtype, wrapping, so exact; a quotient by a number only.
INTEGER_SPELLINGS = ("a // b", "torch.floor_divide(a, b)", "a.floor_divide(b)",
                     "torch.div(a, b, rounding_mode='floor')", "torch.div(a, b, rounding_mode='trunc')",
                     "torch.floor_divide(a, b, out=out)", "a % b",
                     "torch.remainder(a, b)", "torch.fmod(a, b)", "a + b", "a - b", "a * b", "torch.add(a, b, alpha=3)",
                     "b - a", "a / b", "a.float() // b")


def _integer(name: str, op: torch._ops.OpOverload, a: TensorRecipe, b: object, card_spelling: str) -> OpSpec:
    spellings = (card_spelling, *(s for s in INTEGER_SPELLINGS if s != card_spelling))
    return OpSpec(name, "integer_arithmetic", op, ("a", "b"), (a, b), spellings,
                  (Slot(ELEMENTWISE_SHAPES), Slot(BROADCAST_SHAPES, numbers=True)))


INTEGER_SPECS = [
    _integer("floor_divide_by_8", aten.floor_divide.default, INT_X, 8, "a // b"),
    _integer("remainder_by_minus_5", aten.remainder.Scalar, INT_X, -5, "a % b"),
    _integer("div_trunc_int32_by_3", aten.div.Tensor_mode, replace(INT_X, dtype=torch.int32), 3,
             "torch.div(a, b, rounding_mode='trunc')"),
    _integer("add_int32_to_int64_row", aten.add.Tensor, replace(INT_X, dtype=torch.int32),
             TensorRecipe((33,), torch.int64, seed=1), "a + b"),
    _integer("mul_int64_by_uint8_column", aten.mul.Tensor, INT_X, TensorRecipe((4, 1), torch.uint8, seed=2), "a * b"),
    _integer("xor_int64_row", aten.__xor__.Tensor, INT_X, TensorRecipe((33,), torch.int64, seed=1), "a ^ b"),
    _rowwise("bitwise_not_int32", "integer_arithmetic", aten.bitwise_not.default, ("x",),
             (replace(INT_X, dtype=torch.int32),), ("~x", "torch.bitwise_not(x)", "x.bitwise_not()", "~x.long()",
                                                   "torch.bitwise_not(x, out=out)", "~(x > 0)"), (ELEMENTWISE_SHAPES,)),
    _rowwise("neg_int64", "integer_arithmetic", aten.neg.default, ("x",), (INT_X,),
             ("-x", "torch.neg(x)", "x.neg()", "torch.negative(x)", "torch.neg(x, out=out)", "-x.int()", "x.abs()"),
             (ELEMENTWISE_SHAPES,)),
    _rowwise("abs_int64", "integer_arithmetic", aten.abs.default, ("x",), (INT_X,),
             ("x.abs()", "torch.abs(x)", "abs(x)", "torch.absolute(x)", "torch.abs(x, out=out)", "x.int().abs()"),
             (ELEMENTWISE_SHAPES,)),
    _rowwise("pow_int64_by_3", "integer_arithmetic", aten.pow.Tensor_Scalar, ("x",), (INT_X,),
             ("x ** 3", "torch.pow(x, 3)", "x.pow(exponent=3)", "x ** 2", "torch.pow(x, 3, out=out)", "x.int() ** 3",
              "x ** 3.0", "x.clone().pow_(3)", "torch.pow(x, x.abs() % 5)"), (ELEMENTWISE_SHAPES,)),
    _rowwise("bitwise_not_bool", "logical", aten.bitwise_not.default, ("x",), (BOOL_X,),
             ("~x", "torch.bitwise_not(x)", "x.bitwise_not()", "torch.logical_not(x)", "~x.int()"),
             (ELEMENTWISE_SHAPES,)),
]

# Scans (cumsum, cumprod): each run walked in order in eager's cpu accumulator, so a hit is eager's exactly;
# a bool or integer input promotes to int64 unless ``dtype=`` says otherwise.
CUMSUM_SPELLINGS = ("torch.cumsum(x, -1)", "x.cumsum(-1)", "torch.cumsum(x, dim=-1)", "x.cumsum(dim=1)",
                    "torch.cumsum(x, -1, dtype=torch.float64)", "x.cumsum(-1, dtype=torch.int64)", "torch.cumsum(x, 0)",
                    "torch.cumsum(x, -1, out=out)", "x.cumsum(-2)", "x.t().cumsum(0)", "x.clone().cumsum_(-1)")
SCAN_SPECS = [
    _rowwise("cumsum_last", "scan", aten.cumsum.default, ("x",), (X,), CUMSUM_SPELLINGS, (ROW_SHAPES,)),
    _rowwise("cumsum_to_float64", "scan", aten.cumsum.default, ("x",), (X,),
             ("torch.cumsum(x, -1, dtype=torch.float64)", *CUMSUM_SPELLINGS), (ROW_SHAPES,)),
    _rowwise("cumsum_mask_down_rows", "scan", aten.cumsum.default, ("x",), (BOOL_X,),
             ("torch.cumsum(x, 0)", *CUMSUM_SPELLINGS), (ROW_SHAPES,)),
    _rowwise("cumsum_int64_of_transposed", "scan", aten.cumsum.default, ("x",), (replace(INT_X, layout="transposed"),),
             ("torch.cumsum(x, -1)", "x.cumsum(-1, dtype=torch.int32)", *CUMSUM_SPELLINGS), (ROW_SHAPES,)),
    _rowwise("cumprod_last", "scan", aten.cumprod.default, ("x",), (X,),
             tuple(s.replace("cumsum", "cumprod") for s in CUMSUM_SPELLINGS), (ROW_SHAPES,)),
]

# histc: each element's bin by eager's arithmetic in the input dtype, so a hit counts as eager counts.
# ``min == max`` (the defaults) bins by the data's range and ``min > max`` raises: both refused, so misses.
HISTC_SPELLINGS = ("torch.histc(x, 10, -2, 2)", "x.histc(10, -2, 2)", "torch.histc(x, bins=10, min=-2, max=2)",
                   "x.histc(bins=10, min=-2.0, max=2.0)", "torch.histc(x, 10, -2, 2, out=out)", "torch.histc(x)",
                   "torch.histc(x, 10, 2, -2)", "torch.histc(x, 0, -2, 2)", "torch.histc(x, 5, -2, 2)",
                   "torch.histc(x.double(), 10, -2, 2)", "torch.histc(x, 10, 1, 1)")
# MoE routing: expert ids as floats, one bin per expert (transformers' grouped_mm experts on the cpu)
MOE_HISTC_SPELLINGS = ("torch.histc(x.abs().mul(10).round(), bins=64, min=0, max=63)",
                       "torch.histc(x.abs().mul(10).round(), 64, 0, 63)",
                       "x.abs().mul(10).round().histc(bins=64, min=0, max=63)",
                       "torch.histc(x.abs().mul(10).round().int(), bins=64, min=0, max=63)",
                       "torch.histc(x.abs().mul(10).round(), bins=64, min=0.0, max=63.0)",
                       "torch.histc(x, bins=64, min=0, max=63)")
HISTC_SPECS = [
    _rowwise("histc", "histc", aten.histc.default, ("x",), (X,), HISTC_SPELLINGS, (ELEMENTWISE_SHAPES,)),
    _rowwise("histc_moe_expert_ids", "histc", aten.histc.default, ("x",), (X,), MOE_HISTC_SPELLINGS,
             (ELEMENTWISE_SHAPES,)),
]

# Sorts: a stable sort's ties by ascending index, NaN after every number, as eager's cpu stable sort; topk makes
# eager's own std::partial_sort / nth_element calls, so its ties come out where eager's do. stable=False is refused.
SORT_SPELLINGS = ("torch.sort(x, stable=True)", "x.sort(dim=-1, stable=True)", "torch.sort(x, stable=True).values",
                  "torch.sort(x, dim=-1, descending=True, stable=True)", "torch.argsort(x, stable=True)",
                  "x.sort(stable=True, dim=0)", "torch.sort(x)", "x.t().sort(stable=True)", "x.msort()")
TOPK_SPELLINGS = ("torch.topk(x, 5)", "x.topk(5)", "torch.topk(x, 5, dim=-1)", "torch.topk(x, 5, largest=False)",
                  "x.topk(5, sorted=False)", "torch.topk(x, 5).indices", "torch.topk(x, 5, 0)", "x.topk(1)")
SORT_SPECS = [
    _rowwise("sort_stable_last", "sort", aten.sort.stable, ("x",), (X,), SORT_SPELLINGS, (ROW_SHAPES,)),
    _rowwise("sort_stable_descending_int64_of_transposed", "sort", aten.sort.stable, ("x",),
             (replace(INT_X, layout="transposed"),),
             ("torch.sort(x, descending=True, stable=True)", *SORT_SPELLINGS), (ROW_SHAPES,)),
    _rowwise("topk_last", "sort", aten.topk.default, ("x",), (X,), TOPK_SPELLINGS, (ROW_SHAPES,)),
]

MODULE_SPECS = [
    _module("torch_rms_norm", "module_rms_norm", "nn.RMSNorm(64, eps=1e-6)", (X64,), NORM_SHAPES,
            ("setattr(m, 'eps', 1e-3)", "setattr(m, 'eps', None)")),
    _module("torch_gelu_tanh", "module_activation", "nn.GELU(approximate='tanh')", (X,), ELEMENTWISE_SHAPES,
            ("setattr(m, 'approximate', 'none')",)),
    _module("torch_leaky_relu", "module_activation", "nn.LeakyReLU(0.3)", (X,), ELEMENTWISE_SHAPES,
            ("setattr(m, 'negative_slope', 0.1)",)),
    _module("silu_and_mul", "module_gated_activation", "agent_modules.SiluAndMul()", (TensorRecipe((4, 64)),),
            ((4, 32), (4, 63), (0, 64), (2, 4, 64))),
    _module("group_norm_silu", "module_norm_activation", "agent_modules.GroupNormSiLU(4, 8)", (X4,), CHANNEL_SHAPES,
            ("setattr(m.norm, 'eps', 1e-3)", "setattr(m.norm, 'num_groups', 2)")),
]

SPECS = (UNARY_SPECS + FAKE_QUANTIZE_SPECS + BINARY_SPECS + TERNARY_SPECS + COPY_SPECS + ROW_SPECS + GATHER_SPECS
         + COMPARE_SPECS + INTEGER_SPECS + SCAN_SPECS + HISTC_SPECS + SORT_SPECS + MODULE_SPECS)


# --- cards and casts --------------------------------------------------------------------------


class _Recorder(TorchDispatchMode):
    """The aten calls that reach the backend, as capture records them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def _seeded(module: nn.Module) -> nn.Module:
    """The module with the same parameter values every time it is built."""
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator))
    return module


def build_module(spec: OpSpec) -> nn.Module:
    assert spec.module is not None
    return _seeded(eval(spec.module, NAMESPACE))


def capture_card(spec: OpSpec) -> OperatorCard:
    """The card of the spec's call: its module's, or the one aten call of ``spec.op`` it records."""
    args = [a.build()[0] if isinstance(a, TensorRecipe) else a for a in spec.args]
    if spec.module is not None:
        card, _ = module_card(build_module(spec), args)
        return card
    recorder = _Recorder()
    with GRAD_MODES[spec.capture_mode](), recorder:
        spec.function(spec.spellings[0])(*args)
    recorded = [(op, a, k) for op, a, k in recorder.calls if op is spec.op]
    assert len(recorded) == 1, f"{spec.spellings[0]} records {[str(c[0]) for c in recorder.calls]}, not one {spec.op}"
    op, op_args, op_kwargs = recorded[0]
    card, _ = aten_card(op, list(op_args), op_kwargs)
    return card


@dataclass
class PackagedCard:
    card: OperatorCard
    cast: Cast


def _offline_source(spec: OpSpec, card: OperatorCard) -> str:
    proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu"))
    assert proposal.has_proposal, f"{spec.name}: {proposal.no_proposal_reason}"
    assert proposal.knobs["family"] == spec.family, (spec.name, proposal.knobs)
    return proposal.source


def package_cards(cards: dict[str, OperatorCard], sources: dict[str, str], workdir: Path) -> dict[str, PackagedCard]:
    """One loaded .cast per card, its one kernel ``sources[name]`` built with g++ (once per source:
    compile_cpu names a library by its source)."""
    unique = sorted(set(sources.values()))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        libraries = dict(zip(unique, pool.map(lambda source: compile_cpu(source, workdir), unique), strict=True))
    result: dict[str, PackagedCard] = {}
    for name, card in cards.items():
        path = workdir / f"{name}.cast"
        build_cast(path, MODEL, [entry(card, sources[name], libraries[sources[name]].read_bytes())], [])
        cast = load_cast(path)
        assert not cast.skipped, cast.skipped
        result[name] = PackagedCard(card, cast)
    return result


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PackagedCard]]:
    """One .cast per spec, its one kernel the offline proposal for the spec's card."""
    workdir = tmp_path_factory.mktemp("call_forms")
    cards = {spec.name: capture_card(spec) for spec in SPECS}
    sources = {spec.name: _offline_source(spec, cards[spec.name]) for spec in SPECS}
    result = package_cards(cards, sources, workdir)
    yield result
    for item in result.values():
        item.cast.close()


# --- calls, and what running one gives ----------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One drawn call: a spelling of the op, its arguments, the grad mode, and any module change."""

    spec: OpSpec
    spelling: str
    args: tuple[object, ...]  # recipes for tensors, or Python numbers; ``out`` last where the spelling has one
    grad_mode: str
    tweak: str = ""
    expects_hit: bool = False  # the card's own call: the kernel must run

    def __repr__(self) -> str:
        bound = ", ".join(f"{n}={a!r}" for n, a in zip(self.spec.parameters(self.spelling)[-len(self.args):],
                                                       self.args, strict=True))
        module = f"m={self.spec.module}{'; ' + self.tweak if self.tweak else ''}; " if self.spec.module else ""
        return f"[{self.spec.name}] {self.spelling}  where {module}{bound}  under {self.grad_mode}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


@dataclass
class Outcome:
    """What one run of a call gave: its result or exception, and what it left behind."""

    result: object = None
    error: BaseException | None = None
    grads: list[torch.Tensor | None] = field(default_factory=list)
    inputs: list[torch.Tensor] = field(default_factory=list)  # every tensor handed to the call, after it
    aliases: list[tuple[int, ...]] = field(default_factory=list)  # per output: the inputs sharing its storage
    hits: int = 0


def _tensors_of(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors_of(v)]
    return []


def _cotangent(t: torch.Tensor) -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, t.numel(), dtype=f64).reshape(t.shape).to(t.dtype)


def run(call: Call, cast: Cast | None) -> Outcome:
    """Build the call's arguments afresh, run it (inside ``cast`` when given), and backprop."""
    outcome = Outcome()
    leaves: list[torch.Tensor] = []
    args: list[object] = []
    for arg in call.args:
        if isinstance(arg, TensorRecipe):
            tensor, leaf = arg.build()
            args.append(tensor)
            outcome.inputs.append(tensor)
            leaves += [leaf] if leaf is not None else []
        else:
            args.append(arg)
    module = build_module(call.spec) if call.spec.module else None
    if module is not None:
        exec(call.tweak, NAMESPACE, {"m": module})
        state = [*module.parameters(), *module.buffers()]
        outcome.inputs += state
        leaves += [p for p in module.parameters() if p.requires_grad]
        args.insert(0, module)
    fn = call.spec.function(call.spelling)
    if cast is not None:
        cast.reset_stats()
    with cast.applied_to(module) if cast is not None else contextlib.nullcontext():
        try:
            with GRAD_MODES[call.grad_mode]():
                outcome.result = fn(*args)
            differentiable = [t for t in _tensors_of(outcome.result) if t.requires_grad]
            if leaves and differentiable:
                torch.autograd.backward(differentiable, [_cotangent(t) for t in differentiable])
        except Exception as exc:
            outcome.error = exc
    outcome.grads = [leaf.grad for leaf in leaves]
    outcome.aliases = [
        tuple(i for i, t in enumerate(outcome.inputs)
              if out.untyped_storage().nbytes() and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())
        for out in _tensors_of(outcome.result)
    ]
    if cast is not None:
        outcome.hits = sum(int(s["hits"]) for s in cast.stats().values())  # type: ignore[call-overload]
    return outcome


# --- comparing two runs -----------------------------------------------------------------------


def _facts(t: torch.Tensor) -> dict[str, object]:
    return {"type": type(t).__name__, "dtype": t.dtype, "shape": tuple(t.shape), "stride": t.stride(),
            "storage_offset": t.storage_offset(), "device": t.device, "requires_grad": t.requires_grad,
            "is_inference": t.is_inference()}


def _assert_close_to_eager(got: torch.Tensor, want: torch.Tensor, where: str) -> None:
    """A kernel's output: nan, inf and -inf where eager has them, the rest within the dtype's tolerance."""
    tol = TOLERANCE[want.dtype]
    got64, want64 = got.detach().double(), want.detach().double()
    nan_differs = (got64.isnan() != want64.isnan()).sum().item()
    assert not nan_differs, f"{where}: {nan_differs} elements nan in one, not the other"
    infinite = want64.isinf() | got64.isinf()
    inf_differs = (got64[infinite] != want64[infinite]).sum().item()
    assert not inf_differs, f"{where}: {inf_differs} infinities differ from eager's"
    finite = want64.isfinite() & got64.isfinite()
    got64, want64 = got64[finite], want64[finite]
    if want64.numel() == 0:
        return
    scale = max(want64.abs().max().item(), 1e-12)
    rel_l2 = ((got64 - want64).norm() / max(want64.norm().item(), 1e-12)).item()
    max_scaled = ((got64 - want64).abs().max() / scale).item()
    assert rel_l2 <= tol and max_scaled <= 4 * tol, f"{where}: rel_l2 {rel_l2:.3g}, max_scaled {max_scaled:.3g}"


def assert_same(got: object, want: object, *, exact: bool, where: str) -> None:
    """``got`` is what eager gave as ``want``: structure, tensor facts, and values."""
    assert type(got) is type(want), f"{where}: {type(got).__name__}, eager gives {type(want).__name__}"
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert _facts(got) == _facts(want), f"{where}: {_facts(got)}, eager gives {_facts(want)}"
        if exact or want.dtype not in TOLERANCE:
            torch.testing.assert_close(got.detach(), want.detach(), rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m: f"{where}: {m}")
        else:
            _assert_close_to_eager(got, want, where)
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), f"{where}: {len(got)} items"
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, exact=exact, where=f"{where}[{i}]")
    elif isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), f"{where}: {got!r}, eager gives nan"
    else:
        assert got == want, f"{where}: {got!r}, eager gives {want!r}"


def _brief(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {list(value.shape)}"
    return f"a {type(value).__name__}" if isinstance(value, (tuple, list)) else repr(value)


def assert_same_outcome(call: Call, want: Outcome, got: Outcome) -> None:
    """The run under the cast (``got``) did what the plain run (``want``) did; the kernel ran if it must."""
    if want.error is not None:
        assert got.error is not None, (
            f"eager raises {type(want.error).__name__}: {str(want.error)[:200]}; the cast returns {_brief(got.result)}")
        assert type(got.error) is type(want.error), (
            f"eager raises {type(want.error).__name__}: {want.error}; "
            f"the cast raises {type(got.error).__name__}: {got.error}")
        return
    if got.error is not None:
        raise AssertionError(f"the cast raises where eager does not: {type(got.error).__name__}: {got.error}") \
            from got.error
    if call.expects_hit:
        assert got.hits >= 1, "the card's own call did not run the kernel"
    exact = got.hits == 0  # no kernel ran: every value comes from eager's own kernels
    assert_same(got.result, want.result, exact=exact, where="result")
    assert got.aliases == want.aliases, f"outputs alias inputs {got.aliases}; eager's alias {want.aliases}"
    assert_same(got.grads, want.grads, exact=exact, where="grads")
    # An input whose elements share memory (an expanded running variance that batch norm updates
    # in place) holds whichever write landed last: eager itself gives no defined value there.
    written = [None if _self_overlapping(t) else t for t in got.inputs]
    expected = [None if _self_overlapping(t) else t for t in want.inputs]
    assert_same(written, expected, exact=exact, where="inputs after the call")


def _self_overlapping(value: object) -> bool:
    return isinstance(value, torch.Tensor) and torch._debug_has_internal_overlap(value) == 1


# --- drawing calls ----------------------------------------------------------------------------


def _with_flags(draw: st.DrawFn, recipe: TensorRecipe) -> TensorRecipe:
    """New values for ``recipe``, perhaps requiring grad or made in inference mode."""
    grad = _is_differentiable(recipe.dtype) and draw(st.booleans())
    return replace(recipe, seed=draw(st.integers(0, 2**16)), grad=grad,
                   inference=not grad and draw(st.sampled_from([False, False, False, True])))


@st.composite
def tensor_variants(draw: st.DrawFn, card: TensorRecipe, shapes: tuple[tuple[int, ...], ...],
                    dtype: torch.dtype | None = None) -> TensorRecipe:
    """The card's tensor in another shape, dtype (``dtype`` if given) or layout (the card's own weighted up)."""
    shape = draw(st.sampled_from([card.shape, card.shape, *shapes]))
    dtype = dtype or draw(st.sampled_from([card.dtype, card.dtype, *DTYPES]))
    layout = draw(st.sampled_from(["contiguous", "contiguous", *layouts_for(shape)]))
    return _with_flags(draw, replace(card, shape=shape, dtype=dtype, layout=layout))


@st.composite
def argument_variants(draw: st.DrawFn, card: object, slot: Slot, dtype: torch.dtype | None) -> object:
    if slot.numbers and draw(st.booleans()):
        return draw(st.sampled_from(NUMBERS))
    base = card if isinstance(card, TensorRecipe) else TensorRecipe(slot.shapes[0])
    return draw(tensor_variants(base, slot.shapes, dtype))


@st.composite
def out_tensors(draw: st.DrawFn, card: OperatorCard) -> TensorRecipe:
    """An ``out=`` tensor: empty (resized by the op) or of the card's output shape, of some dtype."""
    shape = draw(st.sampled_from([(0,), tuple(card.outputs[0].shape)]))
    dtype = draw(st.sampled_from([getattr(torch, card.outputs[0].dtype), f64, torch.int64, f16]))
    layout = draw(st.sampled_from(["contiguous", *(["transposed"] if len(shape) >= 2 else [])]))
    return TensorRecipe(shape, dtype, layout, seed=draw(st.integers(0, 2**16)))


def promises_a_hit(spec: OpSpec, grad_mode: str) -> bool:
    """Whether the card's own call must run the kernel: under the grad mode capture recorded it in;
    for a module, wherever autograd is off (its weights require grad, and a module kernel has no backward)."""
    return grad_mode != "grad" if spec.module is not None else grad_mode == spec.capture_mode


@st.composite
def calls(draw: st.DrawFn, spec: OpSpec, card: OperatorCard) -> Call:
    """The card's own call with fresh values (half the time), or the op in another form."""
    grad_mode = draw(st.sampled_from(list(GRAD_MODES)))
    if draw(st.booleans()):
        args = tuple(_with_flags(draw, a) if isinstance(a, TensorRecipe) else a for a in spec.args)
        return Call(spec, spec.spellings[0], args, grad_mode, expects_hit=promises_a_hit(spec, grad_mode))
    spelling = draw(st.sampled_from(spec.spellings))
    shared_dtype = draw(st.one_of(st.none(), st.sampled_from(DTYPES)))  # or one dtype per tensor
    args = tuple(draw(argument_variants(a, slot, shared_dtype)) for a, slot in zip(spec.args, spec.slots, strict=True))
    if "out=out" in spelling:
        args = (*args, draw(out_tensors(card)))
    tweak = draw(st.sampled_from(["", "", *spec.tweaks])) if spec.module else ""
    return Call(spec, spelling, args, grad_mode, tweak)


# --- the tests -----------------------------------------------------------------------------------

EXAMPLES_PER_CARD = 25
FAMILIES = sorted({spec.family for spec in SPECS})


def mismatches(packaged: dict[str, PackagedCard], calls: list[Call]) -> str:
    """The calls whose two runs disagree, grouped by why (with the shortest call of each group); empty if none."""
    by_reason: dict[str, list[Call]] = {}
    for call in calls:
        try:
            assert_same_outcome(call, run(call, None), run(call, packaged[call.spec.name].cast))
        except AssertionError as exc:
            reason = f"[{call.spec.name}] {str(exc).splitlines()[0][:240]}"
            by_reason.setdefault(reason, []).append(call)
    return "\n".join(f"{len(group)} of {len(calls)} calls: {reason}\n    e.g. {min(group, key=_length)!r}"
                     for reason, group in by_reason.items())


def _length(call: Call) -> int:
    return len(repr(call))


def test_each_cards_own_call_runs_its_kernel_and_matches_eager(packaged: dict[str, PackagedCard]) -> None:
    """The call each card was captured from, under its capture's grad mode: a hit, within tolerance."""
    calls = [Call(spec, spec.spellings[0], spec.args, spec.capture_mode, expects_hit=True) for spec in SPECS]
    failures = mismatches(packaged, calls)
    assert not failures, failures


def test_every_aten_family_is_served_by_the_native_front(packaged: dict[str, PackagedCard]) -> None:
    """Each aten card's op gets the C++ front over its Python override: the call forms above ran through it,
    cards with a Python number in a tensor slot too (the front compares the wrapped number's kind and
    value), and index, whose indices are a list of tensors and Nones. A ``to`` naming a device keeps the
    Python override alone: the front does not check the device's index (packager.device_args)."""
    without = []
    for name, item in packaged.items():
        with item.cast.applied_to():
            without += [name for o in item.cast._aten if o.front is None]
    assert sorted(without) == ["to_dtype_layout"]


def test_a_to_naming_another_device_of_its_type_falls_back(packaged: dict[str, PackagedCard],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A key records a device's type alone: ``x.to("cuda:1", copy=True)`` with x on cuda:0 matches a cuda
    card, and the override hands it to eager (packager.device_args). With no second device here the
    check's verdict is forced; the card's own call must then miss and still give eager's result."""
    monkeypatch.setattr("packager.aten_dispatch.names_another_device", lambda *_: True)
    spec = next(s for s in SPECS if s.name == "to_dtype_layout")
    item = packaged[spec.name]
    call = Call(spec, spec.spellings[0], spec.args, "inference")
    want, got = run(call, None), run(call, item.cast)
    assert_same_outcome(call, want, got)
    assert got.hits == 0 and item.cast.stats()[item.card.id]["fallbacks"] == {"other_device": 1}


def test_gradients_through_each_cards_own_call_match_eager(packaged: dict[str, PackagedCard]) -> None:
    """The card's own call under grad mode, its input and weights requiring grad: an aten kernel runs
    (the override sits below autograd) and backward must still give eager's gradients."""
    def requiring_grad(name: str, arg: object) -> object:
        trainable = isinstance(arg, TensorRecipe) and _is_differentiable(arg.dtype) and name not in ("mean", "var")
        return replace(arg, grad=True) if trainable else arg

    calls = []
    for spec in SPECS:
        args = tuple(requiring_grad(name, arg) for name, arg in zip(spec.names, spec.args, strict=True))
        calls.append(Call(spec, spec.spellings[0], args, "grad", expects_hit=promises_a_hit(spec, "grad")))
    failures = mismatches(packaged, calls)
    assert not failures, failures


def test_python_numbers_in_tensor_slots_promote_as_eager(packaged: dict[str, PackagedCard]) -> None:
    """Every number with every dtype, as a 0-dim and as a dimensioned tensor: ``x + 1e-5`` reaches the
    override with the number where the schema wants a tensor, and a miss must promote as eager does."""
    cards = [spec for spec in BINARY_SPECS + INTEGER_SPECS if spec.name in NUMBER_CARDS]
    calls = [Call(spec, spec.spellings[0], (TensorRecipe(shape, dtype), number), "inference")
             for spec in cards for shape in ((), X.shape) for dtype in DTYPES for number in NUMBERS]
    failures = mismatches(packaged, calls)
    assert not failures, failures


def test_each_kernel_propagates_nan_and_inf_as_eager(packaged: dict[str, PackagedCard]) -> None:
    """The card's own call with nan, inf, -inf and -0.0 in one input at a time: the kernel runs, and
    gives nan and infinities where eager does (the drawn call forms have finite values only).

    Except an infinite affine weight of a batch or group norm: eager folds it into a per-channel
    shift (``b - mean * w * rstd``, itself infinite), so ``x * inf - inf`` gives NaN where the
    kernels, which normalise first, give an infinity. A known difference, left for a model
    state no trained model has.
    """
    calls = [
        Call(spec, spec.spellings[0], tuple(replace(a, special=True) if j == i else a for j, a in enumerate(spec.args)),
             spec.capture_mode, expects_hit=True)
        for spec in SPECS for i, arg in enumerate(spec.args)
        if isinstance(arg, TensorRecipe) and not (spec.family in ("batch_norm_inference", "group_norm")
                                                   and spec.names[i] == "w")
    ]
    failures = mismatches(packaged, calls)
    assert not failures, failures


@pytest.mark.parametrize("family", FAMILIES)
def test_every_call_form_returns_what_eager_returns(family: str, packaged: dict[str, PackagedCard]) -> None:
    """Hypothesis draws one of the family's cards and a call of its op; examples scale with the cards.

    One test per family rather than per card: the suite collects garbage after every test
    (tests/conftest.py), a third of a second with torch loaded, more than a card's examples take.
    """
    specs = [spec for spec in SPECS if spec.family == family]

    @settings(max_examples=EXAMPLES_PER_CARD * len(specs), deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(data=st.data())
    def calls_match_eager(data: st.DataObject) -> None:
        spec = data.draw(st.sampled_from(specs), label="card")
        item = packaged[spec.name]
        call = data.draw(calls(spec, item.card), label="call")
        assert_same_outcome(call, run(call, None), run(call, item.cast))

    calls_match_eager()


def test_every_family_and_op_the_offline_proposer_covers_has_a_card_here() -> None:
    assert set(FAMILIES) == {
        "elementwise_unary", "elementwise_binary", "elementwise_ternary", "elementwise_copy", "batch_norm_inference",
        "reduction", "softmax",
        "layer_norm", "rms_norm", "group_norm", "adaptive_avg_pool", "global_avg_pool", "max_pool", "avg_pool",
        "upsample_bilinear", "upsample_bicubic",
        "upsample_linear",
        "module_rms_norm", "module_activation", "module_gated_activation", "module_norm_activation",
        "gather_upsample_nearest", "gather_cat", "gather_index", "gather_embedding", "gather_pad", "gather_select",
        "gather_repeat", "gather_reshape", "gather_shift",
        "compare", "logical", "integer_arithmetic", "gather_convert", "arg_extreme", "scan", "histc", "sort",
        "bucketize", "index_add", "scatter_reduce", "col2im", "gather_affine_grid",
    }
    assert {s.op._schema.name.removeprefix("aten::") for s in UNARY_SPECS if s.op} == set(ops_elementwise.UNARY)
    assert {s.op._schema.name.removeprefix("aten::") for s in FAKE_QUANTIZE_SPECS} == set(ops_fake_quantize.OPS)
    assert {s.op._schema.name.removeprefix("aten::") for s in BINARY_SPECS if s.op} == set(ops_elementwise.BINARY)

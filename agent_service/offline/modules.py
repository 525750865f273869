"""Module cards the offline proposer knows: what each class's forward computes, as a plan.

A module kernel replaces the module's whole forward, so its semantics must be exact: classes
are listed by name with the formula their source uses (zero-centred RMSNorm weights, rounding
before the weight, gating), and the scalars the forward reads (``eps``, ``num_groups``) come
from the card's ``module_attributes``. A class not listed, or a card missing an attribute, gets
no proposal.
"""

from __future__ import annotations

import re
from typing import Any

from agent_service.offline.call import TensorArg, UnsupportedCard, module_tensors
from agent_service.offline.elementwise import ElementwisePlan, Operand
from agent_service.offline.layout import is_contiguous, row_layout, storage_order_rows
from agent_service.offline.ops_elementwise import UNARY
from agent_service.offline.ops_rowwise import FLOAT32_EPS
from agent_service.offline.plan import KernelPlan
from agent_service.offline.rowwise.plan import RowPlan
from kforge_domain.card import OperatorCard

# Classes are named by class name where it is distinctive, by qualified name where it is not.
# RMSNorm classes by formula: y = x * rsqrt(mean(x²) + eps), then the weight as each class applies it.
TORCH_RMS_NORM = "torch.nn.modules.normalization.RMSNorm"
RMS_NORM_WEIGHT = {TORCH_RMS_NORM, "Gemma4RMSNorm"}
RMS_NORM_ROUND_THEN_WEIGHT = {"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen2MoeRMSNorm", "Qwen3MoeRMSNorm",
                              "MistralRMSNorm", "MixtralRMSNorm", "Phi3RMSNorm", "T5LayerNorm",
                              "examples.small_transformer.RMSNorm"}
RMS_NORM_ZERO_CENTRED = {"GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm", "Qwen3_5MoeRMSNorm", "Qwen3_5RMSNorm",
                         "Qwen3NextRMSNorm"}
# x * rsqrt(mean(x²) + eps), cast to the weight's dtype when that is half precision, times the weight.
DIFFUSERS_RMS_NORM = "diffusers.models.normalization.RMSNorm"
RMS_NORM_GATED = {"Qwen3_5MoeRMSNormGated", "Qwen3_5RMSNormGated", "Qwen3NextRMSNormGated"}
GATED_ACTIVATIONS = {"SiluAndMul": "silu", "SiLUAndMul": "silu", "SwiGLUActivation": "silu", "GeluAndMul": "gelu",
                     "GELUAndMul": "gelu", "GeluTanhAndMul": "gelu_tanh", "examples.small_transformer.SiLUGate": "silu"}
# Parameter-free activation modules: (aten op whose expression they share, its non-tensor arguments)
# class -> (unary op, fixed arguments, module attributes passed as further arguments)
ACTIVATION_MODULES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "torch.nn.modules.activation.ReLU": ("relu", {}, ()),
    "torch.nn.modules.activation.SiLU": ("silu", {}, ()),
    "torch.nn.modules.activation.Sigmoid": ("sigmoid", {}, ()),
    "torch.nn.modules.activation.Tanh": ("tanh", {}, ()),
    "torch.nn.modules.activation.Hardswish": ("hardswish", {}, ()),
    "torch.nn.modules.activation.Hardsigmoid": ("hardsigmoid", {}, ()),
    "torch.nn.modules.activation.GELU": ("gelu", {}, ("approximate",)),
    "torch.nn.modules.activation.LeakyReLU": ("leaky_relu", {}, ("negative_slope",)),
    "torch.nn.modules.activation.Hardtanh": ("hardtanh", {}, ("min_val", "max_val")),
    "torch.nn.modules.activation.ReLU6": ("hardtanh", {}, ("min_val", "max_val")),
    "transformers.activations.SiLUActivation": ("silu", {}, ()),
    "transformers.activations.GELUActivation": ("gelu", {}, ()),
    "transformers.activations.GELUTanh": ("gelu", {"approximate": "tanh"}, ()),
    "transformers.activations.PytorchGELUTanh": ("gelu", {"approximate": "tanh"}, ()),
    "transformers.activations.NewGELUActivation": ("gelu", {"approximate": "tanh"}, ()),
}
NORM_ACTIVATION = re.compile(r"(GroupNorm|LayerNorm|RMSNorm)(SiLU|Silu|Swish|GELU|Gelu|ReLU|Relu)$")
ACTIVATION_NAMES = {"silu": "silu", "swish": "silu", "gelu": "gelu", "relu": "relu"}

GATE_EXPRESSIONS = {
    "silu": "(x0 / (1.0f + KF_EXP(-x0))) * x1",
    "gelu": "(0.5f * x0 * (1.0f + KF_ERF(x0 * 0.7071067811865476f))) * x1",
    "gelu_tanh": "(0.5f * x0 * (1.0f + KF_TANH(0.7978845608028654f * (x0 + 0.044715f * x0 * x0 * x0)))) * x1",
}


def _attribute(card: OperatorCard, *names: str, allow_none: bool = False) -> Any:
    """The module attribute recorded under the first of ``names``; missing (or None) refuses the card.

    A name is the module's own attribute or, failing that, the one submodule's (``norm.eps``).
    """
    attributes = card.module_attributes
    for name in names:
        found = [name] if name in attributes else [k for k in attributes if k.endswith(f".{name}")]
        if len(found) > 1:
            raise UnsupportedCard(f"several submodules have attribute {name}: {', '.join(sorted(found))}")
        if found:
            value = attributes[found[0]]
            if value is None and not allow_none:
                raise UnsupportedCard(f"module attribute {found[0]} is None")
            return value
    raise UnsupportedCard(f"module card lacks attribute {' / '.join(names)} (capture records it in module_attributes)")


def _listed(card: OperatorCard, names: set[str] | dict[str, Any]) -> str | None:
    """The catalog key naming this card's class (qualified name first), if any."""
    class_name = card.op.rsplit(".", 1)[-1]
    return card.op if card.op in names else class_name if class_name in names else None


def _state(state: dict[str, TensorArg], name: str) -> TensorArg | None:
    """The state tensor called ``name`` (directly or as the last part of a submodule's path)."""
    found = [t for key, t in state.items() if key == name or key.endswith(f".{name}")]
    if len(found) > 1:
        raise UnsupportedCard(f"several state tensors are called {name!r}")
    return found[0] if found else None


def _one_input(card: OperatorCard, forward: list[TensorArg], count: int = 1) -> None:
    if len(forward) != count or len(card.outputs) != 1:
        raise UnsupportedCard(f"{card.op}: expected {count} forward tensor(s) and one output")


def _rms(card: OperatorCard, name: str, forward: list[TensorArg], state: dict[str, TensorArg]) -> RowPlan:
    gated = name in RMS_NORM_GATED
    _one_input(card, forward, 2 if gated else 1)
    x = forward[0]
    weight = _state(state, "weight")
    if weight is not None and weight.spec.shape != [x.spec.shape[-1]]:
        raise UnsupportedCard(f"weight of shape {weight.spec.shape} does not match the normalised dim")
    eps = _attribute(card, "eps", "variance_epsilon", allow_none=name == TORCH_RMS_NORM)
    round_before_weight = name in RMS_NORM_ROUND_THEN_WEIGHT or gated
    if name == DIFFUSERS_RMS_NORM:
        if _state(state, "bias") is not None:
            raise UnsupportedCard(f"{name} with a bias is not templated")
        half_weight = weight is not None and weight.spec.dtype in ("float16", "bfloat16")
        if half_weight and weight is not None and weight.spec.dtype != x.spec.dtype:
            raise UnsupportedCard(f"{name}: a {weight.spec.dtype} weight on {x.spec.dtype} input is not templated")
        round_before_weight = half_weight
    per_element = [card.outputs[0]] + ([forward[1].spec] if gated else [])
    storage = storage_order_rows(x.spec, per_element) if not is_contiguous(x.spec) else None
    outer, length = storage if storage is not None else row_layout(x.spec, [len(x.spec.shape) - 1])[:2]
    return RowPlan(
        family="module_rms_norm", summary=f"{name} of {x.spec.shape} {x.spec.dtype}", kind="rms_norm",
        storage_order=storage is not None,
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), x=x.index, rows=outer, length=length, y=0,
        weight=weight.index if weight is not None else None,
        weight_offset=1.0 if name in RMS_NORM_ZERO_CENTRED else 0.0,
        round_before_weight=round_before_weight,
        gate=forward[1].index if gated else None, gate_activation="silu",
        eps=FLOAT32_EPS if eps is None else float(eps),
    )


def _gated(card: OperatorCard, name: str, forward: list[TensorArg], state: dict[str, TensorArg]) -> ElementwisePlan:
    if state:
        raise UnsupportedCard(f"{name} has parameters; only parameter-free gated activations are templated")
    out = card.outputs[0]
    if len(forward) == 2:
        a, b = forward
        operands = (Operand(a.index, a.spec.dtype), Operand(b.index, b.spec.dtype))
    elif len(forward) == 1:
        x = forward[0]
        half = x.spec.shape[-1] // 2
        if x.spec.shape[:-1] != out.shape[:-1] or out.shape[-1] != half or x.spec.stride[-1] != 1:
            raise UnsupportedCard(f"{name}: input {x.spec.shape} does not split into two halves of {out.shape}")
        operands = (Operand(x.index, x.spec.dtype, 0, tuple(x.spec.stride)),
                    Operand(x.index, x.spec.dtype, half, tuple(x.spec.stride)))
    else:
        raise UnsupportedCard(f"{name}: expected one or two forward tensors")
    return ElementwisePlan(
        family="module_gated_activation", summary=f"{name} to {out.shape} {out.dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), operands=operands,
        expression=GATE_EXPRESSIONS[GATED_ACTIVATIONS[name]], uses_math=True,
    )


def _activation(card: OperatorCard, name: str, forward: list[TensorArg],
                state: dict[str, TensorArg]) -> ElementwisePlan:
    _one_input(card, forward)
    if state:
        raise UnsupportedCard(f"{name} has parameters or buffers; not a plain activation")
    op, fixed, attributes = ACTIVATION_MODULES[name]
    args = {**fixed, **{attr: _attribute(card, attr) for attr in attributes}}
    make, uses_math = UNARY[op]
    x = forward[0]
    return ElementwisePlan(
        family="module_activation", summary=f"{name.rsplit('.', 1)[-1]} of {x.spec.shape} {x.spec.dtype}",
        inputs=tuple(card.inputs), outputs=tuple(card.outputs), operands=(Operand(x.index, x.spec.dtype),),
        expression=make(args), uses_math=uses_math,
    )


def _norm_activation(card: OperatorCard, norm: str, act: str, forward: list[TensorArg],
                     state: dict[str, TensorArg]) -> RowPlan:
    _one_input(card, forward)
    x = forward[0]
    weight, bias = _state(state, "weight"), _state(state, "bias")
    common: dict[str, Any] = {
        "inputs": tuple(card.inputs), "outputs": tuple(card.outputs), "x": x.index, "y": 0,
        "weight": weight.index if weight is not None else None, "bias": bias.index if bias is not None else None,
        "eps": float(_attribute(card, "eps", "variance_epsilon")), "activation": ACTIVATION_NAMES[act.lower()],
    }
    summary = f"{card.op.rsplit('.', 1)[-1]} of {x.spec.shape} {x.spec.dtype}"
    if norm == "GroupNorm":
        groups = int(_attribute(card, "num_groups", "groups"))
        n, channels = x.spec.shape[0], x.spec.shape[1]
        if channels % groups:
            raise UnsupportedCard(f"{channels} channels do not split into {groups} groups")
        spatial = x.spec.numel // max(n * channels, 1)
        row_layout(x.spec, list(range(1, len(x.spec.shape))))
        return RowPlan(family="module_norm_activation", summary=summary, kind="group_norm", rows=n * groups,
                       length=(channels // groups) * spatial, groups=groups, channels=channels, spatial=spatial,
                       **common)
    outer, length, _ = row_layout(x.spec, [len(x.spec.shape) - 1])
    kind = "layer_norm" if norm == "LayerNorm" else "rms_norm"
    if kind == "rms_norm":
        common.pop("bias")
    return RowPlan(family="module_norm_activation", summary=summary, kind=kind, rows=outer, length=length, **common)


# torch.nn classes that run one templated aten op: their aten card is searched instead.
COVERED_BY_ATEN_CARDS = {
    "LayerNorm": "layer_norm", "GroupNorm": "group_norm", "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm",
    "BatchNorm3d": "batch_norm", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "AdaptiveAvgPool2d": "adaptive_avg_pool2d", "MaxPool2d": "max_pool2d", "AvgPool2d": "avg_pool2d",
    "MaxPool1d": "max_pool1d", "AvgPool1d": "avg_pool1d",
}


class CoveredByAtenCard(UnsupportedCard):
    """The module runs one op whose aten card the templates serve: that card is the one to search."""


def module_plan(card: OperatorCard) -> KernelPlan:
    """The plan for a module card whose class the catalog lists."""
    name = card.op.rsplit(".", 1)[-1]
    forward, state = module_tensors(card)
    if not forward:
        raise UnsupportedCard(f"{card.op}: no forward tensors")
    rms = _listed(card, RMS_NORM_WEIGHT | RMS_NORM_ROUND_THEN_WEIGHT | RMS_NORM_ZERO_CENTRED | RMS_NORM_GATED
                  | {DIFFUSERS_RMS_NORM})
    if rms is not None:
        return _rms(card, rms, forward, state)
    gated = _listed(card, GATED_ACTIVATIONS)
    if gated is not None:
        return _gated(card, gated, forward, state)
    activation = _listed(card, ACTIVATION_MODULES)
    if activation is not None:
        return _activation(card, activation, forward, state)
    match = NORM_ACTIVATION.search(name)
    if match:
        return _norm_activation(card, match.group(1), match.group(2), forward, state)
    if name in COVERED_BY_ATEN_CARDS:
        raise CoveredByAtenCard(f"{card.op}: covered by its aten card ({COVERED_BY_ATEN_CARDS[name]})")
    raise UnsupportedCard(f"no offline template knows the module class {card.op}")

"""What kind of work an aten overload does, read from its schema, tags and arguments.

Capture records every op, but only some are worth a kernel: views and factories move no data
through a kernel, random ops cannot be checked against a reference, and ops that mutate their
arguments need a contract this version does not offer. Vendor ops (convolution, matmul,
attention) are kept optimisable but flagged: their eager kernels are already library-tuned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

# Overload packets whose eager implementation is a vendor library call (cuBLAS, cuDNN, oneDNN,
# flash/efficient attention), or a convolution, matmul or attention that a kernel search should
# leave to one.
VENDOR_OPS = frozenset({
    # convolution
    "convolution", "_convolution", "_convolution_mode", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "cudnn_convolution",
    "cudnn_convolution_transpose", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
    "miopen_convolution", "miopen_convolution_transpose", "miopen_depthwise_convolution",
    "miopen_convolution_relu", "miopen_convolution_add_relu", "mkldnn_convolution",
    "convolution_overrideable", "_mps_convolution", "_mps_convolution_transpose",
    "_nnpack_spatial_convolution", "_conv_depthwise2d", "conv_depthwise3d", "thnn_conv2d",
    "_slow_conv2d_forward", "slow_conv3d", "slow_conv3d_forward", "slow_conv_dilated2d",
    "slow_conv_dilated3d", "slow_conv_transpose2d", "slow_conv_transpose3d",
    # matmul
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot", "vdot",
    "addr", "inner", "tensordot", "einsum", "bilinear", "_trilinear", "chain_matmul",
    "linalg_matmul", "linalg_multi_dot", "_addmm_activation", "mkldnn_linear",
    "_mixed_dtypes_linear", "_int_mm", "_scaled_mm", "_scaled_mm_v2", "_grouped_mm",
    "_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_weight_int4pack_mm",
    "_weight_int4pack_mm_for_cpu", "_weight_int4pack_mm_with_scales_and_zeros",
    "_weight_int8pack_mm", "_dyn_quant_matmul_4bit", "_cslt_sparse_mm",
    "_sparse_semi_structured_mm", "_sparse_semi_structured_addmm", "_sparse_semi_structured_linear",
    # attention
    "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps",
    "_flash_attention_forward", "_flash_attention_forward_no_dropout_inplace",
    "_efficient_attention_forward", "_cudnn_attention_forward", "_fused_sdp_choice",
    "_native_multi_head_attention", "_transformer_encoder_layer_fwd", "_triton_multi_head_attention",
    "_triton_scaled_dot_attention",
    # linear solvers: LAPACK on the cpu, cuBLAS trsm or cuSOLVER on cuda, library calls as a matmul is
    # (Qwen 3.5's gated delta rule solves a triangular system per chunk)
    "linalg_solve_triangular", "triangular_solve", "linalg_solve", "linalg_solve_ex", "_linalg_solve_ex",
    "cholesky_solve", "_cholesky_solve_helper", "linalg_lu_solve", "lu_solve",
})

# Ops that create tensors from sizes or from another tensor's metadata, never from its values.
FACTORY_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "arange",
    "linspace", "logspace", "eye", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "tensor",
})

NORMALISATION_OPS = frozenset({
    "native_layer_norm", "layer_norm", "group_norm", "native_group_norm", "batch_norm",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_batch_norm_impl_index", "instance_norm", "rms_norm", "_fused_rms_norm", "softmax",
    "_softmax", "log_softmax", "_log_softmax", "mean", "sum", "var", "var_mean", "std",
    "std_mean", "amax", "amin", "norm", "linalg_vector_norm",
})

# Ops that only convert or copy values; allowed inside an elementwise module.
COPY_OPS = frozenset({"_to_copy", "to", "copy", "clone", "contiguous", "type_as", "detach", "alias"})

# Norm ops that update ``running_mean`` and ``running_var`` in place although their schemas mark
# no write: the bool argument named here switches the update on (None: whenever stats are given).
RUNNING_STAT_UPDATES: Mapping[str, str | None] = {
    "batch_norm": "training", "native_batch_norm": "training", "_batch_norm_impl_index": "training",
    "cudnn_batch_norm": "training", "miopen_batch_norm": "training", "instance_norm": "use_input_stats",
    "batch_norm_update_stats": None, "batch_norm_gather_stats_with_counts": None,
}
RUNNING_STATS = ("running_mean", "running_var")

ADAPTIVE_POOL_OPS = frozenset({
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d", "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d",
})


def overload_name(func: torch._ops.OpOverload) -> str:
    """``aten::_softmax.default``: the schema's qualified name plus its overload."""
    schema = func._schema
    return f"{schema.name}.{schema.overload_name or 'default'}"


def packet_name(func: torch._ops.OpOverload) -> str:
    """``_softmax`` for ``aten::_softmax.default``."""
    return func._schema.name.split("::", 1)[-1]


@dataclass(frozen=True)
class OpTraits:
    """The static facts of one overload that decide how capture treats its calls."""

    name: str
    packet: str
    vendor: bool
    factory: bool
    pointwise: bool
    normalisation: bool
    copy: bool
    seeded_random: bool
    written_arguments: tuple[str, ...]

    @property
    def elementwise_or_norm(self) -> bool:
        """Work a fused elementwise/normalisation kernel can absorb."""
        return self.pointwise or self.normalisation or self.copy


_TRAITS_CACHE: dict[torch._ops.OpOverload, OpTraits] = {}


def op_traits(func: torch._ops.OpOverload) -> OpTraits:
    """The traits of ``func`` (cached: called on every captured op)."""
    traits = _TRAITS_CACHE.get(func)
    if traits is None:
        packet = packet_name(func)
        tags = set(func.tags)
        written = tuple(
            a.name for a in func._schema.arguments if a.alias_info is not None and a.alias_info.is_write
        )
        traits = OpTraits(
            name=overload_name(func),
            packet=packet,
            vendor=packet in VENDOR_OPS,
            factory=packet in FACTORY_OPS,
            pointwise=torch.Tag.pointwise in tags,
            normalisation=packet in NORMALISATION_OPS,
            copy=packet in COPY_OPS,
            seeded_random=torch.Tag.nondeterministic_seeded in tags,
            written_arguments=written,
        )
        _TRAITS_CACHE[func] = traits
    return traits


def bound_arguments(
    func: torch._ops.OpOverload, args: Sequence[object], kwargs: Mapping[str, object]
) -> dict[str, object]:
    """The call's arguments by schema name (defaults left out)."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def is_random_call(traits: OpTraits, bound: Mapping[str, object]) -> bool:
    """A seeded-random op, unless this call switched its randomness off (dropout p=0, eval)."""
    if not traits.seeded_random:
        return False
    if bound.get("train") is False:
        return False
    prob = bound.get("p", bound.get("dropout_p"))
    if prob is None:
        return not traits.vendor  # attention's dropout_p defaults to 0
    return not (isinstance(prob, (int, float)) and float(prob) == 0.0)


def written_tensors(traits: OpTraits, bound: Mapping[str, object]) -> list[torch.Tensor]:
    """The tensors the call writes in place (``self`` of ``add_``, ``out`` of ``add.out``).

    Besides the schema's writes, the running stats a training-mode batch norm updates: a kernel
    checked only against the op's output would silently stop them updating.
    """
    found: list[torch.Tensor] = []
    for name in (*traits.written_arguments, *_updated_running_stats(traits.packet, bound)):
        value = bound.get(name)
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _updated_running_stats(packet: str, bound: Mapping[str, object]) -> tuple[str, ...]:
    """The running-stat arguments this call of a norm op updates in place (none for other ops)."""
    if packet not in RUNNING_STAT_UPDATES:
        return ()
    flag = RUNNING_STAT_UPDATES[packet]
    return RUNNING_STATS if flag is None or bool(bound.get(flag)) else ()


#: Overload packets that skip an empty part: eager's cat drops a legacy 1-D ``[0]`` tensor, and any
#: other empty part adds no elements, so a cat with a non-empty output copies only its other parts.
EMPTY_PART_SKIPPING_OPS = frozenset({"cat"})


def operates_on_empty(traits: OpTraits, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> bool:
    """Whether the call has no work for a kernel: an empty output, or an empty input the op reads.

    An empty part of a cat that still has a non-empty output is skipped, not read: such a call is
    an ordinary copy of its other parts (the empty part's shape and dtype stay in its variant key).
    """
    if any(t.numel() == 0 for t in outputs):
        return True
    if traits.packet in EMPTY_PART_SKIPPING_OPS:
        return False
    return any(t.numel() == 0 for t in inputs)


def is_identity_adaptive_pool(traits: OpTraits, bound: Mapping[str, object]) -> bool:
    """An adaptive pool whose output size equals its input's spatial size (a copy)."""
    if traits.packet not in ADAPTIVE_POOL_OPS:
        return False
    source = bound.get("self", bound.get("input"))
    size = bound.get("output_size")
    if not isinstance(source, torch.Tensor) or not isinstance(size, (list, tuple)):
        return False
    spatial = tuple(source.shape[-len(size):]) if size else ()
    return tuple(int(s) if s is not None else d for s, d in zip(size, spatial, strict=True)) == spatial

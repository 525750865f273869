"""Every offline template family, compiled with g++ and run on real tensors against eager."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.models.normalization import RMSNorm as DiffusersRMSNorm

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.proposer import propose_offline
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ParentCandidate, ProposeRequest
from tests.agent_service.agent_cards import (
    aten_card,
    compile_cpu,
    fresh_like,
    module_card,
    on_cuda,
    reference,
    root_and_revisions,
    run_kernel,
)
from tests.agent_service.agent_modules import (
    BiasReLU,
    GeluAndMul,
    GeluTanhWrittenOut,
    Gemma3RMSNorm,
    GroupNormSiLU,
    LlamaRMSNorm,
    Qwen3_5MoeRMSNormGated,
    SiluAndMul,
    SlicedBiasSiLU,
    SumThenScale,
    Swish,
    UpcastResidual,
)

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
TOLERANCE = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.2e-2, "int64": 0.0, "bool": 0.0}  # moved bits: exact


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


@dataclass
class Case:
    name: str
    family: str
    make: Callable[[], tuple[Any, list[Any]]]
    positive: tuple[int, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


def _cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


ATEN_CASES = [
    Case("relu", "elementwise_unary", lambda: (aten.relu.default, [r(4, 33)])),
    Case("gelu_erf", "elementwise_unary", lambda: (aten.gelu.default, [r(3, 130)])),
    Case("gelu_tanh_bf16", "elementwise_unary", lambda: (aten.gelu.default, [r(2, 64, dtype=bf16)]),
         kwargs={"approximate": "tanh"}),
    Case("silu_f16", "elementwise_unary", lambda: (aten.silu.default, [r(5, 40, dtype=f16)])),
    Case("sigmoid_bf16", "elementwise_unary", lambda: (aten.sigmoid.default, [r(7, 9, dtype=bf16)])),
    Case("tanh", "elementwise_unary", lambda: (aten.tanh.default, [r(100)])),
    Case("exp", "elementwise_unary", lambda: (aten.exp.default, [r(3, 3, 3)])),
    Case("neg_transposed", "elementwise_unary", lambda: (aten.neg.default, [r(16, 8).t()])),
    Case("abs_strided", "elementwise_unary", lambda: (aten.abs.default, [r(6, 20)[:, ::2]])),
    Case("rsqrt", "elementwise_unary", lambda: (aten.rsqrt.default, [r(64)]), positive=(0,)),
    Case("log", "elementwise_unary", lambda: (aten.log.default, [r(64)]), positive=(0,)),
    Case("leaky_relu", "elementwise_unary", lambda: (aten.leaky_relu.default, [r(50), 0.2])),
    Case("hardswish", "elementwise_unary", lambda: (aten.hardswish.default, [r(50) * 4])),
    Case("softplus", "elementwise_unary", lambda: (aten.softplus.default, [r(50) * 12])),
    Case("relu6_with_nan", "elementwise_unary",
         lambda: (aten.relu6.default, [torch.tensor([float("nan"), -1.0, 0.0, 3.5, 6.0, 9.0] * 4)])),
    Case("log_sigmoid", "elementwise_unary", lambda: (aten.log_sigmoid.default, [r(64) * 40])),
    Case("log_sigmoid_bf16", "elementwise_unary", lambda: (aten.log_sigmoid.default, [r(8, 33, dtype=bf16) * 12])),
    Case("mish_bf16", "elementwise_unary", lambda: (aten.mish.default, [r(4, 50, dtype=bf16) * 8])),
    Case("clamp_min", "elementwise_unary", lambda: (aten.clamp_min.default, [r(50), 0.25])),
    Case("clamp_max_f16", "elementwise_unary", lambda: (aten.clamp_max.default, [r(50, dtype=f16), -0.5])),
    Case("threshold", "elementwise_unary", lambda: (aten.threshold.default, [r(50), 0.1, -3.0])),
    Case("erf", "elementwise_unary", lambda: (aten.erf.default, [r(3, 50) * 2])),
    Case("expm1", "elementwise_unary", lambda: (aten.expm1.default, [r(50)])),
    Case("log1p", "elementwise_unary", lambda: (aten.log1p.default, [r(50)]), positive=(0,)),
    Case("log2_bf16", "elementwise_unary", lambda: (aten.log2.default, [r(50, dtype=bf16)]), positive=(0,)),
    Case("exp2", "elementwise_unary", lambda: (aten.exp2.default, [r(50)])),
    Case("tan", "elementwise_unary", lambda: (aten.tan.default, [r(50)])),
    Case("atan", "elementwise_unary", lambda: (aten.atan.default, [r(50) * 5])),
    Case("square_transposed", "elementwise_unary", lambda: (aten.square.default, [r(8, 6).t()])),
    Case("floor", "elementwise_unary", lambda: (aten.floor.default, [r(50) * 9])),
    Case("fake_quantize_uint8_range", "elementwise_unary", lambda: (aten.fake_quantize_per_tensor_affine.default, [
        torch.cat([r(64) * 20, torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, 0.25, 0.35])]),
        0.1, 3, 0, 255])),
    Case("fake_quantize_int8_bf16", "elementwise_unary", lambda: (aten.fake_quantize_per_tensor_affine.default, [
        r(8, 33, dtype=bf16) * 3, 0.0371, -5, -128, 127])),
    Case("ceil_bf16", "elementwise_unary", lambda: (aten.ceil.default, [r(50, dtype=bf16) * 9])),
    Case("trunc", "elementwise_unary", lambda: (aten.trunc.default, [r(50) * 9])),
    Case("round", "elementwise_unary", lambda: (aten.round.default, [r(50) * 9])),
    Case("sign_f16", "elementwise_unary", lambda: (aten.sign.default, [r(50, dtype=f16)])),
    Case("softplus_beta_threshold_bf16", "elementwise_unary",
         lambda: (aten.softplus.default, [r(4, 50, dtype=bf16) * 12, 2.0, 5.0])),
    Case("clamp", "elementwise_unary", lambda: (aten.clamp.default, [r(50), -0.5, 0.7])),
    Case("pow_scalar", "elementwise_unary", lambda: (aten.pow.Tensor_Scalar, [r(50), 2])),
    Case("cast_f32_to_bf16", "elementwise_copy", lambda: (aten.to.dtype, [r(4, 40), bf16])),
    Case("type_as_bf16_to_f32", "elementwise_copy",
         lambda: (aten.type_as.default, [r(2, 16, 48, dtype=bf16), r(1, dtype=torch.float32)])),
    Case("contiguous_from_transposed", "elementwise_copy", lambda: (aten.contiguous.default, [r(6, 10).t()])),
    Case("to_copy_half", "elementwise_copy", lambda: (aten._to_copy.default, [r(4, 8, dtype=f16)]),
         kwargs={"dtype": torch.float32}),
    Case("add_same", "elementwise_binary", lambda: (aten.add.Tensor, [r(8, 32), r(8, 32)])),
    Case("addcmul_broadcast", "elementwise_ternary", lambda: (aten.addcmul.default, [r(6, 20), r(6, 20), r(20)]),
         kwargs={"value": 0.5}),
    Case("addcdiv_bf16", "elementwise_ternary", lambda: (aten.addcdiv.default, [r(4, 33, dtype=bf16),
                                                                                 r(4, 33, dtype=bf16),
                                                                                 r(4, 33, dtype=bf16)]),
         positive=(2,)),
    Case("lerp_scalar", "elementwise_ternary", lambda: (aten.lerp.Scalar, [r(5, 30), r(5, 30), 0.75])),
    Case("lerp_tensor_weight", "elementwise_ternary", lambda: (aten.lerp.Tensor, [r(5, 30), r(5, 30), r(5, 30)])),
    Case("nan_to_num_bf16", "elementwise_unary", lambda: (aten.nan_to_num.default, [
        torch.tensor([[float("nan"), float("inf"), -float("inf"), 1.5]] * 3, dtype=bf16)])),
    Case("nan_to_num_given", "elementwise_unary", lambda: (aten.nan_to_num.default, [
        torch.tensor([float("nan"), float("inf"), -float("inf"), -2.0] * 5), 1.0, 9.0, -9.0])),
    Case("add_row_broadcast_bf16", "elementwise_binary",
         lambda: (aten.add.Tensor, [r(4, 48, dtype=bf16), r(48, dtype=bf16)])),
    Case("sub_alpha", "elementwise_binary", lambda: (aten.sub.Tensor, [r(8, 8), r(8, 1)]), kwargs={"alpha": 0.5}),
    Case("mul_python_scalar", "elementwise_binary", lambda: (aten.mul.Tensor, [r(5, 7), 2.5])),
    Case("div_column_broadcast", "elementwise_binary", lambda: (aten.div.Tensor, [r(6, 10), r(6, 1)]),
         positive=(1,)),
    Case("add_scalar_alpha", "elementwise_binary", lambda: (aten.add.Scalar, [r(9), 3.0, 2])),
    Case("mul_channels_last_bias", "elementwise_binary",
         lambda: (aten.mul.Tensor, [_cl(r(2, 8, 5, 5)), r(1, 8, 1, 1)])),
    Case("maximum", "elementwise_binary", lambda: (aten.maximum.default, [r(33), r(33)])),
    Case("add_mixed_dtypes", "elementwise_binary", lambda: (aten.add.Tensor, [r(4, 8, dtype=bf16), r(4, 8)])),
    Case("sum_last", "reduction", lambda: (aten.sum.dim_IntList, [r(6, 50), [-1]])),
    Case("sum_spatial_keepdim_bf16", "reduction",
         lambda: (aten.sum.dim_IntList, [r(2, 3, 8, 8, dtype=bf16), [2, 3], True])),
    Case("mean_dim0_inner", "reduction", lambda: (aten.mean.dim, [r(30, 7), [0]])),
    Case("amax_last", "reduction", lambda: (aten.amax.default, [r(5, 77), [-1]])),
    Case("var_last_unbiased", "reduction", lambda: (aten.var.dim, [r(6, 90) * 3 + 7, [-1]])),
    Case("std_dim1_biased_bf16", "reduction", lambda: (aten.std.correction, [r(4, 30, 9, dtype=bf16), [1]]),
         kwargs={"correction": 0, "keepdim": True}),
    Case("var_spatial", "reduction", lambda: (aten.var.dim, [r(2, 5, 6, 7), [2, 3]])),
    Case("std_all_correction_2", "reduction", lambda: (aten.std.correction, [r(5, 41)]), kwargs={"correction": 2}),
    Case("vector_norm_last_f16", "reduction",
         lambda: (aten.linalg_vector_norm.default, [r(7, 64, dtype=f16), 2, [-1]])),
    Case("vector_norm_all", "reduction", lambda: (aten.linalg_vector_norm.default, [r(3, 50)])),
    Case("mean_of_the_patch_tokens", "reduction", lambda: (aten.mean.dim, [r(4, 65, 32)[:, 1:], [1]])),
    Case("sum_last_of_a_column_slice", "reduction", lambda: (aten.sum.dim_IntList, [r(3, 4, 64)[:, :, :50], [-1]])),
    Case("var_spatial_of_every_other_batch", "reduction", lambda: (aten.var.dim, [r(6, 3, 5, 7)[::2], [2, 3]])),
    Case("amax_of_a_slice_bf16", "reduction",
         lambda: (aten.amax.default, [r(5, 2, 48, dtype=bf16)[1:, :, 8:], [-1], True])),
    Case("logsumexp_last_bf16", "reduction", lambda: (aten.logsumexp.default, [r(6, 70, dtype=bf16) * 30, [-1]])),
    Case("logsumexp_dim0_keepdim", "reduction", lambda: (aten.logsumexp.default, [r(9, 5, 4), [0], True])),
    Case("sum_all", "reduction", lambda: (aten.sum.default, [r(3, 41)])),
    Case("softmax_last", "softmax", lambda: (aten._softmax.default, [r(8, 100), -1, False])),
    Case("softmax_dim1_inner", "softmax", lambda: (aten.softmax.int, [r(2, 10, 6), 1])),
    Case("log_softmax_f16", "softmax", lambda: (aten._log_softmax.default, [r(4, 64, dtype=f16), -1, False])),
    Case("log_softmax_bf16", "softmax", lambda: (aten.log_softmax.int, [r(3, 257, dtype=bf16), -1])),
    Case("native_layer_norm", "layer_norm",
         lambda: (aten.native_layer_norm.default, [r(6, 64), [64], r(64), r(64), 1e-5])),
    Case("layer_norm_bf16_two_dims", "layer_norm",
         lambda: (aten.layer_norm.default, [r(3, 4, 16, dtype=bf16) + 3, [4, 16], r(4, 16, dtype=bf16), None])),
    Case("rms_norm_bf16", "rms_norm",
         lambda: (aten.rms_norm.default, [r(5, 96, dtype=bf16), [96], r(96, dtype=bf16), 1e-6])),
    Case("fused_rms_norm_no_eps", "rms_norm", lambda: (aten._fused_rms_norm.default, [r(4, 32), [32], r(32), None])),
    Case("native_group_norm", "group_norm",
         lambda: (aten.native_group_norm.default, [r(2, 8, 5, 5), r(8), r(8), 2, 8, 25, 4, 1e-5])),
    Case("group_norm_bf16", "group_norm",
         lambda: (aten.group_norm.default, [r(2, 6, 4, 4, dtype=bf16), 3, r(6), r(6)])),
    # nn.PixelShuffle and nn.PixelUnshuffle: data movement between channels and pixels
    Case("pixel_shuffle", "gather_reshape", lambda: (aten.pixel_shuffle.default, [r(2, 12, 5, 7), 2])),
    Case("pixel_shuffle_channels_last_bf16", "gather_reshape",
         lambda: (aten.pixel_shuffle.default, [_cl(r(1, 18, 4, 3, dtype=bf16)), 3])),
    Case("pixel_unshuffle_5d", "gather_reshape", lambda: (aten.pixel_unshuffle.default, [r(2, 3, 2, 6, 4), 2])),
    Case("im2col_3x3_padded", "gather_reshape", lambda: (aten.im2col.default, [r(2, 3, 7, 6), [3, 3], [1, 1], [1, 1],
                                                                                [1, 1]])),
    Case("im2col_strided_dilated_chw_bf16", "gather_reshape",
         lambda: (aten.im2col.default, [r(4, 11, 9, dtype=bf16), [2, 3], [2, 1], [0, 2], [2, 3]])),
    Case("im2col_channels_last_patches", "gather_reshape",
         lambda: (aten.im2col.default, [_cl(r(1, 5, 8, 8)), [4, 4], [1, 1], [0, 0], [4, 4]])),
    # nn.PReLU: one weight, or one per channel (dim 1)
    Case("prelu_per_channel", "elementwise_binary", lambda: (aten.prelu.default, [r(2, 6, 5, 7), r(6)])),
    Case("prelu_one_weight_bf16", "elementwise_binary",
         lambda: (aten.prelu.default, [r(3, 40, dtype=bf16), r(1, dtype=bf16)])),
    Case("prelu_channels_last", "elementwise_binary", lambda: (aten.prelu.default, [_cl(r(2, 8, 3, 5)), r(8)])),
    # nn.InstanceNorm*: a group norm with a group per channel, over each sample's own statistics
    Case("instance_norm", "group_norm",
         lambda: (aten.instance_norm.default, [r(2, 6, 5, 7), r(6), r(6), None, None, True, 0.1, 1e-5, False])),
    Case("instance_norm_1d_no_affine_bf16", "group_norm",
         lambda: (aten.instance_norm.default, [r(3, 4, 50, dtype=bf16), None, None, None, None, True, 0.1, 1e-3,
                                               False])),
    Case("instance_norm_channels_last", "group_norm",
         lambda: (aten.instance_norm.default, [_cl(r(2, 8, 3, 5)), r(8), r(8), None, None, True, 0.1, 1e-5, False])),
    Case("batch_norm_legit_no_training", "batch_norm_inference",
         lambda: (aten._native_batch_norm_legit_no_training.default,
                  [r(2, 8, 4, 4), r(8), r(8), r(8), r(8), 0.1, 1e-5]),
         positive=(4,)),
    Case("batch_norm_channels_last_bf16", "batch_norm_inference",
         lambda: (aten.batch_norm.default, [_cl(r(2, 16, 3, 3, dtype=bf16)), r(16), r(16), r(16), r(16), False, 0.1,
                                            1e-5, False]), positive=(4,)),
    Case("native_batch_norm_eval", "batch_norm_inference",
         lambda: (aten.native_batch_norm.default, [r(4, 6), None, None, r(6), r(6), False, 0.1, 1e-3]), positive=(2,)),
    Case("global_avg_pool", "global_avg_pool", lambda: (aten.adaptive_avg_pool2d.default, [r(2, 8, 7, 7), [1, 1]])),
    Case("adaptive_avg_pool_3x4", "adaptive_avg_pool",
         lambda: (aten._adaptive_avg_pool2d.default, [r(2, 4, 7, 10), [3, 4]])),
    Case("adaptive_avg_pool_bf16", "adaptive_avg_pool",
         lambda: (aten.adaptive_avg_pool2d.default, [r(3, 5, 5, dtype=bf16), [2, 2]])),
    Case("avg_pool_3x3_s2_p1", "avg_pool",
         lambda: (aten.avg_pool2d.default, [r(2, 4, 11, 11), [3, 3], [2, 2], [1, 1]])),
    Case("avg_pool_no_pad_count_ceil_bf16", "avg_pool",
         lambda: (aten.avg_pool2d.default, [r(2, 3, 10, 9, dtype=bf16), [3, 2], [2, 2], [1, 1], True, False])),
    Case("avg_pool_default_stride_divisor", "avg_pool",
         lambda: (aten.avg_pool2d.default, [r(1, 5, 8, 8), [2, 2], [], [0, 0], False, True, 3])),
    Case("avg_pool_chw_f16", "avg_pool", lambda: (aten.avg_pool2d.default, [r(6, 13, 7, dtype=f16), [5, 3], [1, 2]])),
    Case("max_pool_3x3_s2_p1", "max_pool",
         lambda: (aten.max_pool2d.default, [r(2, 4, 11, 11), [3, 3], [2, 2], [1, 1]])),
    Case("max_pool_default_stride_ceil_bf16", "max_pool",
         lambda: (aten.max_pool2d.default, [r(2, 3, 9, 9, dtype=bf16), [2, 2], [], [0, 0], [1, 1], True])),
    Case("max_pool_channels_last_stem", "max_pool",
         lambda: (aten.max_pool2d.default, [_cl(r(2, 8, 11, 11)), [3, 3], [2, 2], [1, 1]])),
    Case("max_pool_of_a_slice", "max_pool",
         lambda: (aten.max_pool2d.default, [r(2, 4, 9, 12)[..., 1:10], [2, 2], [2, 2]])),
    Case("avg_pool_channels_last_bf16", "avg_pool",
         lambda: (aten.avg_pool2d.default, [_cl(r(2, 8, 10, 9, dtype=bf16)), [3, 3], [2, 2], [1, 1], True, False])),
    Case("adaptive_avg_pool_channels_last", "adaptive_avg_pool",
         lambda: (aten._adaptive_avg_pool2d.default, [_cl(r(2, 8, 7, 10)), [3, 4]])),
    Case("upsample_bilinear_channels_last", "upsample_bilinear",
         lambda: (aten.upsample_bilinear2d.vec, [_cl(r(2, 8, 6, 7)), None, False, [2.0, 2.0]])),
    Case("upsample_bicubic_channels_last_aligned", "upsample_bicubic",
         lambda: (aten.upsample_bicubic2d.vec, [_cl(r(1, 8, 7, 7)), [9, 12], True, None])),
    Case("max_pool_dilated", "max_pool",
         lambda: (aten.max_pool2d.default, [r(1, 2, 12, 12), [3, 3], [1, 1], [1, 1], [2, 2]])),
    Case("max_pool1d_k3_s2_p1_dilated_ceil", "max_pool",
         lambda: (aten.max_pool1d.default, [r(2, 4, 37), [3], [2], [1], [2], True])),
    Case("max_pool1d_cl_default_stride_bf16", "max_pool",
         lambda: (aten.max_pool1d.default, [r(6, 20, dtype=bf16), [2]])),
    Case("avg_pool1d_k4_s3_p2_no_pad_count", "avg_pool",
         lambda: (aten.avg_pool1d.default, [r(3, 5, 29), [4], [3], [2], True, False])),
    Case("avg_pool1d_default_stride_f16", "avg_pool", lambda: (aten.avg_pool1d.default, [r(2, 3, 16, dtype=f16), [2]])),
    # Data movement (gather): raw element copies from the card's exact layouts.
    Case("upsample_nearest_x2_channels_last_bf16", "gather_upsample_nearest",
         lambda: (aten.upsample_nearest2d.vec, [_cl(r(1, 16, 4, 5, dtype=bf16)), None, [2.0, 2.0]])),
    Case("upsample_nearest_to_size", "gather_upsample_nearest",
         lambda: (aten.upsample_nearest2d.vec, [r(2, 3, 5, 7), [8, 10], None])),
    Case("upsample_nearest_exact_scale", "gather_upsample_nearest",
         lambda: (aten._upsample_nearest_exact2d.vec, [r(1, 2, 6, 6), None, [1.5, 0.7]])),
    Case("cat_last_of_strided_bf16", "gather_cat",
         lambda: (aten.cat.default, [[r(2, 4, 8, 16, dtype=bf16), r(2, 4, 8, 32, dtype=bf16)[..., ::2]], -1])),
    Case("cat_three_along_tokens", "gather_cat",
         lambda: (aten.cat.default, [[r(2, 5, 8), r(2, 1, 8), r(2, 3, 8).transpose(0, 1).contiguous().transpose(0, 1)],
                                     1])),
    Case("cat_skips_legacy_empty", "gather_cat", lambda: (aten.cat.default, [[r(0), r(3, 6)]])),
    Case("index_rows_negative_wrap", "gather_index",
         lambda: (aten.index.Tensor, [r(12, 10), [torch.tensor([[3, -1], [0, -12]])]])),
    Case("index_middle_dim_int32_f16", "gather_index",
         lambda: (aten.index.Tensor, [r(3, 9, 5, dtype=f16), [None, torch.tensor([8, 0, 4], dtype=torch.int32)]])),
    Case("embedding_tokens_bf16", "gather_embedding",
         lambda: (aten.embedding.default, [r(50, 24, dtype=bf16), torch.tensor([[3, 0, 49], [7, 7, 12]])]),
         positive=(1,)),  # fresh indices |randn|: in range, as eager requires
    Case("embedding_int32_of_transposed_weight", "gather_embedding",
         lambda: (aten.embedding.default, [r(16, 30).t(), torch.tensor([29, 1, 5], dtype=torch.int32), 0]),
         positive=(1,)),
    Case("stack_last_of_views_bf16", "gather_cat", lambda: (aten.stack.default, [
        [r(4, 6, dtype=bf16), r(6, 4, dtype=bf16).t(), r(4, 12, dtype=bf16)[:, ::2]], -1])),
    Case("stack_front", "gather_cat", lambda: (aten.stack.default, [[r(3, 5), r(3, 5)]])),
    Case("constant_pad_nd_front_and_back", "gather_pad",
         lambda: (aten.constant_pad_nd.default, [r(2, 3, 7), [2, 1, 0, 3], 0.5])),
    Case("pad_crop_and_pad_bf16", "gather_pad",
         lambda: (aten.pad.default, [r(2, 6, 9, dtype=bf16), [-2, 3]])),
    Case("upsample_bilinear_by_2", "upsample_bilinear",
         lambda: (aten.upsample_bilinear2d.vec, [r(2, 3, 6, 7), None, False, [2.0, 2.0]])),
    Case("upsample_bilinear_to_a_size_aligned_bf16", "upsample_bilinear",
         lambda: (aten.upsample_bilinear2d.vec, [r(1, 4, 5, 9, dtype=bf16), [7, 20], True, None])),
    Case("downsample_bilinear_by_a_third", "upsample_bilinear",
         lambda: (aten.upsample_bilinear2d.vec, [r(1, 3, 12, 10), None, False, [0.34, 1.5]])),
    Case("glu_of_channels", "elementwise_binary", lambda: (aten.glu.default, [r(2, 8, 30), 1])),
    Case("glu_last_of_transposed_bf16", "elementwise_binary",
         lambda: (aten.glu.default, [r(2, 30, 8, dtype=bf16).transpose(1, 2), -1])),
    Case("affine_grid", "gather_affine_grid",
         lambda: (aten.affine_grid_generator.default, [r(4, 2, 3), [4, 3, 17, 23], False])),
    Case("affine_grid_aligned_of_a_transposed_theta", "gather_affine_grid",
         lambda: (aten.affine_grid_generator.default, [r(3, 3, 2).transpose(1, 2), [3, 1, 9, 6], True])),
    Case("upsample_bicubic_to_a_size", "upsample_bicubic",
         lambda: (aten.upsample_bicubic2d.vec, [r(2, 3, 7, 7), [9, 12], False, None])),
    Case("upsample_bicubic_by_2_bf16", "upsample_bicubic",
         lambda: (aten.upsample_bicubic2d.vec, [r(1, 4, 6, 5, dtype=bf16), None, False, [2.0, 2.0]])),
    Case("downsample_bicubic_aligned", "upsample_bicubic",
         lambda: (aten.upsample_bicubic2d.vec, [r(1, 2, 12, 10), [5, 7], True, None])),
    Case("bicubic_by_scales_down_and_up", "upsample_bicubic",
         lambda: (aten.upsample_bicubic2d.vec, [r(1, 3, 9, 9), None, False, [0.4, 1.7]])),
    Case("upsample_linear_by_2", "upsample_linear",
         lambda: (aten.upsample_linear1d.vec, [r(2, 3, 40), None, False, [2.0]])),
    Case("upsample_linear_to_a_size_aligned_bf16", "upsample_linear",
         lambda: (aten.upsample_linear1d.vec, [r(1, 4, 9, dtype=bf16), [31], True, None])),
    Case("downsample_linear_default_with_scale", "upsample_linear",
         lambda: (aten.upsample_linear1d.default, [r(2, 2, 30), [11], False, 0.37])),
    Case("upsample_bilinear_default", "upsample_bilinear",
         lambda: (aten.upsample_bilinear2d.default, [r(2, 2, 4, 4), [9, 5], False])),
    Case("pad_reflect_2d", "gather_pad", lambda: (aten.pad.default, [r(2, 3, 6, 9), [1, 2, 5, 0], "reflect"])),
    Case("pad_replicate_past_the_size_bf16", "gather_pad",
         lambda: (aten.pad.default, [r(2, 3, 4, dtype=bf16), [6, 1], "replicate"])),
    Case("pad_circular_of_transposed", "gather_pad",
         lambda: (aten.pad.default, [r(1, 7, 5).transpose(1, 2), [7, 3], "circular"])),
    Case("masked_fill_broadcast_mask_bf16", "gather_select",
         lambda: (aten.masked_fill.Scalar, [r(2, 4, 6, dtype=bf16), torch.randn(4, 1) > 0, -1e4])),
    Case("where_broadcast", "gather_select",
         lambda: (aten.where.self, [torch.randn(3, 1, 8) > 0, r(3, 5, 8), r(8)])),
    Case("where_mixed_dtypes_promote", "gather_select",
         lambda: (aten.where.self, [torch.randn(3, 1, 8) > 0, r(3, 5, 8, dtype=bf16), r(8)])),
    Case("where_scalar_other_bf16", "gather_select",
         lambda: (aten.where.ScalarOther, [torch.randn(4, 6) > 0, r(4, 6, dtype=bf16), -1e4])),
    Case("where_scalar_self_of_transposed", "gather_select",
         lambda: (aten.where.ScalarSelf, [torch.randn(6, 4).t() > 0, 0.1, r(6, 4).t()])),
    Case("argmax_rows_bf16", "arg_extreme", lambda: (aten.argmax.default, [r(6, 40, dtype=bf16), 1])),
    Case("argmin_middle_keepdim", "arg_extreme", lambda: (aten.argmin.default, [r(3, 7, 5), 1, True])),
    Case("gather_last_dim", "gather_index",
         lambda: (aten.gather.default, [r(4, 10), 1, torch.tensor([[0, 9, 3], [1, 1, 1], [2, 0, 8], [4, 5, 6]])]),
         positive=(1,)),  # fresh indices |randn|: in range, as eager requires
    Case("gather_dim0_of_transposed_bf16", "gather_index",
         lambda: (aten.gather.default, [r(6, 5, dtype=bf16).t(), 0, torch.tensor([[4, 0], [3, 3], [1, 2]])]),
         positive=(1,)),
    Case("repeat_interleave_heads_bf16", "gather_repeat",
         lambda: (aten.repeat_interleave.self_int, [r(2, 2, 5, 8, dtype=bf16).transpose(1, 2), 3, 2])),
    Case("repeat_interleave_flat_of_transposed", "gather_repeat",
         lambda: (aten.repeat_interleave.self_int, [r(4, 3).t(), 2]), kwargs={"output_size": 24}),
    Case("flip_two_dims_of_transposed_bf16", "gather_shift",
         lambda: (aten.flip.default, [r(5, 4, 3, dtype=bf16).transpose(0, 2), [0, -1]])),
    Case("roll_windows_channels_last", "gather_shift",
         lambda: (aten.roll.default, [_cl(r(2, 6, 5, 4)), [-2, 3, 1], [2, 3, 2]])),
    Case("roll_flattened_of_sliced", "gather_shift", lambda: (aten.roll.default, [r(6, 10)[:, ::3], [-7]])),
    Case("roll_of_one_element", "gather_shift", lambda: (aten.roll.default, [torch.tensor(0.5), [3]])),
    # reshape of a layout no view can express: eager copies in row-major order into a contiguous tensor
    Case("reshape_heads_of_transposed_bf16", "elementwise_copy",
         lambda: (aten.reshape.default, [r(2, 5, 3, 8, dtype=bf16).transpose(1, 2), [2, 3, 40]])),
    Case("flatten_channels_last", "elementwise_copy",
         lambda: (aten.flatten.using_ints, [_cl(r(2, 6, 3, 4)), 1, 3])),
    Case("reshape_strided_slice_to_1d", "elementwise_copy", lambda: (aten.reshape.default, [r(6, 10)[:, ::3], [-1]])),
    Case("reshape_int64_of_transposed", "gather_reshape",
         lambda: (aten.reshape.default, [torch.randint(0, 99, (4, 6, 5)).transpose(0, 2), [5, 24]])),
    Case("flatten_bool_of_sliced", "gather_reshape",
         lambda: (aten.flatten.using_ints, [(torch.randn(3, 8, 4) > 0)[:, ::2], 0, -1])),
    Case("mean_spatial_keepdim", "reduction", lambda: (aten.mean.dim, [r(2, 8, 7, 7), [-1, -2], True])),
    # Dense permuted inputs, walked in storage order (layout.dense_row_layout).
    Case("global_avg_pool_channels_last_bf16", "global_avg_pool",
         lambda: (aten.adaptive_avg_pool2d.default, [_cl(r(2, 8, 7, 7, dtype=bf16)), [1, 1]])),
    Case("mean_spatial_channels_last", "reduction",
         lambda: (aten.mean.dim, [_cl(r(2, 8, 5, 5)), [-1, -2], True])),
    Case("sum_dim0_of_transposed", "reduction", lambda: (aten.sum.dim_IntList, [r(10, 6).t(), [0]])),
    Case("softmax_last_of_transposed", "softmax",
         lambda: (aten._softmax.default, [r(2, 6, 10).transpose(1, 2), -1, False])),
    Case("log_softmax_channels_last_dim1_f16", "softmax",
         lambda: (aten._log_softmax.default, [_cl(r(2, 12, 3, 3, dtype=f16)), 1, False])),
    Case("layer_norm_of_transposed_tokens", "layer_norm",
         lambda: (aten.native_layer_norm.default, [r(2, 16, 9).transpose(1, 2), [16], r(16), r(16), 1e-5])),
    Case("layer_norm_nhwc_view_bf16", "layer_norm",
         lambda: (aten.layer_norm.default, [r(2, 8, 3, 5, dtype=bf16).permute(0, 2, 3, 1), [8], r(8, dtype=bf16),
                                            r(8, dtype=bf16), 1e-6])),
    Case("rms_norm_of_transposed", "rms_norm",
         lambda: (aten.rms_norm.default, [r(3, 32, 7).transpose(1, 2), [32], r(32), 1e-6])),
    Case("amax_channels_last_dim1_f16", "reduction",
         lambda: (aten.amax.default, [_cl(r(2, 12, 3, 3, dtype=f16)), [1]])),
    # Leading dims at their own strides, the rows contiguous: written to a contiguous output in logical order.
    Case("layer_norm_of_batch_first_lstm_output", "layer_norm",
         lambda: (aten.native_layer_norm.default, [r(7, 5, 16).transpose(0, 1), [16], r(16), r(16), 1e-5])),
    Case("softmax_of_tokens_after_the_first", "softmax",
         lambda: (aten._softmax.default, [r(4, 9, 24)[:, 1:], -1, False])),
    Case("log_softmax_of_a_slice_f16", "softmax",
         lambda: (aten._log_softmax.default, [r(3, 5, 40, dtype=f16)[1:, ::2], -1, False])),
    Case("rms_norm_of_a_selected_token_bf16", "rms_norm",
         lambda: (aten.rms_norm.default, [r(6, 3, 32, dtype=bf16)[:, 1], [32], r(32, dtype=bf16), 1e-6])),
    # Kept dims permuted in storage: rows walked in storage order, each value written where it belongs.
    Case("mean_last_of_transposed_heads", "reduction",
         lambda: (aten.mean.dim, [r(2, 5, 3, 8).transpose(1, 2), [-1], True])),
    Case("amax_last_of_permuted_f16", "reduction", lambda: (aten.amax.default, [r(4, 3, 6, dtype=f16).permute(1, 0, 2),
                                                                                [-1]])),
    Case("sum_outer_dim_of_permuted", "reduction", lambda: (aten.sum.dim_IntList, [r(3, 4, 5).permute(2, 0, 1), [1]])),
    # Channels-last group norm: groups are blocks of adjacent channels (group_norm_nhwc).
    Case("group_norm_channels_last_bf16", "group_norm",
         lambda: (aten.group_norm.default, [_cl(r(2, 32, 4, 5, dtype=bf16)), 8, r(32, dtype=bf16), r(32, dtype=bf16),
                                            1e-6])),
    Case("native_group_norm_channels_last_stats", "group_norm",
         lambda: (aten.native_group_norm.default, [_cl(r(3, 12, 3, 5)), r(12), r(12), 3, 12, 15, 4, 1e-5])),
    Case("group_norm_channels_last_no_affine_f16", "group_norm",
         lambda: (aten.group_norm.default, [_cl(r(1, 8, 7, 7, dtype=f16)), 2])),
    Case("group_norm_of_transposed_tokens", "group_norm",
         lambda: (aten.group_norm.default, [r(2, 6, 8).transpose(1, 2), 4, r(8), r(8)])),
    Case("group_norm_channels_last_3d", "group_norm",
         lambda: (aten.group_norm.default, [r(2, 8, 3, 4, 5).contiguous(memory_format=torch.channels_last_3d), 4,
                                            r(8), r(8)])),
]


def _ties(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(-3, 4, shape).to(dtype)


def _specials(n: int) -> torch.Tensor:
    """NaNs of both signs, infinities and zeros of both signs among ties, repeated along a row of ``n``."""
    special = torch.tensor([0.0, -0.0, float("nan"), 1.5, -float("nan"), float("inf"), -0.0, -float("inf"), 1.5])
    return torch.cat([special, torch.randn(n)])[:n] if n > special.numel() else special[:n]


# Sorts: values and indices compared bit for bit; the cards' own tensors (ties, NaN, -0.0) first.
SORT_CASES = [
    Case("sort_stable_int_ties", "sort", lambda: (aten.sort.stable, [_ties(6, 300)]), kwargs={"stable": True}),
    Case("sort_stable_descending_int_ties", "sort", lambda: (aten.sort.stable, [_ties(6, 300)]),
         kwargs={"stable": True, "descending": True}),
    Case("sort_stable_nan_and_signed_zeros", "sort", lambda: (aten.sort.stable, [_specials(40).repeat(3, 1)]),
         kwargs={"stable": True}),
    Case("sort_stable_descending_nan_and_signed_zeros", "sort",
         lambda: (aten.sort.stable, [_specials(40).repeat(3, 1)]), kwargs={"stable": True, "descending": True}),
    Case("sort_stable_bf16_ties", "sort", lambda: (aten.sort.stable, [r(4, 257, dtype=bf16)]),
         kwargs={"stable": True}),
    Case("sort_stable_dim0_of_transposed", "sort", lambda: (aten.sort.stable, [_ties(40, 7).t()]),
         kwargs={"stable": True, "dim": 0}),
    Case("sort_stable_middle_dim_f16", "sort", lambda: (aten.sort.stable, [r(3, 50, 4, dtype=f16)]),
         kwargs={"stable": True, "dim": 1}),
    Case("sort_stable_many_rows_uint8", "sort", lambda: (aten.sort.stable, [_ties(512, 96, dtype=torch.uint8)]),
         kwargs={"stable": True}),
    Case("sort_stable_bool", "sort", lambda: (aten.sort.stable, [_ties(5, 30) > 0]), kwargs={"stable": True}),
    Case("sort_stable_zero_dim_f64", "sort", lambda: (aten.sort.stable, [torch.tensor(2.5, dtype=torch.float64)]),
         kwargs={"stable": True}),
    Case("argsort_stable_int32", "sort", lambda: (aten.argsort.stable, [_ties(4, 70, dtype=torch.int32)]),
         kwargs={"stable": True}),
    Case("topk_largest", "sort", lambda: (aten.topk.default, [r(8, 500), 5])),
    Case("topk_smallest_dim0", "sort", lambda: (aten.topk.default, [r(300, 6), 20, 0, False])),
    # eager's cpu topk orders ties by its own partial_sort / nth_element calls: the kernel makes the same ones
    Case("topk_int_ties_partial_sort", "sort", lambda: (aten.topk.default, [_ties(6, 640), 4])),
    Case("topk_int8_ties_nth_element", "sort", lambda: (aten.topk.default, [_ties(6, 200, dtype=torch.int8), 50])),
    Case("topk_unsorted_ties", "sort", lambda: (aten.topk.default, [_ties(6, 200), 40, -1, True, False])),
    Case("topk_nan_and_signed_zeros", "sort", lambda: (aten.topk.default, [_specials(64).repeat(2, 1), 9])),
]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as integers of the same width: equal exactly when the bits are (NaN too)."""
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("case", SORT_CASES, ids=lambda c: c.name)
def test_sort_family_matches_eager_bit_for_bit(case: Case, build_dir: Path) -> None:
    op, args = case.make()
    card, _ = aten_card(op, args, case.kwargs)
    own = [a for a in args if isinstance(a, torch.Tensor)]
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "sort"
        lib = compile_cpu(source, build_dir)
        for sample in range(2):
            inputs = own if sample == 0 else fresh_like(card, torch.Generator().manual_seed(sample))
            expected = reference(card, op, inputs)
            outputs = [torch.empty_strided(e.shape, e.stride(), dtype=e.dtype).fill_(-7) for e in expected]
            assert run_kernel(lib, inputs, outputs) == 0
            for got, want in zip(outputs, expected, strict=True):
                assert torch.equal(_bits(got), _bits(want)), (case.name, sample, got, want)


def _check(outputs: list[torch.Tensor], expected: list[torch.Tensor], dtype_name: str) -> None:
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected, strict=True):
        if want.numel() == 0:
            continue
        assert not torch.isnan(got).any(), "kernel left elements unwritten"
        tol = TOLERANCE[str(want.dtype).removeprefix("torch.")]
        got64, want64 = got.double(), want.double()
        scale = max(want64.abs().max().item(), 1e-12)
        rel_l2 = ((got64 - want64).norm() / max(want64.norm().item(), 1e-12)).item()
        max_scaled = ((got64 - want64).abs().max() / scale).item()
        assert rel_l2 <= tol and max_scaled <= 4 * tol, (dtype_name, rel_l2, max_scaled)


def _verify(card: OperatorCard, call: Callable[..., Any], inputs_for: Callable[[int], list[torch.Tensor]],
            family: str, tmp: Path, revisions: int = 2) -> None:
    """Root proposal plus ``revisions`` knob changes: each compiles, runs and matches eager."""
    parent = None
    tried: list[dict[str, Any]] = []
    for step in range(revisions + 1):
        proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu", parent=parent,
                                                   tried_knobs=tried, seed=step))
        assert proposal.has_proposal, proposal.no_proposal_reason
        assert proposal.knobs["family"] == family
        assert proposal.knobs not in tried
        lib = compile_cpu(proposal.source, tmp)
        for sample in range(2):
            inputs = inputs_for(sample)
            before = [t.clone() for t in inputs]
            expected = call(inputs)
            outputs = [torch.full_like(e, float("nan")) if e.is_floating_point() else torch.empty_like(e)
                       for e in expected]
            assert run_kernel(lib, inputs, outputs) == 0
            _check(outputs, expected, card.inputs[0].dtype)
            assert all(torch.equal(a, b) for a, b in zip(inputs, before, strict=True)), "kernel wrote its inputs"
        tried.append(proposal.knobs)
        parent = ParentCandidate(candidate_id=f"c{step}", source=proposal.source, knobs=proposal.knobs)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cpu_kernels")


@pytest.mark.parametrize("case", ATEN_CASES, ids=lambda c: c.name)
def test_aten_family_compiles_and_matches_eager(case: Case, build_dir: Path) -> None:
    op, args = case.make()
    card, _ = aten_card(op, args, case.kwargs)

    def inputs_for(sample: int) -> list[torch.Tensor]:
        return fresh_like(card, torch.Generator().manual_seed(sample), case.positive)

    _verify(card, lambda ins: reference(card, op, ins), inputs_for, case.family, build_dir)


def _random_weights(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()
    return module


MODULE_CASES = [
    ("llama_rms_norm_bf16", lambda: LlamaRMSNorm(64), [r(3, 5, 64, dtype=bf16)], {"variance_epsilon": 1e-6},
     "module_rms_norm"),
    ("gemma3_rms_norm_f32", lambda: Gemma3RMSNorm(48), [r(4, 48)], {"eps": 1e-6}, "module_rms_norm"),
    ("qwen_gated_rms_norm_bf16", lambda: Qwen3_5MoeRMSNormGated(32), [r(6, 32, dtype=bf16), r(6, 32, dtype=bf16)],
     {"variance_epsilon": 1e-6}, "module_rms_norm"),
    ("torch_rms_norm_default_eps", lambda: torch.nn.RMSNorm(40), [r(3, 40)], {"eps": None}, "module_rms_norm"),
    ("diffusers_rms_norm_bf16", lambda: _random_weights(DiffusersRMSNorm(64, eps=1e-6, elementwise_affine=True)),
     [r(2, 3, 64, dtype=bf16)], None, "module_rms_norm"),
    ("diffusers_rms_norm_no_weight", lambda: DiffusersRMSNorm(40, eps=1e-5, elementwise_affine=False), [r(5, 40)],
     None, "module_rms_norm"),
    ("diffusers_rms_norm_transposed_heads", lambda: _random_weights(DiffusersRMSNorm(64, eps=1e-6)),
     [r(2, 5, 3, 64, dtype=bf16).transpose(1, 2)], None, "module_rms_norm"),
    ("silu_and_mul_bf16", SiluAndMul, [r(4, 128, dtype=bf16)], {}, "module_gated_activation"),
    ("gelu_and_mul_two_inputs", GeluAndMul, [r(4, 24), r(4, 24)], {}, "module_gated_activation"),
    ("group_norm_silu", lambda: GroupNormSiLU(4, 8), [r(2, 8, 6, 6)], None,
     "module_norm_activation"),
    ("torch_gelu_tanh_bf16", lambda: torch.nn.GELU(approximate="tanh"), [r(4, 40, dtype=bf16)], None,
     "module_activation"),
    ("torch_gelu_erf", torch.nn.GELU, [r(4, 40)], None, "module_activation"),
    ("torch_leaky_relu", lambda: torch.nn.LeakyReLU(0.3), [r(4, 40)], None, "module_activation"),
    ("torch_relu6_f16", torch.nn.ReLU6, [r(4, 40, dtype=f16) * 8], None, "module_activation"),
    ("torch_hardsigmoid", torch.nn.Hardsigmoid, [r(4, 40) * 4], None, "module_activation"),
    ("fused_swish", Swish, [r(6, 70)], None, "fused_elementwise"),
    ("fused_gelu_tanh_written_out_bf16", GeluTanhWrittenOut, [r(4, 96, dtype=bf16)], None, "fused_elementwise"),
    ("fused_bias_relu_channels_last", lambda: BiasReLU(8), [_cl(r(2, 8, 5, 5))], None, "fused_elementwise"),
    ("fused_sliced_bias_silu", lambda: SlicedBiasSiLU(6), [r(2, 6, 4, 3)], None, "fused_elementwise"),
    ("fused_upcast_residual_f16", UpcastResidual, [r(3, 40, dtype=f16), r(3, 40, dtype=f16)], None,
     "fused_elementwise"),
]


@pytest.mark.parametrize("case", MODULE_CASES, ids=lambda c: c[0])
def test_module_family_compiles_and_matches_eager(case: tuple[Any, ...], build_dir: Path) -> None:
    _, factory, args, attributes, family = case
    module = factory()
    if args[0].dtype != torch.float32:
        module = module.to(args[0].dtype)
    card, _ = module_card(module, args, attributes)
    state = [t.detach() for _, t in module.named_parameters()]

    def inputs_for(sample: int) -> list[torch.Tensor]:
        fresh = fresh_like(card, torch.Generator().manual_seed(sample))
        return fresh[: len(args)] + state

    def call(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.inference_mode():
            return [module(*inputs[: len(args)])]

    _verify(card, call, inputs_for, family, build_dir)


def test_the_fuser_names_the_call_it_cannot_fuse() -> None:
    card, _ = module_card(SumThenScale(), [r(4, 16)])
    proposal = propose_offline(ProposeRequest(card=card, device=CPU))
    assert not proposal.has_proposal
    assert ("the fuser: aten::sum.dim_IntList reduces over dim 1, another reduction over dim 0"
            in proposal.no_proposal_reason)


def test_a_module_without_a_described_program_gets_no_fused_kernel() -> None:
    card, _ = module_card(Swish(), [r(4, 16)])
    proposal = propose_offline(ProposeRequest(card=card.model_copy(update={"module_graph": None}), device=CPU))
    assert not proposal.has_proposal and "capture described no program" in proposal.no_proposal_reason


def test_batch_norm_writes_saved_statistics_when_the_card_has_them(build_dir: Path) -> None:
    """CUDA's inference batch norm returns running mean and 1/sqrt(var + eps) as saved statistics."""
    x, w, b, mean, var = r(2, 4, 3, 3), r(4), r(4), r(4), r(4).abs() + 0.5
    card, _ = aten_card(aten._native_batch_norm_legit_no_training.default, [x, w, b, mean, var, 0.1, 1e-5])
    stats_spec = card.outputs[0].model_copy(update={"shape": [4], "stride": [1]})
    card = card.model_copy(update={"outputs": [card.outputs[0], stats_spec, stats_spec]})
    proposal = propose_offline(ProposeRequest(card=card, device=CPU))
    assert proposal.has_proposal, proposal.no_proposal_reason
    lib = compile_cpu(proposal.source, build_dir)
    outputs = [torch.full_like(x, float("nan")), torch.full((4,), float("nan")), torch.full((4,), float("nan"))]
    assert run_kernel(lib, [x, w, b, mean, var], outputs) == 0
    expected = torch.nn.functional.batch_norm(x, mean, var, w, b, training=False, eps=1e-5)
    torch.testing.assert_close(outputs[0], expected)
    torch.testing.assert_close(outputs[1], mean)
    torch.testing.assert_close(outputs[2], 1 / torch.sqrt(var + 1e-5))


def test_a_channels_last_group_norm_writes_the_contiguous_output_cuda_eager_gives(build_dir: Path) -> None:
    """On CUDA eager normalises a channels-last input into a contiguous (NCHW) output; the kernel follows the card."""
    op = aten.native_group_norm.default
    card, _ = aten_card(op, [_cl(r(2, 16, 5, 7)), r(16), r(16), 2, 16, 35, 4, 1e-5])
    y = card.outputs[0]
    nchw = y.model_copy(update={"stride": [16 * 35, 35, 7, 1]})
    card = card.model_copy(update={"outputs": [nchw, *card.outputs[1:]]})

    def inputs_for(sample: int) -> list[torch.Tensor]:
        return fresh_like(card, torch.Generator().manual_seed(sample))

    def contiguous_reference(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [out.contiguous() for out in reference(card, op, inputs)]

    _verify(card, contiguous_reference, inputs_for, "group_norm", build_dir)


def test_rounding_signs_and_nan_bounds_are_eagers_exactly(build_dir: Path) -> None:
    """Ties round to even, NaN and both zeros have sign +0, and a NaN clamp bound makes every element NaN."""
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, float("nan"), -0.0, 0.0, 3.7, -3.7])
    cases = [(aten.round.default, [x]), (aten.sign.default, [x]), (aten.clamp_min.default, [x, float("nan")]),
             (aten.clamp.default, [x, None, float("nan")]), (aten.threshold.default, [x, 0.5, -1.0])]
    for op, args in cases:
        card, (expected,) = aten_card(op, args)
        source = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu")).source
        got = torch.full_like(expected, 7.0)
        assert run_kernel(compile_cpu(source, build_dir), [x], [got]) == 0
        assert torch.equal(got.nan_to_num(123.0), expected.nan_to_num(123.0)), (op, got, expected)
        assert torch.equal(got.isnan(), expected.isnan()), (op, got, expected)


def test_erfinv_matches_eager_across_its_domain_and_beyond(build_dir: Path) -> None:
    """erfinv, which libm lacks: within a few float ulps of eager's on (-1, 1), close to the ends too,
    +-inf at +-1, NaN beyond them and for NaN; a bf16 input rounds as eager rounds it."""
    edges = [1.0, -1.0, 1.5, -3.0, float("nan"), 0.0, -0.0, 1 - 2**-24, -(1 - 2**-24), 1e-30, 0.5]
    x = torch.cat([torch.tensor(edges), torch.rand(2000, generator=torch.Generator().manual_seed(0)) * 2 - 1])
    for dtype, rtol in ((torch.float32, 3e-6), (bf16, 8e-3)):
        data = x.to(dtype)
        card, (expected,) = aten_card(aten.erfinv.default, [data])
        source = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu")).source
        got = torch.full_like(expected, 7.0)
        assert run_kernel(compile_cpu(source, build_dir), [data], [got]) == 0
        assert torch.equal(got.isnan(), expected.isnan()), (dtype, got[:11], expected[:11])
        numbers = ~expected.isnan()
        assert torch.equal(got.isinf(), expected.isinf()) and torch.equal(got[numbers].signbit(),
                                                                          expected[numbers].signbit())
        finite = expected.isfinite()
        torch.testing.assert_close(got[finite].float(), expected[finite].float(), rtol=rtol, atol=0)


def _logsumexp_rows() -> torch.Tensor:
    inf, nan = float("inf"), float("nan")
    return torch.tensor([[-inf] * 6, [1.0, inf, 2.0, inf, 0.0, 1.0], [nan, 1.0, 2.0, 3.0, 4.0, 5.0],
                         [80.0, 90.0, -3.0, 0.0, 1.0, -inf]])


def test_nan_and_infinities_are_replaced_or_kept_as_eager_does(build_dir: Path) -> None:
    """nan_to_num's defaults are the dtype's own extremes; a variance of a row with a NaN or an infinity
    is NaN (a clamp of the variance at zero must not hide it), a norm as in eager; a logsumexp of -inf
    alone is -inf, of a row holding +inf is +inf."""
    special = [float("nan"), float("inf"), -float("inf"), -0.0, 2.5, 1e30]
    rows = torch.tensor([special, [1.0, 2.0, float("nan"), 4.0, 5.0, 6.0], [1.0, float("inf"), 0.0, 1.0, 2.0, 3.0]])
    cases = [(aten.nan_to_num.default, [torch.tensor(special * 2)]),
             (aten.nan_to_num.default, [torch.tensor(special * 2, dtype=bf16)]),
             (aten.nan_to_num.default, [torch.tensor(special * 2, dtype=f16), None, None, -1.0]),
             (aten.var.dim, [rows, [-1]]), (aten.std.correction, [rows, [1]]),
             (aten.linalg_vector_norm.default, [rows, 2, [-1]]),
             (aten.logsumexp.default, [_logsumexp_rows(), [1]])]
    for op, args in cases:
        card, expected = aten_card(op, args)
        source = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu")).source
        got = [torch.full_like(e, 7.0) for e in expected]
        assert run_kernel(compile_cpu(source, build_dir), [args[0]], got) == 0
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.isnan(), e.isnan()), (op, g, e)
            torch.testing.assert_close(g.nan_to_num(123.0), e.nan_to_num(123.0), rtol=1e-5, atol=0, msg=str(op))


def test_a_slice_is_reduced_only_where_its_rows_are_one_contiguous_block() -> None:
    """Leading dims may step at any positive stride; the reduced and trailing dims must be one block."""
    sliced, _ = aten_card(aten.mean.dim, [r(4, 65, 32)[:, 1:], [1]])
    plan = plan_for_card(sliced, "cpu")
    assert plan.x_outer == ((1, 4, 2080),) and (plan.rows, plan.length, plan.inner) == (128, 64, 32)
    gpu = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
    long_rows, _ = aten_card(aten.sum.dim_IntList, [r(4, 20000)[:, :16384], [-1]])
    modes = plan_for_card(on_cuda(long_rows), "cuda").knob_space("cuda", gpu).choices["mode"]
    assert "split" not in modes and "resident" not in modes  # their chunks assume rows side by side
    for op, args in [(aten.sum.dim_IntList, [r(3, 4, 64)[:, :, ::2], [-1]]),  # a row with gaps
                     (aten.sum.dim_IntList, [r(3, 64)[:, :40].t(), [0]]),  # rows across the block
                     (aten.sum.dim_IntList, [r(1, 64).expand(4, 64), [-1]])]:  # a leading dim of stride 0
        card, _ = aten_card(op, args)
        with pytest.raises(UnsupportedCard):
            plan_for_card(card, "cpu")

"""Every cuda template path compiles with nvcc for sm_90 (compile only: there is no GPU here).

Each family is rendered at its default knobs and at the knob values that change the kernel's
structure (row per thread/warp/block, vectors on/off, cached row, one/two-pass statistics,
shared-memory tree), so every code path the search can reach is compiled at least once.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch
from diffusers.models.normalization import RMSNorm as DiffusersRMSNorm

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.rowwise.cuda_rows import lanes_per_row
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import INCLUDE, NVCC, aten_card, cuda_bundle, module_card, nvcc_object, on_cuda
from tests.agent_service.agent_modules import (
    GeluAndMul,
    GeluTanhWrittenOut,
    GroupNormSiLU,
    Qwen3_5MoeRMSNormGated,
    SiluAndMul,
    UpcastResidual,
)

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def _cards() -> list[tuple[str, OperatorCard, list[dict[str, Any]]]]:
    """(name, card, knob overrides) covering every family and structural knob."""
    cl = torch.channels_last
    aten_cases: list[tuple[str, Any, list[Any], dict[str, Any], list[dict[str, Any]]]] = [
        ("gelu_bf16", aten.gelu.default, [r(64, 1024, dtype=bf16)], {},
         [{}, {"vector": 1, "fast_math": False}, {"waves": 0}]),
        ("silu_f16_odd", aten.silu.default, [r(7, 9, dtype=f16)], {}, [{}]),
        ("softplus_beta_bf16", aten.softplus.default, [r(64, 24, dtype=bf16), 2.0, 10.0], {}, [{}]),
        ("mish_bf16", aten.mish.default, [r(64, 24, dtype=bf16)], {}, [{}]),
        ("log_sigmoid_bf16", aten.log_sigmoid.default, [r(64, 24, dtype=bf16)], {}, [{}]),
        ("log1p_f32", aten.log1p.default, [r(64, 24)], {}, [{}, {"fast_math": False}]),
        ("var_rows_bf16", aten.var.dim, [r(64, 4096, dtype=bf16), [-1]], {}, [{}, {"stats": "one_pass"}]),
        ("std_split_rows", aten.std.correction, [r(4, 65536), [-1]], {"correction": 0}, [{}]),
        ("vector_norm_rows_f16", aten.linalg_vector_norm.default, [r(128, 64, dtype=f16), 2, [-1]], {}, [{}]),
        ("addcmul_broadcast_bf16", aten.addcmul.default, [r(64, 24, dtype=bf16), r(64, 24, dtype=bf16),
                                                          r(24, dtype=bf16)], {"value": 0.5}, [{}]),
        ("lerp_tensor", aten.lerp.Tensor, [r(64, 24), r(64, 24), r(64, 24)], {}, [{}]),
        ("nan_to_num_f16", aten.nan_to_num.default, [r(64, 24, dtype=f16)], {}, [{}]),
        ("fake_quantize_bf16", aten.fake_quantize_per_tensor_affine.default, [r(64, 24, dtype=bf16), 0.05, 0, -128,
                                                                              127], {}, [{}]),
        ("mean_of_the_patch_tokens", aten.mean.dim, [r(64, 197, 768, dtype=bf16)[:, 1:], [1]], {},
         [{}, {"mode": "thread"}]),
        ("sum_last_of_a_column_slice", aten.sum.dim_IntList, [r(256, 1024)[:, :1000], [-1]], {},
         [{}, {"mode": "warp"}]),
        ("upsample_bilinear_by_2_bf16", aten.upsample_bilinear2d.vec, [r(2, 64, 32, 32, dtype=bf16), None, False,
                                                                        [2.0, 2.0]], {}, [{}, {"index_bits": 32}]),
        ("upsample_bilinear_aligned", aten.upsample_bilinear2d.vec, [r(1, 8, 9, 7), [20, 30], True, None], {}, [{}]),
        ("upsample_bicubic_pos_embed_bf16", aten.upsample_bicubic2d.vec, [r(1, 768, 14, 14, dtype=bf16), [37, 37],
                                                                          False, None], {}, [{}, {"index_bits": 32}]),
        ("upsample_bicubic_aligned", aten.upsample_bicubic2d.vec, [r(1, 8, 9, 7), [20, 30], True, None], {}, [{}]),
        ("affine_grid_of_a_spatial_transformer", aten.affine_grid_generator.default,
         [r(8, 2, 3), [8, 3, 64, 64], False], {}, [{}, {"mode": "flat"}]),
        ("max_pool_channels_last_stem_bf16", aten.max_pool2d.default,
         [r(32, 64, 112, 112, dtype=bf16).contiguous(memory_format=cl), [3, 3], [2, 2], [1, 1]], {},
         [{}, {"unroll_window": False}, {"index_bits": 32}]),
        ("adaptive_avg_pool_of_a_slice", aten._adaptive_avg_pool2d.default, [r(2, 8, 9, 12)[..., 1:10], [4, 5]], {},
         [{}]),
        ("upsample_bilinear_channels_last_bf16", aten.upsample_bilinear2d.vec,
         [r(1, 64, 32, 32, dtype=bf16).contiguous(memory_format=cl), None, False, [2.0, 2.0]], {}, [{}]),
        ("glu_of_channels_bf16", aten.glu.default, [r(4, 64, 4000, dtype=bf16), 1], {}, [{}]),
        ("upsample_linear_by_2_bf16", aten.upsample_linear1d.vec, [r(4, 32, 4000, dtype=bf16), None, False, [2.0]], {},
         [{}, {"index_bits": 32}]),
        ("stack_last_of_views", aten.stack.default, [[r(64, 96), r(96, 64).t(), r(64, 96)], -1], {}, [{}]),
        ("logsumexp_rows_bf16", aten.logsumexp.default, [r(64, 4096, dtype=bf16), [-1]], {}, [{}]),
        ("logsumexp_split_rows", aten.logsumexp.default, [r(4, 65536), [-1]], {}, [{}, {"mode": "resident"}]),
        ("pad_reflect_2d_bf16", aten.pad.default, [r(2, 8, 64, 64, dtype=bf16), [1, 1, 1, 1], "reflect"], {}, [{}]),
        ("pad_replicate_circular", aten.pad.default, [r(4, 16, 30), [3, 2], "circular"], {}, [{}]),
        ("argmax_rows_bf16", aten.argmax.default, [r(64, 300, dtype=bf16), -1], {},
         [{}, {"mode": "block"}, {"mode": "flat"}]),
        ("argmin_flat_int", aten.argmin.default, [torch.randint(-9, 9, (4, 5000))], {}, [{}, {"mode": "warp"}]),
        ("argmax_vocab_split", aten.argmax.default, [r(8, 151936, dtype=bf16), -1], {},
         [{}, {"per_thread": 64, "threads_per_block": 512}]),
        ("max_dim_vocab_bf16", aten.max.dim, [r(8, 151936, dtype=bf16), -1], {},
         [{}, {"mode": "block"}, {"mode": "warp"}, {"mode": "flat"}]),
        ("min_dim_column_keepdim", aten.min.dim, [r(20000, 3), 0, True], {}, [{}, {"mode": "split"}, {"mode": "flat"}]),
        ("round_and_friends_f16", aten.round.default, [r(64, 24, dtype=f16)], {}, [{}]),
        ("sign_f32", aten.sign.default, [r(64, 24)], {}, [{}]),
        ("clamp_min_nan_bound", aten.clamp_min.default, [r(64, 24), float("nan")], {}, [{}]),
        ("expm1_log1p_erf", aten.expm1.default, [r(64, 24)], {}, [{}]),
        ("floor_divide_int64_by_8", aten.floor_divide.default, [torch.randint(-99, 99, (192,)), 8], {}, [{}]),
        ("pow_int64_by_tensor", aten.pow.Tensor_Tensor, [torch.randint(-9, 9, (192,)), torch.randint(-3, 9, (192,))],
         {}, [{}]),
        ("one_hot_of_transposed", aten.one_hot.default, [torch.randint(0, 9, (64, 24)).t(), 9], {}, [{}]),
        ("erfinv_bf16", aten.erfinv.default, [r(64, 24, dtype=bf16).clamp(-0.99, 0.99)], {}, [{}]),
        ("to_bf16_of_int64", aten.to.dtype, [torch.randint(-99, 99, (8, 33)), bf16], {}, [{}]),
        ("gather_rows_bf16", aten.gather.default, [r(64, 128, dtype=bf16), 1, torch.randint(0, 128, (64, 8))], {},
         [{}]),
        ("where_int_by_float_number", aten.where.ScalarOther,
         [torch.randn(8, 33) > 0, torch.randint(-99, 99, (8, 33)), 0.5], {}, [{}]),
        ("xor_int32_by_number", aten.__xor__.Scalar, [torch.randint(-99, 99, (8, 33), dtype=torch.int32), 6], {},
         [{}]),
        ("add_int32_alpha_wraps", aten.add.Tensor, [torch.randint(-99, 99, (8, 33), dtype=torch.int32),
                                                    torch.randint(-99, 99, (33,), dtype=torch.int32)], {"alpha": 3},
         [{}]),
        ("add_broadcast_bf16", aten.add.Tensor, [r(8, 256, dtype=bf16), r(256, dtype=bf16)], {"alpha": 2},
         [{}, {"unroll": 4, "threads_per_block": 1024}]),
        ("mul_channels_last", aten.mul.Tensor, [r(2, 64, 8, 8).contiguous(memory_format=cl), r(1, 64, 1, 1)], {},
         [{}]),
        ("cast_to_bf16", aten._to_copy.default, [r(64, 256)], {"dtype": bf16}, [{}]),
        ("type_as_bf16_to_f32", aten.type_as.default, [r(1, 64, 1536, dtype=bf16), r(1)], {}, [{}]),
        # The gather engine: rows mode (a block per output row) and flat mode (a thread per element).
        ("upsample_nearest_x2_nhwc_to_nchw_bf16", aten.upsample_nearest2d.vec,
         [r(1, 512, 64, 64, dtype=bf16).contiguous(memory_format=cl), None, [2.0, 2.0]], {},
         [{}, {"mode": "flat", "waves": 0}]),
        ("upsample_nearest_exact_table", aten._upsample_nearest_exact2d.vec, [r(1, 8, 30, 30), [45, 20], None], {},
         [{}]),
        ("cat_heads_bf16", aten.cat.default,
         [[r(2, 24, 256, 64, dtype=bf16), r(2, 24, 32, 64, dtype=bf16)], 2], {}, [{}, {"mode": "flat"}]),
        ("index_rows_bf16", aten.index.Tensor,
         [r(24, 2048, dtype=bf16), [torch.randint(0, 24, (192,))]], {}, [{}, {"threads_per_block": 512}]),
        ("embedding_tokens_bf16", aten.embedding.default,
         [r(32000, 2048, dtype=bf16), torch.randint(0, 32000, (4, 128))], {}, [{}, {"mode": "flat"}]),
        ("embedding_int32", aten.embedding.default, [r(512, 96), torch.randint(0, 512, (37,), dtype=torch.int32)], {},
         [{}]),
        ("constant_pad_nd_chunks", aten.constant_pad_nd.default, [r(1, 8, 24, 32), [0, 0, 0, 40], 0.0], {},
         [{}, {"mode": "flat"}]),
        ("masked_fill_causal", aten.masked_fill.Scalar,
         [r(1, 8, 1, 64, 64), torch.ones(64, 64, dtype=torch.bool).triu(1), float("-inf")], {}, [{}]),
        ("where_bool_operands", aten.where.self,
         [torch.randn(4, 1, 256) > 0, torch.randn(4, 8, 256) > 0, torch.randn(256) > 0], {}, [{}]),
        ("repeat_interleave_kv_heads_bf16", aten.repeat_interleave.self_int,
         [r(1, 4, 512, 128, dtype=bf16), 6, 1], {}, [{}, {"mode": "flat"}]),
        ("repeat_interleave_flat", aten.repeat_interleave.self_int, [r(300, 7), 4], {}, [{}]),
        ("reshape_attention_heads_bf16", aten.reshape.default,
         [r(1, 16, 512, 128, dtype=bf16).transpose(1, 2), [1, 512, 2048]], {}, [{}, {"mode": "flat"}]),
        # Comparisons and logical ops: values from raw bits, float16 rounding, float64, ints; bool output.
        ("lt_f16_by_f32_row", aten.lt.Tensor, [r(64, 256, dtype=f16), r(1, 256)], {},
         [{}, {"mode": "flat"}]),
        ("eq_int64_by_float", aten.eq.Scalar, [torch.randint(0, 9, (64, 256)), 3.0], {}, [{}]),
        ("ge_f64_bf16_0dim", aten.ge.Tensor, [r(32, 300).double(), torch.tensor(0.3, dtype=bf16)], {}, [{}]),
        ("logical_and_bool_bf16", aten.logical_and.default, [r(8, 512) > 0, r(8, 512, dtype=bf16)], {}, [{}]),
        ("logical_not_f16", aten.logical_not.default, [r(4096, dtype=f16)], {}, [{"mode": "flat"}]),
        ("copy_transposed", aten.clone.default, [r(64, 32).t()], {"memory_format": torch.contiguous_format},
         [{}, {"mode": "direct"}]),
        ("add_channels_last_to_contiguous_bf16", aten.add.Tensor,
         [r(2, 64, 9, 9, dtype=bf16).contiguous(memory_format=cl), r(2, 64, 9, 9, dtype=bf16)], {}, [{}]),
        ("copy_transposed_batched_f16", aten.clone.default, [r(3, 40, 70, dtype=f16).transpose(1, 2)],
         {"memory_format": torch.contiguous_format}, [{}]),
        ("div_strided", aten.div.Tensor, [r(16, 32)[:, ::2], 3.0], {}, [{}]),
        ("sum_inner", aten.sum.dim_IntList, [r(64, 32, 16), [1]], {}, [{}, {"mode": "thread"}]),
        # Outputs laid out apart from a permuted input (RowPlan.y_inner).
        ("softmax_of_transposed", aten._softmax.default, [r(4, 64, 100).transpose(1, 2), -1, False], {},
         [{}, {"mode": "thread"}]),
        ("log_softmax_channels_last_dim1_f16", aten._log_softmax.default,
         [r(2, 64, 9, 9, dtype=f16).contiguous(memory_format=cl), 1, False], {}, [{}, {"mode": "block"}]),
        ("layer_norm_nhwc_view_bf16", aten.native_layer_norm.default,
         [r(8, 96, 56, 56, dtype=bf16).permute(0, 2, 3, 1), [96], r(96, dtype=bf16), r(96, dtype=bf16), 1e-6], {},
         [{}, {"mode": "thread", "stats": "one_pass"}]),
        # Leading dims at their own strides (RowPlan.x_outer), the output contiguous in logical order.
        ("layer_norm_batch_first_lstm_bf16", aten.native_layer_norm.default,
         [r(512, 16, 1024, dtype=bf16).transpose(0, 1), [1024], r(1024, dtype=bf16), r(1024, dtype=bf16), 1e-5], {},
         [{}, {"mode": "block"}, {"mode": "lanes"}]),
        ("softmax_of_a_slice", aten._softmax.default, [r(8, 197, 768)[:, 1:], -1, False], {}, [{}, {"mode": "warp"}]),
        ("log_softmax_dim1_of_a_slice_f16", aten._log_softmax.default, [r(4, 65, 32, dtype=f16)[:, 1:], 1, False], {},
         [{}, {"mode": "thread"}]),
        ("global_pool_channels_last_bf16", aten.adaptive_avg_pool2d.default,
         [r(32, 2048, 7, 7, dtype=bf16).contiguous(memory_format=cl), [1, 1]], {}, [{}, {"mode": "thread"}]),
        ("softmax_inner_columns", aten._softmax.default, [r(4, 64, 100), 1, False], {},
         [{}, {"threads_per_block": 1024, "cache_row": False}]),
        ("amax_rows_bf16", aten.amax.default, [r(128, 4096, dtype=bf16), [-1]], {},
         [{}, {"mode": "warp"}, {"reduce": "smem_tree", "threads_per_block": 512}]),
        ("softmax_bf16", aten._softmax.default, [r(256, 1024, dtype=bf16), -1, False], {},
         [{}, {"stats": "online"}, {"mode": "block", "cache_row": False}, {"mode": "block", "reduce": "smem_tree"}]),
        ("softmax_small_rows", aten._softmax.default, [r(512, 48), -1, False], {},
         [{"mode": "thread"}, {"mode": "lanes"}, {"mode": "lanes", "vector": 1, "stats": "online"}]),
        # 333 rows of 64: 4 rows per warp (8 lanes a row), the last warp's groups partly past the end
        ("rms_norm_short_rows_bf16", aten.rms_norm.default, [r(333, 64, dtype=bf16), [64], r(64, dtype=bf16), 1e-6],
         {}, [{}, {"mode": "lanes", "vector": 1, "cache_row": False}]),
        ("log_softmax_long_f16", aten._log_softmax.default, [r(8, 32000, dtype=f16), -1, False], {},
         [{}, {"cache_row": False, "stats": "online"}]),
        ("layer_norm_bf16", aten.native_layer_norm.default,
         [r(512, 768, dtype=bf16), [768], r(768, dtype=bf16), r(768, dtype=bf16), 1e-5], {},
         [{}, {"stats": "one_pass"}, {"mode": "block", "vector": 1}]),
        ("rms_norm_bf16", aten.rms_norm.default, [r(512, 2048, dtype=bf16), [2048], r(2048, dtype=bf16), 1e-6], {},
         [{}, {"mode": "warp", "cache_row": False}]),
        ("group_norm_bf16", aten.native_group_norm.default,
         [r(2, 128, 32, 32, dtype=bf16), r(128, dtype=bf16), r(128, dtype=bf16), 2, 128, 1024, 32, 1e-6], {},
         [{}, {"stats": "one_pass"}]),
        ("group_norm_split_bf16", aten.group_norm.default,
         [r(1, 64, 64, 64, dtype=bf16), 32, r(64, dtype=bf16), r(64, dtype=bf16), 1e-6], {},
         [{}, {"vector": 1, "reduce": "smem_tree", "threads_per_block": 1024}, {"unroll": 4, "order": "forward"},
          {"mode": "resident"},
          {"mode": "resident", "resident_blocks_per_sm": 1, "vector": 1, "reduce": "smem_tree"}]),
        ("prelu_per_channel_bf16", aten.prelu.default, [r(4, 32, 8, 8, dtype=bf16), r(32, dtype=bf16)], {}, [{}]),
        ("pixel_shuffle_bf16", aten.pixel_shuffle.default, [r(2, 64, 16, 16, dtype=bf16), 2], {}, [{}]),
        ("bucketize_bf16_right", aten.bucketize.Tensor, [r(64, 1000, dtype=bf16), r(33, dtype=bf16).sort().values],
         {"right": True}, [{}]),
        ("im2col_3x3_bf16", aten.im2col.default, [r(2, 64, 32, 32, dtype=bf16), [3, 3], [1, 1], [1, 1], [1, 1]], {},
         [{}]),
        ("instance_norm_bf16", aten.instance_norm.default,
         [r(2, 64, 16, 16, dtype=bf16), r(64, dtype=bf16), r(64, dtype=bf16), None, None, True, 0.1, 1e-5, False], {},
         [{}]),
        ("native_group_norm_split_stats", aten.native_group_norm.default,
         [r(1, 256, 32, 32), r(256), r(256), 1, 256, 1024, 32, 1e-5], {}, [{}]),
        ("group_norm_channels_last_bf16", aten.group_norm.default,
         [r(1, 512, 32, 32, dtype=bf16).contiguous(memory_format=cl), 32, r(512, dtype=bf16), r(512, dtype=bf16),
          1e-6], {}, [{}, {"vector": 1, "threads_per_block": 1024}, {"blocks_per_sm": 8}, {"unroll": 4},
                  {"merge": "thread"}]),
        ("group_norm_channels_last_nchw_out", aten.native_group_norm.default,
         [r(2, 320, 16, 16, dtype=f16).contiguous(memory_format=cl), r(320, dtype=f16), r(320, dtype=f16), 2, 320,
          256, 32, 1e-5], {}, [{}, {"vector": 1}, {"store_vector": 8, "unroll": 4},
                               {"store_vector": 8, "vector": 1, "blocks_per_sm": 8, "merge": "thread"}]),
        ("softmax_split_rows", aten._softmax.default, [r(4, 16384), -1, False], {},
         [{}, {"vector": 1, "unroll": 4}, {"mode": "resident"}]),
        ("sum_split_rows", aten.sum.dim_IntList, [r(8, 65536, dtype=bf16), [-1]], {}, [{}]),
        ("mean_last_of_transposed_heads", aten.mean.dim, [r(2, 256, 24, 64).transpose(1, 2), [-1], True], {},
         [{}, {"mode": "warp"}, {"mode": "thread"}]),
        ("sum_outer_dim_of_permuted", aten.sum.dim_IntList, [r(64, 16, 128).permute(2, 0, 1), [1]], {}, [{}]),
        ("global_pool_tiled", aten.mean.dim, [r(8, 64, 7, 7, dtype=bf16), [-1, -2], True], {}, [{}]),
        ("amax_tiled_unaligned_rows", aten.amax.default, [r(33, 50, dtype=f16), [-1]], {}, [{}]),
        ("batch_norm_bf16", aten._native_batch_norm_legit_no_training.default,
         [r(32, 64, 28, 28, dtype=bf16), r(64, dtype=bf16), r(64, dtype=bf16), r(64, dtype=bf16),
          r(64, dtype=bf16).abs(), 0.1, 1e-5], {}, [{}]),
        ("batch_norm_saved_stats", aten._native_batch_norm_legit_no_training.default,
         [r(8, 16, 4, 4), r(16), r(16), r(16), r(16).abs(), 0.1, 1e-5], {}, [{}]),
        ("global_pool", aten.adaptive_avg_pool2d.default, [r(32, 2048, 7, 7, dtype=bf16), [1, 1]], {}, [{}]),
        ("adaptive_pool", aten._adaptive_avg_pool2d.default, [r(2, 64, 14, 14, dtype=bf16), [5, 5]], {}, [{}]),
        ("max_pool", aten.max_pool2d.default, [r(2, 64, 56, 56, dtype=bf16), [3, 3], [2, 2], [1, 1]], {},
         [{}, {"unroll_window": False, "index_bits": 32}]),
        ("avg_pool_ceil", aten.avg_pool2d.default, [r(2, 64, 55, 55, dtype=bf16), [3, 3], [2, 2], [1, 1], True, False],
         {}, [{}, {"unroll_window": False, "index_bits": 32}]),
        ("avg_pool_wide_window", aten.avg_pool2d.default, [r(1, 4, 40, 40), [9, 9], [1, 1], [4, 4]], {}, [{}]),
        ("max_pool1d_bf16", aten.max_pool1d.default, [r(4, 32, 2048, dtype=bf16), [2]], {}, [{}]),
        ("avg_pool1d_padded", aten.avg_pool1d.default, [r(4, 32, 2047), [4], [3], [2], True, False], {}, [{}]),
        # sorts: a block per row, a bitonic network over (key, index) pairs in shared memory
        ("sort_default_rows_f32", aten.sort.default, [r(64, 1000)], {}, [{}, {"threads_per_block": 512}]),
        ("sort_stable_descending_int8_short", aten.sort.stable, [torch.randint(0, 5, (8, 20), dtype=torch.int8)],
         {"stable": True, "descending": True}, [{}]),
        ("sort_stable_middle_dim_of_transposed_bf16", aten.sort.stable, [r(300, 7, dtype=bf16).t()],
         {"stable": True, "dim": 1}, [{}, {"threads_per_block": 128}]),
        ("sort_stable_long_f16_rows", aten.sort.stable, [r(4, 8192, dtype=f16)], {"stable": True},
         [{}, {"threads_per_block": 1024}]),
        ("sort_stable_zero_dim_f64", aten.sort.stable, [torch.tensor(1.5, dtype=torch.float64)], {"stable": True},
         [{}]),
        ("argsort_stable_bool", aten.argsort.stable, [r(16, 40) > 0], {"stable": True}, [{}]),
        ("topk_int64_k40", aten.topk.default, [torch.randint(0, 9, (4, 3000)), 40], {},
         [{}, {"threads_per_block": 128}]),
    ]
    cards = []
    for name, op, args, kwargs, knob_sets in aten_cases:
        card, _ = aten_card(op, args, kwargs)
        if name == "batch_norm_saved_stats":  # the shape cuda's kernel returns them in
            stats = card.outputs[0].model_copy(update={"shape": [16], "stride": [1]})
            card = card.model_copy(update={"outputs": [card.outputs[0], stats, stats]})
        if name == "group_norm_channels_last_nchw_out":  # cuda's eager writes it contiguous
            nchw = card.outputs[0].model_copy(update={"stride": [320 * 256, 256, 16, 1]})
            card = card.model_copy(update={"outputs": [nchw, *card.outputs[1:]]})
        cards.append((name, on_cuda(card), knob_sets))
    modules = [
        ("rms_gated", Qwen3_5MoeRMSNormGated(256).to(bf16), [r(16, 256, dtype=bf16)] * 2,
         {"variance_epsilon": 1e-6}),
        ("silu_and_mul", SiluAndMul(), [r(16, 2048, dtype=bf16)], {}),
        ("gelu_and_mul", GeluAndMul(), [r(16, 512), r(16, 512)], {}),
        ("group_norm_silu", GroupNormSiLU(8, 32), [r(2, 32, 16, 16)], None),
        ("diffusers_rms_norm_transposed", DiffusersRMSNorm(64, eps=1e-6).to(bf16),
         [r(2, 5, 3, 64, dtype=bf16).transpose(1, 2)], None),
        ("fused_gelu_tanh_written_out", GeluTanhWrittenOut(), [r(16, 4096, dtype=bf16)], None),
        ("fused_upcast_residual", UpcastResidual(), [r(16, 512, dtype=f16), r(16, 512, dtype=f16)], None),
    ]
    for name, module, args, attributes in modules:
        card, _ = module_card(module, args, attributes)
        cards.append((name, on_cuda(card), [{}]))
    return cards


def test_few_long_rows_are_split_across_blocks_and_many_rows_are_not() -> None:
    def space(*shape: int) -> Any:
        card, _ = aten_card(aten._softmax.default, [r(*shape), -1, False])
        return plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200).choices

    few_long = space(32, 65536)
    assert few_long["mode"][:2] == ("resident", "split")  # 8 MiB fits on chip: read once first
    assert space(32, 1 << 20)["mode"][0] == "split"  # 128 MiB does not
    assert few_long["blocks_per_row"] == tuple(-(-per_sm * 132 // 32) for per_sm in (2, 4, 1, 8))  # 2 per SM first
    assert "blocks_per_row" not in space(4096, 65536) and "blocks_per_row" not in space(32, 1024)


def test_few_rows_that_fit_in_shared_memory_may_stay_resident() -> None:
    def modes(*shape: int, dtype: torch.dtype = bf16) -> Any:
        args = [r(*shape, dtype=dtype), 32, r(shape[1], dtype=dtype), r(shape[1], dtype=dtype), 1e-6]
        card, _ = aten_card(aten.group_norm.default, args)
        return plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200).choices

    vae_mid = modes(1, 512, 128, 128)  # 16 MiB of bf16: about 127 KiB per SM
    assert vae_mid["mode"][:2] == ("resident", "split")  # read once, first
    assert vae_mid["resident_blocks_per_sm"] == (2, 1)
    assert "resident" not in modes(1, 512, 128, 128, dtype=torch.float32)["mode"]  # 32 MiB: more than fits
    assert "resident" not in modes(1, 128, 1024, 1024)["mode"]
    assert "resident" not in modes(8, 512, 16, 16)["mode"]  # short rows: one block per row already


def test_an_operand_read_across_the_output_is_staged_through_tiles() -> None:
    def plan(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> Any:
        card, _ = aten_card(op, args, kwargs or {})
        return plan_for_card(on_cuda(card), "cuda")

    copy = plan(aten.clone.default, [r(64, 32).t()], {"memory_format": torch.contiguous_format})
    space = copy.knob_space("cuda", H200)
    assert copy.tile_dim() == 0 and space.choices["mode"] == ("tiled", "direct")
    assert space.normalise({"mode": "tiled", "vector": 1, "unroll": 4}) == space.default()  # direct mode's knobs
    source = copy.render("cuda", space.default(), H200)
    assert "__shared__ float tile0[32][33]" in source and "in0[o0 + ti * 32LL + tt]" in source
    # Operands that read along the output's innermost dim, or broadcast, need no tile.
    plain = plan(aten.add.Tensor, [r(4, 64), r(64)])
    assert plain.tile_dim() is None and plain.knob_space("cuda", H200).choices["mode"] == ("direct",)
    heads = plan(aten.clone.default, [r(2, 40, 8, 16).transpose(1, 2)], {"memory_format": torch.contiguous_format})
    assert heads.tile_dim() is None


def test_few_rows_larger_than_l2_are_never_given_one_block_each() -> None:
    def space(*shape: int, dtype: torch.dtype = bf16) -> Any:
        args = [r(*shape, dtype=dtype), 32, r(shape[1], dtype=dtype), r(shape[1], dtype=dtype), 1e-6]
        card, _ = aten_card(aten.group_norm.default, args)
        return plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200)

    assert space(1, 128, 1024, 1024).choices["mode"] == ("split",)  # 256 MiB
    assert space(1, 512, 128, 128, dtype=torch.float32).choices["mode"] == ("split", "block", "warp")  # 32 MiB
    split = space(1, 128, 1024, 1024)
    revisions = list(split.neighbours(split.default(), 1))
    assert revisions and all(k["stats"] == "two_pass" and k["cache_row"] is True for k in revisions)
    assert {k["mode"] for k in revisions} == {"split"}
    assert split.normalise({**split.default(), "cache_row": False, "stats": "one_pass"}) == split.default()


def test_long_rows_start_with_the_smallest_block_that_holds_the_row_in_registers() -> None:
    def first(op: Any, args: list[Any]) -> dict[str, Any]:
        card, _ = aten_card(op, args)
        space = plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200)
        return {k: v for k, v in space.default().items() if k in ("mode", "threads_per_block", "stats")}

    images = r(16, 64, 16, 16)  # rows of 8 x 256 elements: 256 threads hold them
    assert first(aten.group_norm.default, [images, 8, r(64), r(64), 1e-5])["threads_per_block"] == 256
    wide = r(32, 64, 64, 64)  # 256 rows of 32768 fp32: 512 threads hold 64 each
    assert first(aten.group_norm.default, [wide, 8, r(64), r(64), 1e-5]) == \
        {"mode": "block", "threads_per_block": 512, "stats": "two_pass"}
    assert first(aten._softmax.default, [r(200, 4096), -1, False])["threads_per_block"] == 256
    # Rows no block holds: the largest block, and the statistics that walk the row the fewest times.
    assert first(aten._softmax.default, [r(170, 131072), -1, False]) == \
        {"mode": "block", "threads_per_block": 1024, "stats": "online"}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_rows_shorter_than_a_warp_of_vectors_share_warps_first() -> None:
    def plan(*shape: int) -> Any:
        card, _ = aten_card(aten.rms_norm.default, [r(*shape, dtype=bf16), [shape[-1]], r(shape[-1], dtype=bf16), 1e-6],
                            {})
        return plan_for_card(on_cuda(card), "cuda")

    heads = plan(4096, 64)  # attention heads' q/k norms: 8 vectors of bf16 a row
    assert heads.knob_space("cuda", H200).choices["mode"][0] == "lanes"
    source = heads.render("cuda", heads.knob_space("cuda", H200).default(), H200)
    assert "kf_group_reduce<8, " in source and "row_w" in source
    assert "lanes" not in plan(512, 2048).knob_space("cuda", H200).choices["mode"]  # 256 vectors: a warp each
    assert lanes_per_row(64, 8) == 8 and lanes_per_row(48, 4) == 16 and lanes_per_row(8, 8) == 2
    assert lanes_per_row(1000, 1) == 16


def test_short_rows_reduced_to_one_value_are_tiled() -> None:
    pool, _ = aten_card(aten.mean.dim, [r(8, 64, 7, 7, dtype=bf16), [-1, -2], True])
    assert plan_for_card(on_cuda(pool), "cuda").knob_space("cuda", H200).choices["mode"][0] == "tile"
    softmax, _ = aten_card(aten._softmax.default, [r(64, 49), -1, False])
    assert "tile" not in plan_for_card(on_cuda(softmax), "cuda").knob_space("cuda", H200).choices["mode"]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_one_kernel_compiles_alone_as_the_sandbox_builds_it(tmp_path: Path) -> None:
    _, card, _ = _cards()[0]
    plan = plan_for_card(card, "cuda")
    rc, err = nvcc_object(plan.render("cuda", plan.knob_space("cuda", H200).default(), H200), tmp_path / "alone.cu")
    assert rc == 0 and "warning" not in err, err


def _sources() -> dict[str, str]:
    """Every case of :func:`_cards` rendered at each of its knob sets, by ``<case>_<knob set>``."""
    sources: dict[str, str] = {}
    for name, card, knob_sets in _cards():
        plan = plan_for_card(card, "cuda")
        space = plan.knob_space("cuda", H200)
        for i, overrides in enumerate(knob_sets):
            unknown = set(overrides) - set(space.choices)
            assert not unknown, f"{name}: knobs {unknown} not in the space"
            knobs = {**space.default(), **overrides}
            source = plan.render("cuda", knobs, H200)
            assert "__global__" in source and 'extern "C" int kf_launch' in source
            sources[f"{name}_{i}"] = source
    return sources


# What a launch captured into a CUDA graph must not do: allocate, free or wait on the host.
_NOT_GRAPH_SAFE = re.compile(r"(cudaMalloc\w*|cudaFree\w*|cudaDeviceSynchronize|cudaStreamSynchronize|"
                             r"cudaEventSynchronize|cudaMemcpy(?!\w*Async)\w*|cudaMemset(?!\w*Async)\w*)")


def test_no_cuda_template_allocates_frees_or_synchronises() -> None:
    """Kernels are captured into CUDA graphs: scratch comes from the workspace the caller passes."""
    sources = _sources()
    for name, source in sources.items():
        found = sorted(set(_NOT_GRAPH_SAFE.findall(source)))
        assert not found, f"{name} calls {found}"
    with_workspace = {name for name, source in sources.items() if "kf_workspace_bytes" in source}
    # Split and resident row kernels and the channels-last group norm keep per-block partials.
    assert {"softmax_split_rows_0", "softmax_split_rows_2", "group_norm_split_bf16_3",
            "group_norm_channels_last_bf16_0", "sum_split_rows_0"} <= with_workspace
    for name in with_workspace:
        source = sources[name]
        assert source.count('extern "C" int64_t kf_workspace_bytes(void)') == 1, name
        # The guard expects the workspace as the one output after the op's: a 1-D uint8 tensor.
        checked = re.search(r"outputs\[(\d+)\]\.ndim != 1 \|\| outputs\[\1\]\.dtype != 7", source)
        assert checked and f"n_outputs != {int(checked.group(1)) + 1})" in source, name


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_cuda_variant_compiles_for_sm90(tmp_path: Path) -> None:
    sources = _sources()
    names = list(sources)
    halves = [{n: sources[n] for n in names[::2]}, {n: sources[n] for n in names[1::2]}]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda ih: nvcc_object(cuda_bundle(ih[1]), tmp_path / f"bundle{ih[0]}.cu"),
                                enumerate(halves)))
    for rc, err in results:
        assert rc == 0, err[-4000:]
        assert "warning" not in err, err[-4000:]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_a_transposed_softmax_stages_its_contiguous_output_and_keeps_its_cached_row_in_registers(
        tmp_path: Path) -> None:
    card, _ = aten_card(aten._softmax.default, [r(4, 512, 256, dtype=bf16).transpose(1, 2), -1, False])
    plan = plan_for_card(on_cuda(card), "cuda")
    knobs = {**plan.knob_space("cuda", H200).default(), "mode": "columns", "threads_per_block": 512,
             "cache_row": True}
    source = plan.render("cuda", knobs, H200)
    # 32 adjacent rows per block: staged in shared memory, then written along the output's rows
    assert "__shared__ float kf_stage[64][33];" in source and "y[wrow * 512LL + j_first + k]" in source
    path = tmp_path / "transposed.cu"
    path.write_text(source)
    proc = subprocess.run([str(NVCC), "-arch=sm_90", "-O3", "-c", "-Xptxas", "-v", "-I", str(INCLUDE),
                           "-o", str(path.with_suffix(".o")), str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 32 cached values per thread (512 elements over 16 warps): an unrolled loop keeps them off the stack
    assert "0 bytes stack frame" in proc.stderr, proc.stderr

    contiguous, _ = aten_card(aten._softmax.default, [r(4, 256, 512, dtype=bf16), 1, False])
    plan = plan_for_card(on_cuda(contiguous), "cuda")
    assert "kf_stage" not in plan.render("cuda", {**plan.knob_space("cuda", H200).default(), "mode": "columns"}, H200)

"""Qwen 3.5 35B-A3B (LLM, mixture of experts), the text decoder, bfloat16: prefill or decode.

Architecture: transformers' ``Qwen3_5MoeForCausalLM`` (the text model of ``qwen3_5_moe``)
built from a ``Qwen3_5MoeTextConfig`` with the numbers of the ``text_config`` in
``config.json`` of ``Qwen/Qwen3.5-35B-A3B`` (its hub page; the model card gives the same
layout): hidden size 2048; a 3:1 hybrid of Gated DeltaNet linear-attention layers (16 key
heads and 32 value heads of dimension 128, causal convolution of width 4, gated RMSNorm) and
gated full-attention layers (16 query heads, 2 KV heads of dimension 256, q/k RMSNorm, RoPE
theta 1e7 on a quarter of each head, interleaved M-RoPE sections [11, 11, 10]); every layer's
MLP a sparse MoE of 256 experts of width 512 with 8 routed per token (softmax top-k,
renormalised) plus a sigmoid-gated shared expert of width 512; SiLU; zero-centred RMSNorm;
a 248,320-token vocabulary with untied embeddings.

Reduced: depth, 40 -> 4 layers, one period of the 3:1 layout (three Gated DeltaNet layers, then
one full-attention layer). Every width, the expert count, routing and the vocabulary are the
published ones. The experts run with transformers' default experts implementation.

Variants (``KF_EXAMPLE_VARIANT``): ``prefill`` (default), a 512-token prompt as ``generate``
runs it (``logits_to_keep=1``); ``decode``, one token after that prompt against its cache
(KV for the attention layer, convolution and recurrent states for the DeltaNet layers).
Batch 1.

``tiny`` keeps the layer layout, routing (8 of 32 experts plus the shared one), activations,
norms and dtype, and shrinks widths (hidden 128, experts and shared expert 64, attention 4
heads / 2 KV heads of 32, DeltaNet 4 key / 8 value heads of 32), the vocabulary (512) and the
prompt (24 tokens), so CI runs it on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

from examples.paper.causal_lm import step_inputs, step_model
from examples.paper.settings import example_size, example_variant, input_generator, seeded_build

VARIANTS = ("prefill", "decode")
DTYPE = torch.bfloat16
BATCH = 1
PROMPT_TOKENS = {"tiny": 24, "gpu": 512}

NUM_LAYERS = 4  # published: 40
LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]

#: ``Qwen/Qwen3.5-35B-A3B`` text_config, depth reduced as described above.
GPU_CONFIG: dict[str, Any] = {
    "vocab_size": 248_320,
    "hidden_size": 2048,
    "num_hidden_layers": NUM_LAYERS,
    "layer_types": LAYER_TYPES,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "num_experts": 256,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 262_144,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10_000_000.0,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
}

TINY_CONFIG: dict[str, Any] = {
    **GPU_CONFIG,
    "vocab_size": 512,
    "hidden_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_num_key_heads": 4,
    "linear_num_value_heads": 8,
    "num_experts": 32,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "rope_parameters": {**GPU_CONFIG["rope_parameters"], "mrope_section": [2, 1, 1]},
}


def config() -> Qwen3_5MoeTextConfig:
    """The text configuration at the current size."""
    values = GPU_CONFIG if example_size() == "gpu" else TINY_CONFIG
    return Qwen3_5MoeTextConfig(**values)


def prompt_ids() -> torch.Tensor:
    """A fixed pseudo-random prompt."""
    generator = input_generator()
    shape = (BATCH, PROMPT_TOKENS[example_size()])
    return torch.randint(0, config().vocab_size, shape, generator=generator, device=generator.device)


def get_model() -> torch.nn.Module:
    """Reduced-depth Qwen 3.5 35B-A3B text decoder in bfloat16, as a prefill or a decode step."""
    with seeded_build(DTYPE):
        lm = Qwen3_5MoeForCausalLM(config())
    return step_model(lm, prompt_ids, example_variant(VARIANTS))


def get_inputs() -> tuple[torch.Tensor]:
    """The prompt (prefill) or the next token after it (decode)."""
    return step_inputs(prompt_ids(), example_variant(VARIANTS))

"""Gemma 4 E2B (LLM), the text decoder, bfloat16: a 512-token prefill or one decode step.

Architecture: transformers' ``Gemma4ForCausalLM`` (the text model of ``gemma4``) built from a
``Gemma4TextConfig`` with the numbers of the ``text_config`` in ``config.json`` of
``google/gemma-4-E2B`` (its hub page; the model card gives the same architecture): hidden size
1536, 8 query heads and 1 KV head of dimension 256 in sliding-window layers, global layers
with head dimension 512 and proportional RoPE on a quarter of it (theta 1e6; sliding layers
theta 1e4), a 512-token sliding window in a 4:1 sliding:global pattern, MLP width 6144
(doubled in the KV-sharing layers), GELU-tanh, RMSNorm with q/k/v norms, per-layer embeddings
(PLE) of width 256 over the 262,144-token vocabulary, the last 20 of its 35 layers reusing
the KV of earlier layers, tied embeddings, and final logit soft-capping at 30.

Reduced: depth, 35 -> 10 layers, two periods of the 4:1 pattern, the second period sharing KV
(published: 20 of 35 layers share), so every layer kind is present: KV-producing sliding and
global layers, the "store" layers that feed the sharing ones, and the sharing layers with
double-width MLPs. Every width, the vocabulary and the PLE tables are the published ones.

Variants (``KF_EXAMPLE_VARIANT``): ``prefill`` (default), a 512-token prompt as
``generate`` runs it (``logits_to_keep=1``); ``decode``, one token after that prompt against
its KV cache. Batch 1.

``tiny`` keeps the layer pattern, KV sharing, PLE, activations, norms and dtype, and shrinks
widths (hidden 128, MLP 256, head dims 32/64, PLE width 16), the vocabulary (512), the
sliding window (16) and the prompt (24 tokens, so the window slides), so CI runs it on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

from examples.paper.causal_lm import step_inputs, step_model
from examples.paper.settings import example_size, example_variant, input_generator, seeded_build

VARIANTS = ("prefill", "decode")
DTYPE = torch.bfloat16
BATCH = 1
PROMPT_TOKENS = {"tiny": 24, "gpu": 512}

NUM_LAYERS = 10  # published: 35
LAYER_TYPES = (["sliding_attention"] * 4 + ["full_attention"]) * (NUM_LAYERS // 5)

#: ``google/gemma-4-E2B`` text_config, depth reduced as described above.
GPU_CONFIG: dict[str, Any] = {
    "vocab_size": 262_144,
    "hidden_size": 1536,
    "intermediate_size": 6144,
    "num_hidden_layers": NUM_LAYERS,
    "num_attention_heads": 8,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "global_head_dim": 512,
    "attention_k_eq_v": False,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6,
    "sliding_window": 512,
    "layer_types": LAYER_TYPES,
    "rope_parameters": {
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    },
    "vocab_size_per_layer_input": 262_144,
    "hidden_size_per_layer_input": 256,
    "num_kv_shared_layers": 5,  # published: 20 of 35
    "use_double_wide_mlp": True,
    "final_logit_softcapping": 30.0,
    "tie_word_embeddings": True,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 1,
}

TINY_CONFIG: dict[str, Any] = {
    **GPU_CONFIG,
    "vocab_size": 512,
    "vocab_size_per_layer_input": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "head_dim": 32,
    "global_head_dim": 64,
    "hidden_size_per_layer_input": 16,
    "sliding_window": 16,
}


def config() -> Gemma4TextConfig:
    """The text configuration at the current size."""
    values = GPU_CONFIG if example_size() == "gpu" else TINY_CONFIG
    return Gemma4TextConfig(**values)


def prompt_ids() -> torch.Tensor:
    """A fixed pseudo-random prompt, clear of the special tokens at the bottom of the vocabulary."""
    generator = input_generator()
    vocab = config().vocab_size
    shape = (BATCH, PROMPT_TOKENS[example_size()])
    return torch.randint(16, vocab, shape, generator=generator, device=generator.device)


def get_model() -> torch.nn.Module:
    """Reduced-depth Gemma 4 E2B text decoder in bfloat16, as a prefill or a decode step."""
    with seeded_build(DTYPE):
        lm = Gemma4ForCausalLM(config())
    return step_model(lm, prompt_ids, example_variant(VARIANTS))


def get_inputs() -> tuple[torch.Tensor]:
    """The prompt (prefill) or the next token after it (decode)."""
    return step_inputs(prompt_ids(), example_variant(VARIANTS))

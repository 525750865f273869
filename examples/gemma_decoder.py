"""A Gemma3-style text decoder from transformers' Gemma3TextConfig, random weights.

Gemma's traits: RMSNorm scaled by ``1 + weight``, q/k norms, GELU-tanh gated MLP, sliding-window
and global attention layers, a scaled embedding. Tiny size: 2 layers, width 64, 4/1 heads,
sequence 16, float32. ``KF_EXAMPLE_SIZE=gpu``: 4 layers of Gemma3-1B's shape (width 1152,
4/1 heads of 256, MLP 6912), sequence 512, bfloat16.
"""

from __future__ import annotations

import torch
from transformers import Gemma3TextConfig, Gemma3TextModel

from examples.sizing import example_dtype, generator, pick


def config() -> Gemma3TextConfig:
    return Gemma3TextConfig(
        vocab_size=pick(256, 262144), hidden_size=pick(64, 1152), intermediate_size=pick(128, 6912),
        num_hidden_layers=pick(2, 4), num_attention_heads=4, num_key_value_heads=1, head_dim=pick(16, 256),
        sliding_window=pick(8, 512), max_position_embeddings=pick(128, 4096), use_cache=False,
        attn_implementation="sdpa", layer_types=["sliding_attention", "full_attention"] * pick(1, 2),
    )


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Gemma3TextModel(config()).to(example_dtype()).eval()


def get_inputs() -> dict[str, torch.Tensor]:
    cfg = config()
    ids = torch.randint(0, cfg.vocab_size, (1, pick(16, 512)), generator=generator())
    return {"input_ids": ids, "use_cache": False}

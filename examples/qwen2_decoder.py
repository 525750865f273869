"""A Qwen2-style decoder from transformers' Qwen2Config, random weights (nothing is downloaded).

Tiny size: 2 layers, width 64, 4 query / 2 key-value heads, sequence 16, float32.
``KF_EXAMPLE_SIZE=gpu``: 4 layers of Qwen2.5-0.5B's shape (width 896, 14/2 heads, MLP 4864),
sequence 512, bfloat16. The forward is a prefill without a KV cache.
"""

from __future__ import annotations

import torch
from transformers import Qwen2Config, Qwen2Model

from examples.sizing import example_dtype, generator, pick


def config() -> Qwen2Config:
    return Qwen2Config(
        vocab_size=pick(256, 151936), hidden_size=pick(64, 896), intermediate_size=pick(128, 4864),
        num_hidden_layers=pick(2, 4), num_attention_heads=pick(4, 14), num_key_value_heads=2,
        max_position_embeddings=pick(128, 4096), use_cache=False, attn_implementation="sdpa",
    )


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return Qwen2Model(config()).to(example_dtype()).eval()


def get_inputs() -> dict[str, torch.Tensor]:
    cfg = config()
    ids = torch.randint(0, cfg.vocab_size, (1, pick(16, 512)), generator=generator())
    return {"input_ids": ids, "use_cache": False}

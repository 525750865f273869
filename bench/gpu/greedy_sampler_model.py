"""A greedy decoder's sampler as LLM serving code writes it: the next token is the argmax of the
logits over the vocabulary.

The logits come in as an input (the LM head's GEMM is a vendor op either way), so the model is the
sampler's own op: argmax over Qwen's vocabulary of 151936, in bfloat16 as models emit logits.
``KF_EXAMPLE_VARIANT`` picks the batch: decode (one sequence) or batch8 (eight sequences):

    KF_EXAMPLE_VARIANT=batch8 kforge optimize bench/gpu/greedy_sampler_model.py --backend cuda --budget 4

reports eager, the .cast, torch.compile and cast.compile. A warp or a block per row leaves most of
the GPU idle at these batch sizes; the argmax template's split mode cuts each row across blocks.
"""

from __future__ import annotations

import os

import torch
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
VOCABULARY = 151936  # Qwen's: 2.4 MB of bf16 logits at batch 8, small enough for the cpu too
BATCH = {"decode": 1, "batch8": 8}


class GreedySampler(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.argmax(dim=-1)


def get_model() -> nn.Module:
    return GreedySampler().to(DEVICE).eval()


def get_inputs() -> tuple[torch.Tensor]:
    batch = BATCH[os.environ.get("KF_EXAMPLE_VARIANT", "batch8")]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    return (torch.randn(batch, VOCABULARY, generator=gen, device=DEVICE).to(torch.bfloat16),)

"""An MoE router as Qwen 3.5 MoE and Mixtral-style models write it: softmax over expert logits, the
top k experts per token, their weights renormalised.

The logits come in as an input (the router's GEMM is a vendor op either way), so the model is
the router's own ops: softmax, topk, sum and divide. ``KF_EXAMPLE_VARIANT`` picks prefill (512
tokens) or decode (one token); 256 experts, k=8, float32 as the models route:

    KF_EXAMPLE_VARIANT=decode kforge optimize bench/gpu/router_topk_model.py --backend cuda --budget 3

reports eager, the .cast, torch.compile (which leaves topk to eager's kernels) and cast.compile.
"""

from __future__ import annotations

import os

import torch
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EXPERTS, TOP_K = 256, 8


class Router(nn.Module):
    def forward(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, TOP_K, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), experts


def get_model() -> nn.Module:
    return Router().to(DEVICE).eval()


def get_inputs() -> tuple[torch.Tensor]:
    tokens = 1 if os.environ.get("KF_EXAMPLE_VARIANT", "prefill") == "decode" else 512
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    return (torch.randn(tokens, EXPERTS, generator=gen, device=DEVICE),)

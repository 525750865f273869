"""Our own pre-norm transformer block: RMSNorm, softmax attention, a SiLU-gated MLP.

The norm and the gated activation are their own modules, so each becomes a module card (one
fused kernel for the module's whole forward). Tiny size: batch 2, sequence 16, width 64;
``KF_EXAMPLE_SIZE=gpu``: batch 4, sequence 512, width 1024, bfloat16.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from examples.sizing import example_dtype, generator, pick


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype) * self.weight


class SiLUGate(nn.Module):
    """``silu(gate) * up``: the gated activation of a SwiGLU MLP."""

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(gate) * up


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape
        q, k, v = self.qkv(x).view(batch, seq, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(dim // self.heads)
        mixed = torch.softmax(scores, dim=-1) @ v
        return self.out(mixed.transpose(1, 2).reshape(batch, seq, dim))


class GatedMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.act = SiLUGate()
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.act(self.gate(x), self.up(x)))


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = GatedMLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    dim = pick(64, 1024)
    return TransformerBlock(dim, heads=pick(4, 16), hidden=pick(128, 2816)).to(example_dtype()).eval()


def get_inputs() -> torch.Tensor:
    return torch.randn(pick(2, 4), pick(16, 512), pick(64, 1024), generator=generator()).to(example_dtype())

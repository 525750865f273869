"""The paper models' top card kinds in one model, for comparing searches on real cards.

bfloat16, as the paper models run: the SD3.5 VAE decoder's group norm (32 groups over 512
channels at 128x128, as in its mid block), a Gemma-style RMSNorm over 512 tokens of 1536 written
out in Python (a module card, as Gemma 4's is), and an attention-shaped softmax (8 heads x 512
queries over 512 keys). Each runs once per call, so each is one card of similar weight.
"""

from __future__ import annotations

import torch
from torch import nn

DTYPE = torch.bfloat16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class WrittenOutRMSNorm(nn.Module):
    """RMSNorm as LLM code writes it: a float32 mean of squares, then the weight."""

    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width, dtype=DTYPE))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.float()
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return (v * self.weight.float()).to(x.dtype)


class TopCards(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.group_norm = nn.GroupNorm(32, 512).to(DTYPE)
        self.rms_norm = WrittenOutRMSNorm(1536)

    def forward(self, image: torch.Tensor, tokens: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.group_norm(image), self.rms_norm(tokens), torch.softmax(scores, dim=-1)


def get_model() -> nn.Module:
    return TopCards().to(DEVICE).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=DEVICE).manual_seed(0)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=DEVICE, dtype=DTYPE)

    return draw(1, 512, 128, 128), draw(512, 1536), draw(8, 512, 512)

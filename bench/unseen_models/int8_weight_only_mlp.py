"""Weight-only int8 quantization as LLM deployments use it: int8 weights with a bfloat16 scale per
output channel, dequantized on every call (int8 to bfloat16, times the scale), a SwiGLU MLP in
bfloat16, a residual and an RMSNorm computed in float32 and cast back."""

import torch
import torch.nn.functional as F
from torch import nn


class Int8Linear(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        w = torch.randn(d_out, d_in) * 0.05
        scale = w.abs().amax(dim=1, keepdim=True) / 127
        self.register_buffer("qweight", torch.round(w / scale).to(torch.int8))
        self.register_buffer("scale", scale.to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.qweight.to(x.dtype) * self.scale)


class QuantMlpBlock(nn.Module):
    def __init__(self, dim: int = 128, hidden: int = 344) -> None:
        super().__init__()
        self.gate, self.up, self.down = Int8Linear(dim, hidden), Int8Linear(dim, hidden), Int8Linear(hidden, dim)
        self.weight = nn.Parameter(torch.ones(dim, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * self.weight
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(QuantMlpBlock() for _ in range(3))).to(torch.bfloat16).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 64, 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),)

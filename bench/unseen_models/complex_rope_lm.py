"""A decoder layer written the way some research code writes it: rotary embeddings through complex
numbers (view_as_complex, polar, view_as_real), grouped-query attention by repeat_interleave, an ALiBi
bias from a tril mask, F.rms_norm, scaled_dot_product_attention with a float mask, bucketized positions,
baddbmm, and a SwiGLU with its gate and up projections fused in one matmul."""

import torch
import torch.nn.functional as F
from torch import nn


def rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    pairs = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * freqs).flatten(-2).type_as(x)


class Layer(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate_up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(2 * dim, dim, bias=False)
        self.norm_w = nn.Parameter(torch.ones(dim))
        slopes = torch.tensor([2.0 ** (-8.0 * (i + 1) / heads) for i in range(heads)])
        self.register_buffer("slopes", slopes)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = F.rms_norm(x, (d,), self.norm_w, 1e-6)
        q = self.q(h).view(b, t, self.heads, self.head_dim)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        angles = positions.float().unsqueeze(-1) * (1e4 ** (-torch.arange(0, self.head_dim, 2) / self.head_dim))
        freqs = torch.polar(torch.ones_like(angles), angles).unsqueeze(2)
        q, k = rotary(q, freqs), rotary(k, freqs)
        k = k.repeat_interleave(self.heads // self.kv_heads, dim=2)
        v = v.repeat_interleave(self.heads // self.kv_heads, dim=2)
        distance = (positions.unsqueeze(-1) - positions.unsqueeze(-2)).float()
        bias = -self.slopes.view(1, -1, 1, 1) * distance.unsqueeze(1)
        bias = bias.masked_fill(torch.ones(t, t, dtype=torch.bool).tril().logical_not(), float("-inf"))
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias)
        x = x + self.o(attn.transpose(1, 2).reshape(b, t, d))
        gate, up = self.gate_up(F.rms_norm(x, (d,), None, 1e-6)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(128, 64)
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.boundaries = nn.Parameter(torch.tensor([4.0, 16.0, 32.0]), requires_grad=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1]).expand_as(tokens)
        x = self.embed(tokens) * torch.bucketize(positions.float(), self.boundaries).add(1).unsqueeze(-1) ** -0.5
        for layer in self.layers:
            x = layer(x, positions)
        scores = torch.baddbmm(torch.zeros(x.shape[0], x.shape[1], 128), x, self.embed.weight.t().expand(
            x.shape[0], -1, -1), beta=0.0, alpha=0.125)
        return F.log_softmax(scores, -1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return Model().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 128, (3, 48), generator=torch.Generator().manual_seed(7)),)

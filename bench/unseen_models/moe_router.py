"""A mixture-of-experts feed-forward layer written the way several open models write it: a router
softmax in float32, top-k with renormalised weights, an expert mask from one_hot, a loop over the
experts that gathers its tokens with torch.where and adds their outputs back with index_add_, a
shared expert gated by a sigmoid, and an auxiliary load-balancing loss from the router's means."""

import torch
import torch.nn.functional as F
from torch import nn


class Expert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoE(nn.Module):
    def __init__(self, dim: int = 64, experts: int = 8, top_k: int = 2) -> None:
        super().__init__()
        self.experts_n, self.top_k = experts, top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList([Expert(dim, 2 * dim) for _ in range(experts)])
        self.shared = Expert(dim, 2 * dim)
        self.shared_gate = nn.Linear(dim, 1, bias=False)
        self.norm = nn.RMSNorm(dim, eps=1e-6)

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, t, d = hidden.shape
        x = self.norm(hidden).view(-1, d)
        probs = F.softmax(self.router(x), dim=-1, dtype=torch.float32)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(chosen, num_classes=self.experts_n).permute(2, 1, 0)
        for e in range(self.experts_n):
            slot, token = torch.where(mask[e])
            if token.numel() == 0:
                continue
            y = self.experts[e](x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.to(x.dtype))
        out = out + torch.sigmoid(self.shared_gate(x)) * self.shared(x)
        load = mask.float().mean(dim=(1, 2)) * probs.mean(dim=0)
        return hidden + out.view(b, t, d), self.experts_n * load.sum()


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return MoE().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(11)),)

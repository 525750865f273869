"""A Mamba-style selective state-space block written in plain PyTorch: a causal depthwise conv1d by
left padding and slicing, SiLU gates, softplus step sizes, a discretised state matrix through exp,
the selective scan as a Python loop over time with einsum updates, RMSNorm by hand."""

import torch
import torch.nn.functional as F
from torch import nn


class SelectiveScanBlock(nn.Module):
    def __init__(self, d_model: int = 64, d_state: int = 8, d_conv: int = 4, expand: int = 2) -> None:
        super().__init__()
        d_inner = expand * d_model
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(d_inner, 1 + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(1, d_inner)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1).float()).repeat(d_inner, 1))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)
        self.norm_weight = nn.Parameter(torch.ones(d_model))
        self.d_state = d_state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, _ = x.shape
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm_weight
        xz = self.in_proj(h)
        u, z = xz.chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length]).transpose(1, 2)
        dt, B, C = torch.split(self.x_proj(u), [1, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))                                  # (b, l, d_inner)
        A = -torch.exp(self.A_log)                                          # (d_inner, n)
        dA = torch.exp(dt.unsqueeze(-1) * A)                                # (b, l, d_inner, n)
        dBu = dt.unsqueeze(-1) * B.unsqueeze(2) * u.unsqueeze(-1)
        state = torch.zeros(b, u.shape[-1], self.d_state, dtype=x.dtype)
        ys = []
        for t in range(length):
            state = dA[:, t] * state + dBu[:, t]
            ys.append(torch.einsum("bdn,bn->bd", state, C[:, t]))
        y = torch.stack(ys, dim=1) + u * self.D
        return x + self.out_proj(y * F.silu(z))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(SelectiveScanBlock(), SelectiveScanBlock()).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 32, 64, generator=torch.Generator().manual_seed(1)),)

"""A Conformer block as speech code writes it: half-step feed-forward with Swish, relative-position
free self-attention, a convolution module (pointwise conv, GLU, depthwise conv1d, BatchNorm1d,
SiLU), and a final LayerNorm; padding masks from lengths."""

import torch
import torch.nn.functional as F
from torch import nn


class FeedForward(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(self.norm(x))
        h = h * torch.sigmoid(h)
        return self.down(F.dropout(h, 0.1, self.training))


class ConvModule(nn.Module):
    def __init__(self, d: int, k: int = 15) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm(x).masked_fill(~mask[..., None], 0.0).transpose(1, 2)
        h = F.glu(self.pw1(h), dim=1)
        h = F.silu(self.bn(self.dw(h)))
        return self.pw2(h).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, d: int = 96, heads: int = 4) -> None:
        super().__init__()
        self.ff1, self.ff2 = FeedForward(d), FeedForward(d)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.conv = ConvModule(d)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        t = torch.arange(x.shape[1], device=x.device)
        mask = t[None, :] < lengths[:, None]
        x = x + 0.5 * self.ff1(x)
        h = self.attn_norm(x)
        a, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        x = x + a
        x = x + self.conv(x, mask)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x) * mask[..., None].to(x.dtype)


class Conformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(80, 96)
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.inp(feats)
        for b in self.blocks:
            x = b(x, lengths)
        return x.log_softmax(-1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return Conformer().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(4, 200, 80, generator=g), torch.tensor([200, 170, 120, 64])

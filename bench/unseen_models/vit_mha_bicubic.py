"""A small ViT as older code writes it: patches by Conv2d, a class token concatenated, position
embeddings resized by bicubic interpolation to the input's grid, nn.MultiheadAttention (batch
first, need_weights left on), pre-norm blocks with exact GELU, dropout in eval, the class token's
features normalised and compared with prototypes by cosine similarity."""

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.1, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        attended, weights = self.attn(h, h, h)
        x = x + attended + 0.0 * weights.mean()
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    def __init__(self, dim: int = 96, depth: int = 3, heads: int = 4, grid: int = 7) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 8, stride=8)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, dim, grid, grid) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.prototypes = nn.Parameter(torch.randn(10, dim))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch(images)
        pos = F.interpolate(self.pos, size=x.shape[-2:], mode="bicubic", align_corners=False)
        x = (x + pos).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        for block in self.blocks:
            x = block(x)
        feature = F.normalize(self.norm(x[:, 0]), dim=-1)
        return F.cosine_similarity(feature.unsqueeze(1), self.prototypes.unsqueeze(0), dim=-1) / 0.07


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return TinyViT().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(8, 3, 80, 80, generator=torch.Generator().manual_seed(1)),)

"""ConvNeXt-style stages as the reference code writes them: a 7x7 depthwise convolution, a LayerNorm
over channels after a permute to channels-last, an inverted MLP with GELU, a layer scale, and the
hand-written channels-first LayerNorm module (mean and variance over dim 1) between stages."""

import torch
import torch.nn.functional as F
from torch import nn


class ChannelsFirstLayerNorm(nn.Module):
    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels) + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-1 * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ConvNeXtish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 4, stride=4), ChannelsFirstLayerNorm(32))
        self.stage1 = nn.Sequential(Block(32), Block(32))
        self.down = nn.Sequential(ChannelsFirstLayerNorm(32), nn.Conv2d(32, 64, 2, stride=2))
        self.stage2 = nn.Sequential(Block(64), Block(64))
        self.head_norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.stage2(self.down(self.stage1(self.stem(image))))
        return self.head(self.head_norm(x.mean([-2, -1])))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return ConvNeXtish().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(8, 3, 128, 128, generator=torch.Generator().manual_seed(9)),)

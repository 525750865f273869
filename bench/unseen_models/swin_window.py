"""A Swin-style stage: patch embedding, shifted-window attention (roll, window partition by
view/permute, a relative position bias gathered from a table by an index buffer, an attention
mask for the shifted windows), LayerNorm, GELU MLP, and patch merging by strided slicing and cat."""

import torch
from torch import nn


def partition(x: torch.Tensor, w: int) -> torch.Tensor:
    b, h, wd, c = x.shape
    x = x.view(b, h // w, w, wd // w, w, c).permute(0, 1, 3, 2, 4, 5).contiguous()
    return x.view(-1, w * w, c)


def merge(windows: torch.Tensor, w: int, h: int, wd: int) -> torch.Tensor:
    b = windows.shape[0] // ((h // w) * (wd // w))
    x = windows.view(b, h // w, wd // w, w, w, -1).permute(0, 1, 3, 2, 4, 5).contiguous()
    return x.view(b, h, wd, -1)


class WindowAttention(nn.Module):
    def __init__(self, dim: int, heads: int, window: int) -> None:
        super().__init__()
        self.heads, self.window, self.scale = heads, window, (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.table = nn.Parameter(0.02 * torch.randn((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("index", rel[..., 0] * (2 * window - 1) + rel[..., 1], persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        bw, n, c = x.shape
        q, k, v = self.qkv(x).reshape(bw, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.table[self.index.view(-1)].view(n, n, -1).permute(2, 0, 1)
        attn = attn + bias.unsqueeze(0)
        if mask is not None:
            nw = mask.shape[0]
            attn = attn.view(bw // nw, nw, self.heads, n, n) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.heads, n, n)
        attn = attn.softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(bw, n, c))


class SwinBlock(nn.Module):
    def __init__(self, dim: int, heads: int, window: int, shift: int, size: int) -> None:
        super().__init__()
        self.window, self.shift = window, shift
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, window)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        mask = None
        if shift:
            img = torch.zeros(1, size, size, 1)
            cnt = 0
            for hs in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                for ws in (slice(0, -window), slice(-window, -shift), slice(-shift, None)):
                    img[:, hs, ws, :] = cnt
                    cnt += 1
            wins = partition(img, window).squeeze(-1)
            mask = wins.unsqueeze(1) - wins.unsqueeze(2)
            mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h, w, _ = x.shape
        y = self.norm1(x)
        if self.shift:
            y = torch.roll(y, shifts=(-self.shift, -self.shift), dims=(1, 2))
        y = merge(self.attn(partition(y, self.window), self.mask), self.window, h, w)
        if self.shift:
            y = torch.roll(y, shifts=(self.shift, self.shift), dims=(1, 2))
        x = x + y
        return x + self.mlp(self.norm2(x))


class PatchMerge(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduce = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], -1)
        return self.reduce(self.norm(x))


class Swinish(nn.Module):
    def __init__(self, dim: int = 32, size: int = 16) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, 4, stride=4)
        self.embed_norm = nn.LayerNorm(dim)
        self.blocks = nn.Sequential(SwinBlock(dim, 2, 4, 0, size), SwinBlock(dim, 2, 4, 2, size))
        self.merge = PatchMerge(dim)
        self.head = nn.Linear(2 * dim, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.embed(image).permute(0, 2, 3, 1))
        x = self.merge(self.blocks(x))
        return self.head(x.mean(dim=(1, 2)))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return Swinish().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(3)),)

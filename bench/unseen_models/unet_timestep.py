"""A small diffusion U-Net as diffusion code writes it: a sinusoidal timestep embedding (arange,
exp, sin, cos, cat) through a SiLU MLP, residual blocks of GroupNorm + SiLU + conv with the
embedding added per channel, self-attention by scaled_dot_product_attention over flattened
pixels, strided-conv downsampling, nearest upsampling, skip concatenation, and a
classifier-free-guidance mix of two halves of the batch by chunk."""

import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class ResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, temb: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.GroupNorm(8, cin), nn.GroupNorm(8, cout)
        self.conv1, self.conv2 = nn.Conv2d(cin, cout, 3, padding=1), nn.Conv2d(cout, cout, 3, padding=1)
        self.emb = nn.Linear(temb, cout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return (self.skip(x) + h) / math.sqrt(2.0)


class Attention(nn.Module):
    def __init__(self, ch: int, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.GroupNorm(8, ch)
        self.qkv = nn.Conv2d(ch, 3 * ch, 1)
        self.out = nn.Conv2d(ch, ch, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).transpose(-1, -2).unbind(1)
        y = F.scaled_dot_product_attention(q, k, v)
        return x + self.out(y.transpose(-1, -2).reshape(b, c, h, w))


class TinyUNet(nn.Module):
    def __init__(self, ch: int = 32, temb: int = 64) -> None:
        super().__init__()
        self.temb = temb
        self.time = nn.Sequential(nn.Linear(temb, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.down1 = ResBlock(ch, ch, temb)
        self.down = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.down2 = ResBlock(ch, 2 * ch, temb)
        self.mid_attn = Attention(2 * ch)
        self.up2 = ResBlock(4 * ch, ch, temb)
        self.up1 = ResBlock(2 * ch, ch, temb)
        self.out_norm = nn.GroupNorm(8, ch)
        self.out = nn.Conv2d(ch, 4, 3, padding=1)

    def forward(self, latents: torch.Tensor, t: torch.Tensor, guidance: float = 4.0) -> torch.Tensor:
        x = torch.cat([latents, latents])
        emb = self.time(timestep_embedding(torch.cat([t, t]), self.temb))
        h0 = self.inp(x)
        h1 = self.down1(h0, emb)
        h2 = self.mid_attn(self.down2(self.down(h1), emb))
        u = F.interpolate(h2, scale_factor=2.0, mode="nearest")
        u = self.up2(torch.cat([u, torch.cat([h1, h1], 1)], 1), emb)
        u = self.up1(torch.cat([u, h0], 1), emb)
        eps = self.out(F.silu(self.out_norm(u)))
        cond, uncond = eps.chunk(2)
        return uncond + guidance * (cond - uncond)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return TinyUNet().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    return (torch.randn(2, 4, 32, 32, generator=g), torch.tensor([10, 500]))

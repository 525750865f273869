"""A VQ-VAE bottleneck: encoder convs, nearest codebook entries by cdist and argmin, an embedding
lookup, the straight-through estimator, commitment loss by mse_loss, codebook usage perplexity
(one_hot, mean, log), a decoder with ConvTranspose2d and tanh."""

import torch
import torch.nn.functional as F
from torch import nn


class VQ(nn.Module):
    def __init__(self, codes: int = 128, dim: int = 32) -> None:
        super().__init__()
        self.codebook = nn.Embedding(codes, dim)
        self.codes = codes

    def forward(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, c, h, w = z.shape
        flat = z.permute(0, 2, 3, 1).reshape(-1, c)
        idx = torch.cdist(flat, self.codebook.weight).argmin(dim=1)
        q = self.codebook(idx).view(b, h, w, c).permute(0, 3, 1, 2)
        loss = F.mse_loss(q.detach(), z) * 0.25 + F.mse_loss(q, z.detach())
        q = z + (q - z).detach()
        usage = F.one_hot(idx, self.codes).float().mean(0)
        perplexity = torch.exp(-torch.sum(usage * torch.log(usage + 1e-10)))
        return q, loss, perplexity


class VQVAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 32, 4, 2, 1), nn.ReLU(), nn.Conv2d(32, 32, 4, 2, 1))
        self.vq = VQ()
        self.dec = nn.Sequential(nn.ConvTranspose2d(32, 32, 4, 2, 1), nn.ELU(), nn.ConvTranspose2d(32, 3, 4, 2, 1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, loss, perplexity = self.vq(self.enc(x))
        return torch.tanh(self.dec(q)), loss, perplexity


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return VQVAE().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.rand(8, 3, 64, 64, generator=torch.Generator().manual_seed(2)) * 2 - 1,)

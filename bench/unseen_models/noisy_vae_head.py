"""A VAE encoder head that samples: mean and log-variance by Linear, z = mu + exp(0.5 logvar) *
randn_like (a fresh draw each call), dropout left in train mode, a dict output with the KL term."""

import torch
from torch import nn


class NoisyHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Dropout(0.1), nn.LayerNorm(128))
        self.mu = nn.Linear(128, 16)
        self.logvar = nn.Linear(128, 16)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.body(x)
        mu, logvar = self.mu(h), self.logvar(h).clamp(-8, 8)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=-1).mean()
        return {"z": z, "kl": kl}


def get_model() -> nn.Module:
    torch.manual_seed(0)
    model = NoisyHead()
    model.body[2].train()  # dropout stays on: a model as some users hand it over
    return model


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(256, 64, generator=torch.Generator().manual_seed(1)),)

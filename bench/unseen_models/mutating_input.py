"""A model that writes into its own input (in-place clamp and add on the argument), takes Python
scalars beside the tensor, and returns a nested structure with an int and None in it."""

import torch
from torch import nn


class Mutating(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, scale: float, steps: int) -> tuple[torch.Tensor, tuple[int, None, torch.Tensor]]:
        x.clamp_(-2.0, 2.0)          # the caller's tensor changes
        x.mul_(scale)
        h = x
        for _ in range(steps):
            h = torch.tanh(self.proj(h)) + h * 0.5
        return h, (steps, None, x.sum(dim=-1))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return Mutating().eval()


def get_inputs() -> tuple[object, ...]:
    return (torch.randn(512, 32, generator=torch.Generator().manual_seed(1)) * 3, 0.75, 3)

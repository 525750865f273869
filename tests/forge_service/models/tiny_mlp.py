"""A tiny model whose hot ops the offline proposer covers: a gated activation and a softmax."""

import torch


class TinyHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return torch.softmax(torch.nn.functional.silu(h) * h, dim=-1)


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return TinyHead().eval()


def get_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(64, 64, generator=torch.Generator().manual_seed(1)),)

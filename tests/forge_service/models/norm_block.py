"""A block whose hottest card has nothing to propose (a LayerNorm module card, covered by its aten
card), so the run must hand its place to the next card by eager time."""

import torch


class NormBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.norm(x)) * x


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return NormBlock().eval()


def get_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(128, 256, generator=torch.Generator().manual_seed(1)),)

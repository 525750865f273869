"""A block whose hottest cards have nothing to propose (the block's own module card, which runs
several operators, and the LayerNorm module cards, each the same card as the one layer_norm it
runs), so selection must give the run's slots to the operator cards alone. A second LayerNorm
over a single row of 1024 is the cheapest module card by two orders of magnitude, so some module
card always stays outside the search however noisy the timings are."""

import torch


class NormBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(1024)
        self.row_norm = torch.nn.LayerNorm(1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.norm(x)) * x + self.row_norm(x[:1])


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return NormBlock().eval()


def get_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(512, 1024, generator=torch.Generator().manual_seed(1)),)

"""The tiny MLP with dropout before its softmax, left in training mode: every call draws random numbers."""

import torch


class DropoutHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 256)
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return torch.softmax(self.drop(torch.nn.functional.silu(h) * h), dim=-1)


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return DropoutHead()  # training mode, as a user may forget to switch it


def get_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(64, 64, generator=torch.Generator().manual_seed(1)),)

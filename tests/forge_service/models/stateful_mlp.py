"""The tiny model with a buffer it updates on every call (a step counter scaling its output), so
no two calls from the same inputs agree unless the buffer is put back first."""

import torch


class StepScaledHead(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(64, 256)
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps += 1
        h = self.proj(x)
        return torch.softmax(torch.nn.functional.silu(h) * h, dim=-1) * self.steps


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return StepScaledHead().eval()


def get_inputs() -> tuple[torch.Tensor]:
    return (torch.randn(64, 64, generator=torch.Generator().manual_seed(1)),)

"""A small CNN: convolution, batch norm, ReLU, pooling and a softmax head (the README demo).

Tiny size: batch 8 of 3x32x32 images, float32; a capture with eager timing takes seconds on a
CPU. ``KF_EXAMPLE_SIZE=gpu``: batch 256, bfloat16.
"""

from __future__ import annotations

import torch
from torch import nn

from examples.sizing import example_dtype, generator, pick


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(torch.flatten(self.features(images), 1)), dim=-1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return SmallCNN().to(example_dtype()).eval()


def get_inputs() -> torch.Tensor:
    return torch.randn(pick(8, 256), 3, 32, 32, generator=generator()).to(example_dtype())

"""A small CNN handed over in train mode: BatchNorm2d updates its running statistics on every call
(the buffers change under the tool), ReLU6, adaptive max pooling, hardswish, a list output."""

import torch
from torch import nn


class TrainModeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU6(),
                                      nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.Hardswish())
        self.pool = nn.AdaptiveMaxPool2d((4, 4))
        self.fc = nn.Linear(32 * 16, 10)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        f = self.pool(self.features(x))
        return [self.fc(f.flatten(1)).log_softmax(-1), f.amax(dim=(2, 3))]


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return TrainModeNet()  # not .eval(): as handed over


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(1)),)

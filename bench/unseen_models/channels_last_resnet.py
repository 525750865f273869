"""torchvision's ResNet-18 as CNN deployments run it: weights and inputs in channels-last memory
format, so every convolution, batch norm, the stem's max pool and the head's average pool see
NHWC tensors; logits through a temperature-scaled softmax."""

import torch
import torchvision
from torch import nn


class ChannelsLastClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torchvision.models.resnet18(weights=None, num_classes=100)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.net(images) / 1.5, dim=-1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return ChannelsLastClassifier().eval().to(memory_format=torch.channels_last)


def get_inputs() -> tuple[torch.Tensor, ...]:
    images = torch.randn(8, 3, 112, 112, generator=torch.Generator().manual_seed(1))
    return (images.contiguous(memory_format=torch.channels_last),)

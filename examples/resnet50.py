"""torchvision's ResNet-50 with random weights (nothing is downloaded).

Tiny size: batch 1 of 3x64x64 images, float32 (the network is unchanged: only the image is
small). ``KF_EXAMPLE_SIZE=gpu``: batch 32 of 3x224x224, bfloat16.
"""

from __future__ import annotations

import torch
from torchvision.models import resnet50

from examples.sizing import example_dtype, generator, pick


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return resnet50(weights=None).to(example_dtype()).eval()


def get_inputs() -> torch.Tensor:
    size = pick(64, 224)
    return torch.randn(pick(1, 32), 3, size, size, generator=generator()).to(example_dtype())

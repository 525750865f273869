"""ResNet-50 (vision), as torchvision builds it, with random weights.

Architecture: ``torchvision.models.resnet50(weights=None)``, the ImageNet ResNet-50 v1.5
(bottleneck blocks [3, 4, 6, 3], stride on the 3x3 convolution, 1000 classes), exactly as
torchvision's model builder defines it; nothing is reduced.

Variants (``KF_EXAMPLE_VARIANT``):

- ``b1_fp32`` (default): batch 1, float32, the latency case;
- ``b32_bf16``: batch 32, bfloat16, the throughput case.

Sizes (``KF_EXAMPLE_SIZE``): ``gpu`` feeds 224x224 images (the ImageNet evaluation size);
``tiny`` feeds 32x32 images and uses batch 2 instead of 32, so CI runs it on a CPU in
seconds. The network itself is the same at both sizes.
"""

from __future__ import annotations

import torch
from torchvision.models import resnet50

from examples.paper.settings import example_size, example_variant, input_generator, seeded_build

VARIANTS = ("b1_fp32", "b32_bf16")
IMAGE_SIZE = {"tiny": 32, "gpu": 224}
BATCH = {("b1_fp32", "tiny"): 1, ("b1_fp32", "gpu"): 1, ("b32_bf16", "tiny"): 2, ("b32_bf16", "gpu"): 32}
DTYPE = {"b1_fp32": torch.float32, "b32_bf16": torch.bfloat16}


def get_model() -> torch.nn.Module:
    """torchvision's ResNet-50 in eval mode, in the variant's dtype."""
    with seeded_build():
        model = resnet50(weights=None)
    return model.to(DTYPE[example_variant(VARIANTS)]).eval()


def get_inputs() -> tuple[torch.Tensor]:
    """One batch of normalised-looking images, NCHW."""
    variant, size = example_variant(VARIANTS), example_size()
    generator = input_generator()
    shape = (BATCH[variant, size], 3, IMAGE_SIZE[size], IMAGE_SIZE[size])
    images = torch.randn(shape, generator=generator, device=generator.device)
    return (images.to(DTYPE[variant]),)

"""A diffusion UNet/VAE mid block from diffusers: GroupNorm + SiLU + conv resnets around attention.

``UNetMidBlock2D`` without a time embedding is the mid block of the Stable Diffusion VAE
(resnet, self-attention with GroupNorm, resnet). Tiny size: 64 channels (32 groups) at 16x16,
float32; ``KF_EXAMPLE_SIZE=gpu``: 512 channels at 64x64, batch 2, bfloat16.
"""

from __future__ import annotations

import torch
from diffusers.models.unets.unet_2d_blocks import UNetMidBlock2D

from examples.sizing import example_dtype, generator, pick


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    channels = pick(64, 512)
    block = UNetMidBlock2D(
        in_channels=channels, temb_channels=None, resnet_groups=32, attention_head_dim=channels, add_attention=True,
        resnet_time_scale_shift="default",
    )
    return block.to(example_dtype()).eval()


def get_inputs() -> tuple[torch.Tensor]:
    channels, size = pick(64, 512), pick(16, 64)
    return (torch.randn(pick(1, 2), channels, size, size, generator=generator()).to(example_dtype()),)

"""Stable Diffusion 3.5 Medium's VAE decoder (diffusion), latents to a 1024x1024 image, bfloat16.

Architecture: diffusers' ``AutoencoderKL`` with the configuration published with
``stabilityai/stable-diffusion-3.5-medium`` (its ``vae/config.json`` on the model's hub page):
16 latent channels, block widths [128, 256, 512, 512], 2 ResNet layers per block (3 in the
decoder's up blocks, as diffusers builds them), group norms of 32 groups, SiLU, a self-attention
mid block, no quant / post-quant convolutions, ``scaling_factor`` 1.5305 and ``shift_factor``
0.0609. Nothing is reduced at the paper size: the decoder is where the group norms of the
pipeline live, and it runs once per image.

The spec runs what ``StableDiffusion3Pipeline`` does after denoising: undo the latent scaling
and shift, then ``vae.decode``. Input: one 16x128x128 latent; output: a 3x1024x1024 image.

Variants (``KF_EXAMPLE_VARIANT``): ``nchw`` (default) as the pipeline loads it; ``channels_last``
with weights and latents in channels-last memory format, as diffusers' speed guide suggests for
the VAE (its group norms then see channel-block groups strided in memory).

``tiny`` keeps the block structure, group count, activation and dtype, narrows the blocks to
[32, 32, 64, 64] and decodes a 4x4 latent to a 32x32 image: bfloat16 convolutions take
PyTorch's slow reference path on CPUs without native bfloat16, and CI must run it in seconds.
"""

from __future__ import annotations

from typing import Any

import torch
from diffusers import AutoencoderKL

from examples.paper.settings import example_size, example_variant, input_generator, seeded_build

DTYPE = torch.bfloat16
BATCH = 1
VARIANTS = ("nchw", "channels_last")

#: The published SD3.5 Medium VAE configuration (unreduced).
GPU_CONFIG: dict[str, Any] = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (128, 256, 512, 512),
    "layers_per_block": 2,
    "act_fn": "silu",
    "latent_channels": 16,
    "norm_num_groups": 32,
    "sample_size": 1024,
    "scaling_factor": 1.5305,
    "shift_factor": 0.0609,
    "force_upcast": True,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "mid_block_add_attention": True,
}

TINY_CONFIG: dict[str, Any] = {**GPU_CONFIG, "block_out_channels": (32, 32, 64, 64), "sample_size": 32}

#: The VAE downsamples by 2 per block after the first: 8x for four blocks.
DOWNSAMPLE = 8


def config() -> dict[str, Any]:
    """The VAE configuration at the current size."""
    return GPU_CONFIG if example_size() == "gpu" else TINY_CONFIG


class LatentDecoder(torch.nn.Module):
    """The SD3 pipeline's last stage: unscale the latents and decode them to an image."""

    def __init__(self, vae: AutoencoderKL, scaling_factor: float, shift_factor: float) -> None:
        super().__init__()
        self.vae: Any = vae  # diffusers' models are untyped for mypy
        self.scaling_factor = scaling_factor
        self.shift_factor = shift_factor

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        latents = latents / self.scaling_factor + self.shift_factor
        return self.vae.decode(latents, return_dict=False)[0]


def get_model() -> torch.nn.Module:
    """The SD3.5 Medium VAE in bfloat16, eval mode, wrapped to decode latents."""
    cfg = config()
    with seeded_build(DTYPE):
        vae = AutoencoderKL(**cfg)
    decoder = LatentDecoder(vae, cfg["scaling_factor"], cfg["shift_factor"]).eval()
    return decoder.to(memory_format=_memory_format())


def _memory_format() -> torch.memory_format:
    return torch.channels_last if example_variant(VARIANTS) == "channels_last" else torch.contiguous_format


def get_inputs() -> tuple[torch.Tensor]:
    """One scaled latent, as the denoiser leaves it."""
    cfg, generator = config(), input_generator()
    side = cfg["sample_size"] // DOWNSAMPLE
    latents = torch.randn((BATCH, cfg["latent_channels"], side, side), generator=generator, device=generator.device)
    return (latents.to(DTYPE).contiguous(memory_format=_memory_format()),)

"""Stable Diffusion 3.5 Medium's MMDiT denoiser (diffusion), one denoising step, bfloat16.

Architecture: diffusers' ``SD3Transformer2DModel`` with the configuration published with
``stabilityai/stable-diffusion-3.5-medium`` (its ``transformer/config.json`` on the model's
hub page): 24 heads of dimension 64 (width 1536), ``caption_projection_dim`` 1536,
``joint_attention_dim`` 4096, ``pooled_projection_dim`` 2048, 16 latent channels, patch 2,
``pos_embed_max_size`` 384, ``qk_norm`` "rms_norm", and MMDiT-X dual attention (a second,
image-only attention) in the first 13 of its 24 blocks.

Reduced: depth, 24 -> 4 blocks, keeping both block kinds in the published proportion: blocks
0-1 carry dual attention, block 2 is a plain joint block and block 3, the last, is the
context-pre-only joint block the full model ends with.

Inputs, as ``StableDiffusion3Pipeline`` feeds the transformer for a 1024x1024 image:
a 128x128 latent (the VAE downsamples by 8), 333 text tokens (77 CLIP + 256 T5) of width
4096, a pooled text embedding of width 2048, and a timestep; batch 2, the conditional and
unconditional halves of classifier-free guidance.

``tiny`` keeps the block structure, head dimension, patching and dtype, and reduces the width
to 4 heads (256), the text/pooled widths to 256, the latent to 32x32, the text to 32 tokens
and ``pos_embed_max_size`` to 64, so CI runs it on a CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from diffusers import SD3Transformer2DModel

from examples.paper.settings import example_size, input_generator, seeded_build

DTYPE = torch.bfloat16
BATCH = 2  # classifier-free guidance: unconditional and conditional halves
TIMESTEP = 750.0

#: The published SD3.5 Medium transformer configuration, depth reduced as described above.
GPU_CONFIG: dict[str, Any] = {
    "sample_size": 128,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 4,  # published: 24
    "attention_head_dim": 64,
    "num_attention_heads": 24,
    "joint_attention_dim": 4096,
    "caption_projection_dim": 1536,
    "pooled_projection_dim": 2048,
    "pos_embed_max_size": 384,
    "dual_attention_layers": (0, 1),  # published: 0-12 of 24
    "qk_norm": "rms_norm",
}

TINY_CONFIG: dict[str, Any] = {
    **GPU_CONFIG,
    "sample_size": 32,
    "num_attention_heads": 4,
    "joint_attention_dim": 256,
    "caption_projection_dim": 256,
    "pooled_projection_dim": 256,
    "pos_embed_max_size": 64,
}

#: Text tokens per prompt: 77 CLIP tokens and 256 T5 tokens at the paper size.
TEXT_TOKENS = {"tiny": 32, "gpu": 77 + 256}


def config() -> dict[str, Any]:
    """The transformer configuration at the current size."""
    return GPU_CONFIG if example_size() == "gpu" else TINY_CONFIG


class DenoiserStep(torch.nn.Module):
    """One call of the MMDiT, returning the predicted velocity as a plain tensor."""

    def __init__(self, transformer: SD3Transformer2DModel) -> None:
        super().__init__()
        self.transformer: Any = transformer  # diffusers' models are untyped for mypy

    def forward(
        self,
        latents: torch.Tensor,
        text_embeddings: torch.Tensor,
        pooled_text_embeddings: torch.Tensor,
        timestep: torch.Tensor,
    ) -> torch.Tensor:
        return self.transformer(
            hidden_states=latents,
            encoder_hidden_states=text_embeddings,
            pooled_projections=pooled_text_embeddings,
            timestep=timestep,
            return_dict=False,
        )[0]


def get_model() -> torch.nn.Module:
    """The reduced-depth SD3.5 Medium MMDiT in bfloat16, eval mode."""
    with seeded_build(DTYPE):
        transformer = SD3Transformer2DModel(**config())
    return DenoiserStep(transformer).eval()


def get_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Latents, text embeddings, pooled text embeddings and timesteps of one guided step."""
    cfg, generator = config(), input_generator()
    device = generator.device
    side = cfg["sample_size"]
    latents = torch.randn((BATCH, cfg["in_channels"], side, side), generator=generator, device=device)
    text = torch.randn(
        (BATCH, TEXT_TOKENS[example_size()], cfg["joint_attention_dim"]), generator=generator, device=device
    )
    pooled = torch.randn((BATCH, cfg["pooled_projection_dim"]), generator=generator, device=device)
    timestep = torch.full((BATCH,), TIMESTEP, device=device)
    return latents.to(DTYPE), text.to(DTYPE), pooled.to(DTYPE), timestep

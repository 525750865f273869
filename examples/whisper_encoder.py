"""A Whisper-style audio encoder from transformers' WhisperConfig, random weights.

Two Conv1d+GELU stems over log-mel frames, sinusoidal-free learned positions, pre-LayerNorm
encoder layers with GELU MLPs. Tiny size: 80 mel bins x 100 frames, width 64, 2 layers,
float32. ``KF_EXAMPLE_SIZE=gpu``: Whisper-base's encoder shape (width 512, 6 layers, 8 heads)
on 30 s of audio (3000 frames), batch 4, bfloat16.
"""

from __future__ import annotations

import torch
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

from examples.sizing import example_dtype, generator, pick


def config() -> WhisperConfig:
    return WhisperConfig(
        num_mel_bins=80, d_model=pick(64, 512), encoder_layers=pick(2, 6), encoder_attention_heads=pick(4, 8),
        encoder_ffn_dim=pick(128, 2048), max_source_positions=pick(50, 1500), attn_implementation="sdpa",
    )


def get_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return WhisperEncoder(config()).to(example_dtype()).eval()


def get_inputs() -> tuple[torch.Tensor]:
    frames = 2 * config().max_source_positions
    return (torch.randn(pick(1, 4), 80, frames, generator=generator()).to(example_dtype()),)

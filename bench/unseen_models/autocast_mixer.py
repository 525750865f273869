"""An MLP-Mixer whose forward runs under ``torch.autocast`` (bfloat16 on the cpu, as mixed-precision
code does) and takes a dict: token mixing through a transpose, channel mixing, LayerNorm, GELU, a
residual in float32 outside the autocast region, a mean over tokens."""

import torch
import torch.nn.functional as F
from torch import nn


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.token_mlp = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens))
        self.channel_mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        x = x + mixed.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            channel = self.channel_mlp(self.norm2(x))
        return x + channel.float()


class Mixer(nn.Module):
    def __init__(self, tokens: int = 64, dim: int = 96) -> None:
        super().__init__()
        self.embed = nn.Linear(48, dim)
        self.blocks = nn.ModuleList(MixerBlock(tokens, dim) for _ in range(2))
        self.head = nn.Linear(dim, 10)

    def forward(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        x = self.embed(batch["patches"])
        for block in self.blocks:
            x = block(x)
        logits = self.head(x.mean(dim=1))
        return {"logits": logits, "probs": F.softmax(logits, dim=-1)}


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return Mixer().eval()


def get_inputs() -> tuple[dict[str, torch.Tensor], ...]:
    return ({"patches": torch.randn(8, 64, 48, generator=torch.Generator().manual_seed(1))},)

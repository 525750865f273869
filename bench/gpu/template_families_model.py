"""One model running an op of every gather, comparison, integer, conversion, in-place, scan, histc,
copying-reshape and sort template, for checking their cuda kernels against eager through the real
sandbox in one ``kforge optimize`` run.

Each op runs on its own input, at sizes where it is one of the model's larger cards on the GPU
(small ones on the cpu), so ``--max-cards`` at least the number of ops searches every one:

    KF_EXAMPLE_SIZE=gpu kforge optimize bench/gpu/template_families_model.py --backend cuda \
        --budget 4 --max-cards 40 --no-compile-baseline --sample-budget-mb 8192 --time-limit 420

(the default 512 MiB of reference samples is spent on the largest cards, and the rest are skipped
unsearched). Each card's status (a passing kernel, or why none passed) is the check; ``kforge report`` lists them.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BIG = os.environ.get("KF_EXAMPLE_SIZE", "gpu" if DEVICE == "cuda" else "tiny") == "gpu"
TOKENS, WIDTH, VOCAB = (4096, 2048, 32000) if BIG else (64, 32, 100)
LOGITS = 151936 if BIG else 100  # a sampler's row of logits: Qwen's vocabulary
IMAGE = (1, 256, 128, 128) if BIG else (1, 4, 8, 8)
DTYPE = torch.bfloat16


class TemplateFamilies(nn.Module):
    """Ops of the gather, comparison, in-place, scan and histc families, each on its own tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH).to(DTYPE)
        self.cache: torch.Tensor
        self.register_buffer("cache", torch.zeros(2, TOKENS, WIDTH, dtype=DTYPE))

    def forward(self, ids: torch.Tensor, h: torch.Tensor, image: torch.Tensor, counts: torch.Tensor,
                picks: torch.Tensor) -> tuple[torch.Tensor, ...]:
        gathered = (
            self.embed(ids),                                                    # embedding
            F.interpolate(image, scale_factor=2.0, mode="nearest"),             # upsample_nearest2d
            torch.cat([h, h.flip(0)], dim=-1),                                  # cat and flip
            h[picks],                                                           # index.Tensor
            F.pad(h, (0, 64)),                                                  # constant_pad_nd
            h.masked_fill(h > 1.0, 0.0),                                        # masked_fill (and gt)
            torch.where(h < 0, h, h * 2),                                       # where (and lt, mul)
            h.repeat_interleave(2, dim=0),                                      # repeat_interleave
            (h > 0) & (h < 1),                                                  # logical and of comparisons
            counts.cumsum(0),                                                   # cumsum of int64
            h.float().cumsum(-1),                                               # cumsum of float rows
            torch.histc(counts.float(), bins=64, min=0, max=63),                # histc of MoE expert ids
            h.view(h.shape[0], 16, -1).transpose(0, 1).reshape(16, -1),         # reshape that copies (heads)
            image.permute(0, 2, 3, 1).flatten(1),                               # flatten that copies
            *counts.sort(stable=True),                                          # sort of MoE expert ids
            *counts.topk(64),                                                   # topk of ints, k > 32
            *h[:, :256].float().softmax(-1).topk(8),                            # an MoE router's float topk
            *counts.view(-1, 8).sort(),                                         # unstable sort of short rows
            counts // 8,                                                        # integer floor_divide
            counts % 8,                                                         # integer remainder
            (counts ^ 5) | (counts & 3),                                        # integer bitwise ops
            counts.to(DTYPE),                                                   # int64 to bfloat16
            torch.where(h > 0, h, -1e4),                                        # where with a number
            torch.gather(h[:picks.shape[0]], 1, (picks % WIDTH).unsqueeze(1).expand(-1, 8).contiguous()),
            F.softplus(h),                                                      # softplus
            h.argmax(-1),                                                       # argmax along rows
            h.view(-1)[:8 * LOGITS].view(8, LOGITS).argmax(-1),                 # a sampler's argmax over a vocabulary
            torch.round(h * 4).sign(),                                          # round and sign
        )
        work = h.clone()
        work.relu_()                                                            # in-place unary
        work.add_(h, alpha=0.5)                                                 # in-place binary
        work.masked_fill_(h < -1.0, 0.0)                                        # in-place masked fill
        cache = self.cache.clone()
        cache[0].copy_(h)                                                       # copy_ into a slice
        cache[1].fill_(0.5)                                                     # fill_
        return (*gathered, work, cache, h.to(copy=True))                      # to.dtype_layout


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return TemplateFamilies().to(DEVICE).eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    ids = torch.randint(0, VOCAB, (TOKENS,), generator=gen, device=DEVICE)
    h = torch.randn(TOKENS, WIDTH, generator=gen, device=DEVICE, dtype=DTYPE)
    image = torch.randn(*IMAGE, generator=gen, device=DEVICE, dtype=DTYPE)
    counts = torch.randint(0, 64, (4096 if BIG else 256,), generator=gen, device=DEVICE)
    picks = torch.randint(0, TOKENS, (TOKENS // 2,), generator=gen, device=DEVICE)
    return ids, h, image, counts, picks

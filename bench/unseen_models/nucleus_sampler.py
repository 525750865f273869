"""A sampling head as generation loops write it: temperature, top-k by topk and a threshold,
top-p by sort, cumsum and a mask scattered back to vocabulary order, multinomial sampling (random
draws), repetition penalty by gather and scatter on the logits of previous tokens."""

import torch
from torch import nn


class NucleusSampler(nn.Module):
    def __init__(self, top_k: int = 50, top_p: float = 0.9, temperature: float = 0.7, penalty: float = 1.2) -> None:
        super().__init__()
        self.top_k, self.top_p, self.temperature, self.penalty = top_k, top_p, temperature, penalty

    def forward(self, logits: torch.Tensor, previous: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.gather(logits, 1, previous)
        scores = torch.where(scores < 0, scores * self.penalty, scores / self.penalty)
        logits = logits.scatter(1, previous, scores)
        logits = logits / self.temperature
        kth = torch.topk(logits, self.top_k)[0][..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        sorted_logits, sorted_idx = torch.sort(logits, descending=False)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove_sorted = cumulative <= (1 - self.top_p)
        remove = remove_sorted.scatter(1, sorted_idx, remove_sorted)
        logits = logits.masked_fill(remove, float("-inf"))
        probs = logits.softmax(dim=-1)
        return torch.multinomial(probs, num_samples=1), probs


def get_model() -> nn.Module:
    return NucleusSampler().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return (torch.randn(16, 32000, generator=g) * 4, torch.randint(0, 32000, (16, 64), generator=g))

"""A sequence model with odd call forms: LSTM, unfold/fold patches, roll/flip, cumprod, einsum,
scalar-first arithmetic, in-place clamp_, boolean masks, bf16 autocast-free mixed dtypes."""
import torch
import torch.nn.functional as F
from torch import nn


class Patches(nn.Module):
    def forward(self, x):
        p = F.unfold(x, kernel_size=3, padding=1, stride=1)  # N, C*9, L
        p = p * torch.linspace(0.5, 1.5, p.shape[1], device=p.device).unsqueeze(-1)
        return F.fold(p, x.shape[-2:], kernel_size=3, padding=1) / 9.0


class SeqMisc(nn.Module):
    def __init__(self):
        super().__init__()
        self.patches = Patches()
        self.proj = nn.Linear(32, 48)
        self.lstm = nn.LSTM(48, 32, batch_first=True, bidirectional=True)
        self.norm = nn.LayerNorm(64, elementwise_affine=False)
        self.gate = nn.Parameter(torch.linspace(-1, 1, 64))

    def forward(self, img, lengths):
        y = self.patches(img)                                  # N, 1, 32, 32
        seq = y.squeeze(1)                                     # N, 32 (time), 32 (feat)
        seq = torch.roll(seq, shifts=1, dims=1) + seq.flip(1) * 0.5
        h, _ = self.lstm(F.hardtanh(self.proj(seq), -2.0, 2.0))
        h = self.norm(h)
        mask = torch.arange(h.shape[1], device=h.device).unsqueeze(0) < lengths.unsqueeze(1)
        h = h.masked_fill(~mask.unsqueeze(-1), 0.0)
        g = torch.sigmoid(self.gate) * h
        g = g.clamp_(-3, 3)
        att = torch.einsum("btd,bsd->bts", g, h).softmax(-1)
        z = 1.0 - torch.einsum("bts,bsd->btd", att, h)
        z = torch.cumprod(1 + 0.01 * z.tanh(), dim=1)
        out = torch.where(z > 1.0, z.log(), torch.zeros_like(z))
        return torch.nan_to_num(out.sum(-1) / lengths.unsqueeze(1).float(), nan=0.0)


def get_model():
    torch.manual_seed(0)
    return SeqMisc().eval()


def get_inputs():
    g = torch.Generator().manual_seed(3)
    return (torch.randn(6, 1, 32, 32, generator=g), torch.tensor([32, 17, 5, 32, 1, 20]))

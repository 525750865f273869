"""A Fourier neural operator layer stack: rfft2, a complex einsum over the kept modes, irfft2, a
pointwise conv, GELU; lifting and projection by Linear over channels-last views."""

import torch
import torch.nn.functional as F
from torch import nn


class SpectralConv(nn.Module):
    def __init__(self, width: int, modes: int) -> None:
        super().__init__()
        self.modes = modes
        scale = 1 / (width * width)
        self.weight = nn.Parameter(scale * torch.randn(width, width, modes, modes, dtype=torch.cfloat))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(b, c, h, w // 2 + 1, dtype=torch.cfloat, device=x.device)
        m = self.modes
        out_ft[:, :, :m, :m] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m, :m], self.weight)
        return torch.fft.irfft2(out_ft, s=(h, w))


class FNO(nn.Module):
    def __init__(self, width: int = 24, modes: int = 8, layers: int = 3) -> None:
        super().__init__()
        self.lift = nn.Linear(3, width)
        self.spectral = nn.ModuleList(SpectralConv(width, modes) for _ in range(layers))
        self.pointwise = nn.ModuleList(nn.Conv2d(width, width, 1) for _ in range(layers))
        self.project = nn.Linear(width, 1)

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        x = self.lift(a).permute(0, 3, 1, 2)
        for spectral, pointwise in zip(self.spectral, self.pointwise, strict=True):
            x = F.gelu(spectral(x) + pointwise(x))
        return self.project(x.permute(0, 2, 3, 1)).squeeze(-1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return FNO().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.rand(4, 32, 32, 3, generator=torch.Generator().manual_seed(1)),)

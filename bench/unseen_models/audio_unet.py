"""A small 1-D U-Net for audio: conv1d, GroupNorm on 3-D input, GLU, nearest upsampling, reflect pad,
ConvTranspose1d, skip concatenation, softplus and a tanh output."""
import torch
import torch.nn.functional as F
from torch import nn


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, 2 * cout, 5, padding=0)
        self.norm = nn.GroupNorm(4, cout)

    def forward(self, x):
        x = F.pad(x, (2, 2), mode="reflect")
        x = F.glu(self.conv(x), dim=1)
        x = F.silu(self.norm(x))
        return F.max_pool1d(x, 2)


class Up(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(4, cout)
        self.act = nn.Mish()

    def forward(self, x, skip):
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        x = torch.cat([x, skip], dim=1)
        return self.act(self.norm(self.conv(x)))


class AudioUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Conv1d(1, 16, 7, padding=3)
        self.d1, self.d2 = Down(16, 32), Down(32, 64)
        self.mid = nn.Sequential(nn.Conv1d(64, 64, 3, padding=1), nn.ELU(), nn.Dropout(0.1))
        self.u2, self.u1 = Up(64 + 32, 32), Up(32 + 16, 16)
        self.out = nn.ConvTranspose1d(16, 1, 4, stride=1, padding=1)
        self.scale = nn.Parameter(torch.tensor(0.5))

    def forward(self, wav):
        x0 = F.leaky_relu(self.inp(wav), 0.2)
        x1 = self.d1(x0)
        x2 = self.d2(x1)
        m = self.mid(x2)
        y = self.u2(m, x1)
        y = self.u1(y, x0)
        y = self.out(y)[..., : wav.shape[-1]]
        gain = F.softplus(self.scale) + 1e-3
        return torch.tanh(y * gain) + 0.05 * wav.sign() * wav.abs().sqrt()


def get_model():
    torch.manual_seed(0)
    return AudioUNet().eval()


def get_inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(4, 1, 2048, generator=g),)

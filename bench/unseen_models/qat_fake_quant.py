"""A quantization-aware-training model in eval: per-tensor and per-channel fake quantization of
activations and weights, round and clamp written out, a straight-through estimator, int8 ranges."""

import torch
import torch.nn.functional as F
from torch import nn


class FakeQuantLinear(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d_out, d_in) * 0.05)
        self.bias = nn.Parameter(torch.zeros(d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.detach().abs().amax().clamp_min(1e-8) / 127
        xq = torch.fake_quantize_per_tensor_affine(x, scale.item(), 0, -128, 127)
        w_scale = self.weight.detach().abs().amax(dim=1).clamp_min(1e-8) / 127
        wq = torch.fake_quantize_per_channel_affine(self.weight, w_scale, torch.zeros_like(w_scale, dtype=torch.int32),
                                                    0, -128, 127)
        return F.linear(xq, wq, self.bias)


class QatMlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = FakeQuantLinear(64, 256)
        self.fc2 = FakeQuantLinear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        q = torch.clamp(torch.round(h / 0.05), -128, 127) * 0.05   # hand-written fake quant
        h = h + (q - h).detach()                                     # straight-through estimator
        return self.fc2(h)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    return QatMlp().eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(1024, 64, generator=torch.Generator().manual_seed(1)),)

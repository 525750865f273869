"""A small CNN prepared for quantization-aware training with torch.ao's own modules: per-channel
fake quantization of the convolution and linear weights, per-tensor of the activations (scale and
int32 zero point held as tensors), observers calibrated on a few batches and then frozen."""

import torch
from torch import nn
from torch.ao import quantization as tq


class FakeQuantCnn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant_in = tq.FakeQuantize.with_args(observer=tq.MovingAverageMinMaxObserver, quant_min=0,
                                                  quant_max=255, dtype=torch.quint8)()
        self.conv1, self.conv2 = nn.Conv2d(3, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1, stride=2)
        self.fc = nn.Linear(64, 10)
        self.weight_quant = nn.ModuleList(tq.default_per_channel_weight_fake_quant() for _ in range(3))
        self.act_quant = nn.ModuleList(tq.default_fake_quant() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant_in(x)
        w1, w2, w3 = (q(m.weight) for q, m in zip(self.weight_quant, (self.conv1, self.conv2, self.fc), strict=True))
        x = self.act_quant[0](torch.relu(nn.functional.conv2d(x, w1, self.conv1.bias, padding=1)))
        x = self.act_quant[1](torch.relu(nn.functional.conv2d(x, w2, self.conv2.bias, padding=1, stride=2)))
        x = x.mean(dim=(2, 3))
        return self.act_quant[2](nn.functional.linear(x, w3, self.fc.bias))


def get_model() -> nn.Module:
    torch.manual_seed(0)
    model = FakeQuantCnn()
    with torch.no_grad():
        for seed in range(4):  # calibrate the observers, then freeze them as QAT does before export
            model(torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(100 + seed)))
    model.apply(tq.disable_observer)
    return model.eval()


def get_inputs() -> tuple[torch.Tensor, ...]:
    return (torch.randn(16, 3, 32, 32, generator=torch.Generator().manual_seed(1)),)

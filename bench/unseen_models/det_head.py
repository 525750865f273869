"""A small detector: a MobileNet-style backbone (depthwise convolutions, BatchNorm, ReLU6, a
squeeze-excite gate with hardsigmoid), bilinear upsampling with aligned corners, anchors from a
meshgrid, box decoding by sigmoid and exp, lerp, addcmul, normalize, and a top-k with gather."""

import torch
import torch.nn.functional as F
from torch import nn


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce = nn.Conv2d(channels, channels // 4, 1)
        self.expand = nn.Conv2d(channels // 4, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.expand(F.relu(self.reduce(s))))


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.dw = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pw = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.se = SqueezeExcite(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu6(self.bn1(self.dw(x)))
        return self.se(F.hardswish(self.bn2(self.pw(x))))


class DetHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU6())
        self.b1, self.b2 = Block(16, 32, 2), Block(32, 64, 2)
        self.lateral = nn.Conv2d(32, 64, 1)
        self.head = nn.Conv2d(64, 6, 1)
        self.temperature = nn.Parameter(torch.tensor(0.7))

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        c1 = self.b1(self.stem(image))
        c2 = self.b2(c1)
        up = F.interpolate(c2, size=c1.shape[-2:], mode="bilinear", align_corners=True)
        fused = torch.lerp(self.lateral(c1), up, 0.3)
        out = self.head(fused)                                  # N, 6, H, W
        n, _, h, w = out.shape
        ys, xs = torch.meshgrid(torch.arange(h, dtype=out.dtype), torch.arange(w, dtype=out.dtype), indexing="ij")
        centre = torch.stack([xs, ys], 0).unsqueeze(0)          # 1, 2, H, W
        xy = (centre + out[:, 0:2].sigmoid()) * 4.0
        wh = torch.exp(out[:, 2:4].clamp(max=4.0)) * 4.0
        boxes = torch.cat([xy - wh / 2, xy + wh / 2], 1).clamp(min=0.0, max=float(4 * w))
        score = torch.addcmul(out[:, 4].sigmoid(), out[:, 5].tanh(), self.temperature.expand(h, w), value=0.1)
        flat = score.flatten(1)
        top, index = flat.topk(10, dim=1)
        picked = boxes.flatten(2).gather(2, index.unsqueeze(1).expand(n, 4, 10))
        return torch.cat([F.normalize(picked, dim=1).flatten(1), top.softmax(1)], 1)


def get_model() -> nn.Module:
    torch.manual_seed(0)
    model = DetHead().eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return model


def get_inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(5)
    return (torch.randn(4, 3, 128, 128, generator=g),)

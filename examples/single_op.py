"""One ``nn.Module`` wrapping one operator, the kind of model kernel benchmarks are made of.

``KF_EXAMPLE_VARIANT`` picks the operator (a key of :data:`OPS`, default ``swish``) and
``KF_EXAMPLE_MB`` the input's size in MiB (default 1; the field's benchmarks use 256). Inputs are
float32, laid out as the operator's family usually sees them: ``[rows, 4096]`` rows for the
elementwise and row ops, ``[N, 64, H, W]`` images for the norms and pooling.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

from examples.sizing import generator

ROW = 4096
CHANNELS = 64


Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]


class SingleOp(nn.Module):
    """``fn(x)``, with the norm's parameters where the operator has some."""

    def __init__(self, name: str, fn: Forward, norm: nn.Module | None) -> None:
        super().__init__()
        self.name, self.fn, self.norm = name, fn, norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x)


def _normalise(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    norm = module.norm
    assert isinstance(norm, nn.Module)
    return norm(x)


def _gelu_tanh_written_out(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


#: name -> (forward, norm module or None, input kind: "rows" or "images")
OPS: dict[str, tuple[Forward, Callable[[], nn.Module] | None, str]] = {
    "relu": (lambda m, x: torch.relu(x), None, "rows"),
    "sigmoid": (lambda m, x: torch.sigmoid(x), None, "rows"),
    "tanh": (lambda m, x: torch.tanh(x), None, "rows"),
    "softmax": (lambda m, x: torch.softmax(x, dim=-1), None, "rows"),
    "log_softmax": (lambda m, x: torch.log_softmax(x, dim=-1), None, "rows"),
    "swish": (lambda m, x: x * torch.sigmoid(x), None, "rows"),
    "gelu": (lambda m, x: nn.functional.gelu(x), None, "rows"),
    "gelu_tanh_written_out": (lambda m, x: _gelu_tanh_written_out(x), None, "rows"),
    "sum_dim": (lambda m, x: x.sum(dim=1), None, "images"),
    "mean_dim": (lambda m, x: x.mean(dim=1), None, "images"),
    "avg_pool2d": (lambda m, x: nn.functional.avg_pool2d(x, 3, stride=2, padding=1), None, "images"),
    "batch_norm": (_normalise, lambda: nn.BatchNorm2d(CHANNELS), "images"),
    "group_norm": (_normalise, lambda: nn.GroupNorm(8, CHANNELS), "images"),
    "layer_norm": (_normalise, lambda: nn.LayerNorm(ROW), "rows"),
    "rms_norm": (_normalise, lambda: nn.RMSNorm(ROW), "rows"),
}


def variant() -> str:
    name = os.environ.get("KF_EXAMPLE_VARIANT", "swish")
    if name not in OPS:
        raise ValueError(f"KF_EXAMPLE_VARIANT={name!r} is not one of {', '.join(OPS)}")
    return name


def get_model() -> nn.Module:
    torch.manual_seed(0)
    name = variant()
    fn, norm, _ = OPS[name]
    return SingleOp(name, fn, norm() if norm else None).eval()


def get_inputs() -> torch.Tensor:
    elements = int(float(os.environ.get("KF_EXAMPLE_MB", "1")) * 2**20) // 4
    if OPS[variant()][2] == "rows":
        return torch.randn(max(elements // ROW, 1), ROW, generator=generator())
    side = 64
    return torch.randn(max(elements // (CHANNELS * side * side), 1), CHANNELS, side, side, generator=generator())

"""Module classes with the names and forward semantics of the ones the offline catalog lists."""

from __future__ import annotations

import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class Gemma3RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        output = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)


class Qwen3_5MoeRMSNormGated(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        hidden_states = self.weight * hidden_states.to(input_dtype)
        hidden_states = hidden_states * nn.functional.silu(gate.to(torch.float32))
        return hidden_states.to(input_dtype)


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return nn.functional.silu(x[..., :d]) * x[..., d:]


class GeluAndMul(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(gate) * up


class GroupNormSiLU(nn.Module):
    def __init__(self, groups: int, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=eps)
        nn.init.normal_(self.norm.weight)
        nn.init.normal_(self.norm.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(self.norm(x))


class Swish(nn.Module):
    """``x * sigmoid(x)`` written out, as models that predate nn.SiLU do."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class GeluTanhWrittenOut(nn.Module):
    """The tanh GELU in Python: eager runs it as eight passes over memory."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


class SlicedBiasSiLU(nn.Module):
    """A bias taken as a view of a longer parameter (a slice, then a view to [1, C, 1, 1]), then SiLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels + 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.silu(x + self.bias[3:].view(1, -1, 1, 1))


class BiasReLU(nn.Module):
    """A per-channel bias (a parameter, broadcast) then an activation."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bias)


class UpcastResidual(nn.Module):
    """Half-precision inputs computed in fp32 and cast back: ``(a.float() * 2 + b.float()).to(a.dtype)``."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a.float() * 2.0 + b.float()).to(a.dtype)


class SumThenScale(nn.Module):
    """Reductions over two dims in one chain: neither elementwise nor rows along one dim, which the fuser sweeps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=0, keepdim=True) * x.sum(dim=1, keepdim=True)

"""A module card's program as JSON: calls in order, inputs by the card's indices, or no graph at all."""

from __future__ import annotations

import json

import torch
from torch import nn

from capture_service.program_graph import MAX_NODES, program_graph
from packager.variant import module_variant_key


def describe(module: nn.Module, *args: torch.Tensor) -> dict | None:
    with torch.no_grad():
        program = torch.export.export(module, args)
    return program_graph(program, json.loads(module_variant_key(module, list(args), {}).template))


class ScaledBias(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(8))
        self.register_buffer("scale", torch.full((8,), 2.0))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * self.scale + self.bias).to(torch.float16) - y


def test_calls_read_forward_tensors_and_state_by_the_cards_input_indices() -> None:
    graph = describe(ScaledBias(), torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float16))
    assert graph is not None
    # Card inputs: x, y (forward, in order), then bias, scale (parameters, then buffers).
    assert [(n["op"], n["args"][:2]) for n in graph["nodes"]] == [
        ("aten::mul.Tensor", [{"tensor": 0}, {"tensor": 3}]),
        ("aten::add.Tensor", [{"node": "mul"}, {"tensor": 2}]),
        ("aten::to.dtype", [{"node": "add"}, {"dtype": "float16"}]),
        ("aten::sub.Tensor", [{"node": "to"}, {"tensor": 1}]),
    ]
    assert [(n["dtype"], n["shape"]) for n in graph["nodes"]][-2:] == [("float16", [4, 8]), ("float16", [4, 8])]
    assert graph["outputs"] == [{"node": "sub"}]
    json.dumps(graph)  # plain JSON all through


def test_a_program_that_writes_a_buffer_has_no_graph() -> None:
    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.add_(1)
            return x * 2

    assert describe(Counter(), torch.randn(3)) is None


def test_a_program_longer_than_the_limit_has_no_graph() -> None:
    class Long(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(MAX_NODES + 1):
                x = x + 1
            return x

    assert describe(Long(), torch.randn(3)) is None
    assert describe(nn.ReLU(), torch.randn(3)) == {
        "nodes": [{"name": "relu", "op": "aten::relu", "args": [{"tensor": 0}], "kwargs": {}, "dtype": "float32",
                   "shape": [3]}],
        "outputs": [{"node": "relu"}],
    }

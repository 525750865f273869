"""bench/compiled_choices.py: each traced call of a cast's op under cast.compile, and each card's reason to miss."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.compiled_choices import traced_calls
from packager.format import build_cast
from tests.packager.conftest import MODEL, RELU, compile_kernel, entry, relu_card

NET = """
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + torch.relu(x.t().contiguous().t())  # the second reads a column-major copy


def get_model():
    return Net()


def get_inputs():
    return (torch.randn(4, 8),)
"""


def test_a_call_whose_strides_no_card_has_is_listed_with_the_reason(tmp_path: Path) -> None:
    relu = relu_card(torch.randn(4, 8))
    cast = tmp_path / "net.cast"
    build_cast(cast, MODEL, [entry(relu, RELU, compile_kernel(RELU, tmp_path, "relu"))], [])
    (tmp_path / "net.py").write_text(NET)
    torch._dynamo.reset()
    seen = traced_calls(str(tmp_path / "net.py"), str(cast))
    by_strides = {(strides, chosen): dict(misses) for (op, _, strides, _, chosen, misses) in seen
                  if op == "aten::relu.default"}
    assert by_strides[((8, 1), relu.id)] == {}  # the card's own layout: its kernel is chosen
    assert by_strides[((1, 4), "")] == {relu.id: "stride"}  # a column-major copy: no card, and why

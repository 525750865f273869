"""Model spec files for the capture tests, written into a temporary folder."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

TINY_MODEL = """
import torch
from torch import nn


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.proj = nn.Linear(8, 4)

    def forward(self, x, scale=1.0):
        return torch.softmax(self.proj(torch.relu(self.norm(x))) * scale, dim=-1)


def get_model():
    torch.manual_seed(0)
    return Tiny().eval()


def get_inputs():
    torch.manual_seed(1)
    return torch.randn(3, 8)
"""


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[str, str], Path]:
    """Writes ``source`` as ``name`` under a temporary folder and returns its path."""

    def write(source: str, name: str = "model.py") -> Path:
        path = tmp_path / "specs" / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def tiny_spec(write_spec: Callable[[str, str], Path]) -> Path:
    return write_spec(TINY_MODEL, "tiny.py")

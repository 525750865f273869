import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from capture_service.traced import trace_compiled, traced_key

GROUP_NORM = "aten::native_group_norm.default"
ROOT = Path(__file__).resolve().parents[2]


class TransposedResidual(nn.Module):
    """An attention-style output (a transposed view reshaped to NCHW) added to its input, then
    convolution and group norm: eager's cpu convolution returns the sum's layout contiguous, the
    traced graph keeps it channels-last up to the norm."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        mixed = self.proj(x.reshape(b, c, h * w).transpose(1, 2)).transpose(1, 2).reshape(b, c, h, w)
        return self.norm(self.conv(mixed + x))


def test_traced_key_reads_a_fake_tensors_layout_and_assumes_alignment() -> None:
    with FakeTensorMode():
        x = torch.empty(2, 8, 4, 4).to(memory_format=torch.channels_last)
        key = traced_key("aten::add.Tensor", (x[1:], 1.5), {})
    assert key is not None and key.op == "aten::add.Tensor"
    (signature,) = key.tensors
    assert signature.shape == (1, 8, 4, 4) and signature.stride == (128, 1, 32, 8)
    # 128 floats in: the start of a 16-byte line, which is all of the offset a kernel can tell
    assert signature.storage_offset == 0 and signature.aligned16 and signature.dtype == "float32"
    assert traced_key("aten::add.Tensor", (object(),), {}) is None  # no encoding: no key


def test_the_traced_graph_gives_the_norm_a_layout_eager_never_ran() -> None:
    model, x = TransposedResidual(), torch.randn(1, 8, 4, 4)
    eager_layouts = []

    def record(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        eager_layouts.append(args[0].stride())

    model.norm.register_forward_pre_hook(record)
    with torch.inference_mode():
        counts = trace_compiled(model, (x,), {}, [GROUP_NORM, "aten::not_an_op.default"])
        model(x)
    assert eager_layouts[-1] == (128, 16, 4, 1)
    ((key, calls),) = counts.items()
    assert key.op == GROUP_NORM and calls == 1
    assert key.tensors[0].stride == (128, 1, 32, 8)


@torch.library.custom_op("kforge_test::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    """An op with no fake implementation: eager runs it, tracing cannot."""
    return x.clone()


class Untraceable(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opaque(x) + 1


def test_a_model_that_cannot_be_traced_raises() -> None:
    with pytest.raises(Exception, match="opaque"):
        trace_compiled(Untraceable(), (torch.ones(2),), {}, ["aten::add.Tensor"])


def test_a_max_pool_traces_in_a_process_that_never_compiled(tmp_path: Path) -> None:
    """Inductor's max-pool decomposition reads ``torch._inductor.lowering``, which only a real
    compilation imports: in a fresh process the trace of a pooling model raised on it."""
    script = tmp_path / "pool.py"
    script.write_text(
        "import torch, torch.nn.functional as F\n"
        "from capture_service.traced import trace_compiled\n"
        "class Pool(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return F.max_pool1d(x.relu(), 2)\n"
        "with torch.inference_mode():\n"
        "    counts = trace_compiled(Pool(), (torch.randn(2, 4, 16),), {}, ['aten::max_pool1d'])\n"
        "print(sorted((key.op, calls) for key, calls in counts.items()))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[('aten::max_pool1d', 1)]"

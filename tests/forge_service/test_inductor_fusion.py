"""Which kernels compiled graphs leave to inductor before measuring: pointwise work, read from the card."""

from __future__ import annotations

from pathlib import Path

import torch

from capture_service.program_graph import program_graph
from forge_service.inductor_fusion import fused_by_inductor, is_pointwise, is_whole_forward
from forge_service.packaging import Pruning, _leave_pointwise_to_inductor, kernel_key
from packager.format import build_cast
from tests.packager.conftest import MODEL, RELU, SOFTMAX, compile_kernel, entry, relu_card, softmax_card


def test_torch_s_pointwise_ops_and_dtype_conversions_are_pointwise_and_reductions_are_not() -> None:
    for op in ("aten::mul.Tensor", "aten::add.Tensor", "aten::silu.default", "aten::tanh.default",
               "aten::where.self", "aten::to.dtype", "aten::_to_copy.default"):
        assert is_pointwise(op), op
    for op in ("aten::group_norm.default", "aten::_softmax.default", "aten::mean.dim", "aten::mm.default",
               "aten::no_such_op.default", "torch.nn.modules.activation.SiLU", ""):
        assert not is_pointwise(op), op


class Swish(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class RowNorm(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _module_card(module: torch.nn.Module, path: str = "block") -> dict[str, object]:
    x = torch.randn(4, 8)
    program = torch.export.export(module, (x,))
    graph = program_graph(program, {"args": [{"tensor": 0}], "kwargs": {}})
    assert graph is not None
    return {"kind": "module", "op": type(module).__qualname__, "module_graph": graph, "module_paths": [path]}


def test_a_module_card_is_pointwise_work_only_when_its_whole_forward_is() -> None:
    assert fused_by_inductor(_module_card(Swish()))
    assert not fused_by_inductor(_module_card(RowNorm()))  # a mean: a reduction inductor cannot fuse away
    assert not fused_by_inductor({"kind": "module", "op": "Opaque", "module_graph": None})  # nothing described
    assert fused_by_inductor({"kind": "aten", "op": "aten::relu.default"})
    assert not fused_by_inductor({"kind": "aten", "op": "aten::_softmax.default"})


def test_the_model_s_own_forward_is_left_to_the_measurement_even_when_pointwise() -> None:
    # the root module's card is the whole compiled graph: no kernel around it for inductor to fuse into
    assert not fused_by_inductor(_module_card(Swish(), path=""))
    assert is_whole_forward(_module_card(Swish(), path=""))
    assert not is_whole_forward(_module_card(Swish(), path="blocks.0.act"))
    # a module class used both as the model and inside it keeps the fusion rule
    both = {**_module_card(Swish(), path=""), "module_paths": ["", "inner"]}
    assert fused_by_inductor(both) and not is_whole_forward(both)
    assert not is_whole_forward({"kind": "aten", "op": "aten::relu.default", "module_paths": [""]})


def test_pointwise_kernels_leave_compiled_modes_only_and_do_not_count_as_measured_prunings(tmp_path: Path) -> None:
    x = torch.randn(4, 8)
    relu, softmax = relu_card(x), softmax_card(x)
    kernels = [entry(relu, RELU, compile_kernel(RELU, tmp_path, "relu")),
               entry(softmax, SOFTMAX, compile_kernel(SOFTMAX, tmp_path, "softmax"))]
    manifest = build_cast(tmp_path / "m.cast", MODEL, kernels, [])
    pruning = Pruning(measured=("compiled", "cuda_graphs"))
    assert _leave_pointwise_to_inductor(manifest, ["compiled", "cuda_graphs"], pruning)
    for mode in ("compiled", "cuda_graphs"):
        assert list(pruning.excluded[mode]) == [kernel_key("aten::relu.default", relu.id)]
        assert pruning.reason(mode, "aten::relu.default", relu.id).startswith("left to inductor: pointwise")
        assert pruning.reason(mode, "aten::_softmax.default", softmax.id) == ""
        assert pruning.measured_exclusions(mode) == 0
    assert pruning.excluded["eager"] == {}  # eager calls keep the kernel
    assert not _leave_pointwise_to_inductor(manifest, [], Pruning())  # --no-compile-baseline: nothing to leave

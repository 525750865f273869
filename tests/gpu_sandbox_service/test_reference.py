"""A module card's eager reference: the exported program's ops, without export's per-call input checks."""

from pathlib import Path

import pytest
import torch

from gpu_sandbox_service.harness.reference import lean_module


class _RMSNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(64) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.float()
        v = v * torch.pow(v.pow(2).mean(-1, keepdim=True) + 1e-6, -0.5)
        return (v * self.weight.float()).type_as(x)


def _checks(module: torch.fx.GraphModule) -> list[str]:
    return [str(n.target) for n in module.graph.nodes
            if n.target == "_guards_fn" or n.target is torch.ops.aten._assert_tensor_metadata.default]


def test_the_reference_runs_the_programs_ops_without_its_input_checks() -> None:
    module, x = _RMSNorm(), torch.randn(4, 64, dtype=torch.bfloat16)
    program = torch.export.export(module, (x,))
    assert _checks(program.module()), "export adds the checks this reference leaves out"
    lean = lean_module(program)
    assert isinstance(lean, torch.fx.GraphModule) and not _checks(lean)
    hooks = [getattr(h, "__name__", "") for h in lean._forward_pre_hooks.values()]
    assert "_check_input_constraints_pre_hook" not in hooks
    assert torch.equal(lean(x), module(x))


def test_a_call_that_does_not_fit_the_program_still_fails() -> None:
    module = _RMSNorm()
    lean = lean_module(torch.export.export(module, (torch.randn(4, 64),)))
    with pytest.raises(RuntimeError):
        lean(torch.randn(4, 32))  # the weight no longer broadcasts


def test_a_saved_program_calls_through_no_hook(tmp_path: Path) -> None:
    module, x = _RMSNorm(), torch.randn(4, 64, dtype=torch.bfloat16)
    torch.export.save(torch.export.export(module, (x,)), tmp_path / "module.pt2")
    program = torch.export.load(tmp_path / "module.pt2")
    assert program.module()._forward_hooks, "export wraps each call in hooks this reference leaves out"
    lean = lean_module(program)
    # any hook sends every call through nn.Module's slow path, which costs more than a small module's ops
    assert not (lean._forward_pre_hooks or lean._forward_hooks or lean._forward_hooks_always_called)
    assert torch.equal(lean(x), module(x))

"""A module card's program called on its flat inputs: the same outputs, none of export's per-call pytree code."""

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_leaves

from gpu_sandbox_service.harness.flat_program import FlatProgram
from gpu_sandbox_service.harness.reference import lean_module


@torch.library.custom_op("kforge_flat_program_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class _Gate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x: torch.Tensor, *, up: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gated = torch.nn.functional.silu(x * self.weight) * up + bias
        return gated, gated.sum(-1)


class _Twice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.kforge_flat_program_test.twice(x) + 1


def _saved_lean(tmp_path: Path, module: torch.nn.Module, args: tuple[torch.Tensor, ...],
                kwargs: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
    """The lean program as the sandbox has it: exported, saved, loaded."""
    with torch.no_grad():
        torch.export.save(torch.export.export(module, args, kwargs), tmp_path / "module.pt2")
    return lean_module(torch.export.load(tmp_path / "module.pt2"))


def _tensors(bound: Callable[[], tuple[object, ...]]) -> list[torch.Tensor]:
    return [t for t in bound() if isinstance(t, torch.Tensor)]


def _gate_call() -> tuple[_Gate, tuple[torch.Tensor], dict[str, torch.Tensor]]:
    return _Gate(), (torch.randn(4, 16),), {"up": torch.randn(4, 16), "bias": torch.randn(16)}


def test_the_forward_takes_flat_inputs_and_calls_each_op_directly(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    code = flat.module.code
    assert "pytree" not in code, "nothing left to flatten or rebuild per call"
    assert "torch.ops.aten" not in code, "each aten op called through its dispatcher entry"
    bound = flat.bind(args, dict(reversed(kwargs.items())), None)  # keyword order does not matter
    with torch.no_grad():
        expected = tree_leaves(module(*args, **kwargs))
    outputs = _tensors(bound)
    assert len(outputs) == len(expected)
    assert all(torch.equal(out, ref) for out, ref in zip(outputs, expected, strict=True))


def test_the_bound_call_reads_its_inputs_at_each_call(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    bound = flat.bind(args, kwargs, None)
    bound()
    args[0].normal_()  # the sandbox loads each input set into the buffers it bound
    with torch.no_grad():
        assert torch.equal(_tensors(bound)[0], module(*args, **kwargs)[0])


def test_the_bound_call_is_a_module_call_as_the_live_ones_is(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    bound = flat.bind(args, kwargs, None)
    seen: list[torch.nn.Module] = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, _a, _o: seen.append(m))
    try:
        bound()
    finally:
        handle.remove()
    assert len(seen) == 1, "nn.Module.__call__ runs once, as for the live module"


def test_the_cards_state_replaces_the_exported_one(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    other = _Gate()
    bound = flat.bind(args, kwargs, [(n, p.detach()) for n, p in other.named_parameters()])
    with torch.no_grad():
        assert torch.equal(_tensors(bound)[0], other(*args, **kwargs)[0])
        exported = _tensors(flat.bind(args, kwargs, None))[0]
        assert torch.equal(exported, module(*args, **kwargs)[0]), "the program keeps its own state"


def test_an_op_with_a_python_dispatch_path_keeps_its_own_call(tmp_path: Path) -> None:
    module, x = _Twice(), torch.randn(8)
    flat = FlatProgram.of(_saved_lean(tmp_path, module, (x,)))
    assert flat is not None
    assert "torch.ops.kforge_flat_program_test.twice" in flat.module.code
    assert "torch.ops.aten" not in flat.module.code
    assert torch.equal(_tensors(flat.bind([x], {}, None))[0], module(x))


def test_a_program_that_keeps_hooks_is_called_whole(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    lean = _saved_lean(tmp_path, module, args, kwargs)
    lean.register_forward_pre_hook(lambda m, a: None)
    assert FlatProgram.of(lean) is None


def test_a_call_that_does_not_fit_the_programs_arguments_fails_when_bound(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    with pytest.raises(TypeError, match="positional arguments"):
        flat.bind([*args, args[0]], kwargs, None)
    with pytest.raises(TypeError, match="keywords"):
        flat.bind(args, {"up": kwargs["up"]}, None)


def test_torch_compile_traces_the_bound_call_whole(tmp_path: Path) -> None:
    module, args, kwargs = _gate_call()
    flat = FlatProgram.of(_saved_lean(tmp_path, module, args, kwargs))
    assert flat is not None
    bound = flat.bind(args, kwargs, None)
    compiled = torch.compile(bound, backend="eager", fullgraph=True)  # fullgraph: fails on anything it cannot trace
    assert all(torch.equal(c, b) for c, b in zip(_tensors(compiled), _tensors(bound), strict=True))

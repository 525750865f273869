"""A module card's eager reference: the exported program's ops, without export's per-call input checks,
on the card's state."""

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch.utils._pytree import tree_leaves

from gpu_sandbox_service.cardkit import tensor_spec
from gpu_sandbox_service.harness.reference import Reference, lean_module
from kforge_domain.card import OperatorCard
from packager.variant import encode_call, module_call_kwargs, module_variant_key


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


class _Stats(torch.nn.Module):
    """Buffers (one not persistent), a constant built in the forward, a plain attribute, nested outputs."""

    shift: torch.Tensor
    ramp: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.eps = 1e-5
        self.scale = torch.nn.Parameter(torch.rand(64) + 0.5)
        self.register_buffer("shift", torch.randn(64))
        self.register_buffer("ramp", torch.linspace(0, 1, 64), persistent=False)

    def forward(self, x: torch.Tensor) -> dict[str, object]:
        centred = x - x.mean(-1, keepdim=True) + torch.tensor(0.25)
        y = centred * torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * self.scale + self.shift
        return {"y": y * self.ramp, "stats": (y.amax(-1), y.amin(-1))}


class _Scaled(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(64) + 0.5)

    def forward(self, x: torch.Tensor, *, gate: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
        return torch.nn.functional.silu(gate) * x * self.weight + offset


def _norm_then_silu() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.SiLU())


_CALLS = {
    "parameters": (_RMSNorm, lambda: ([torch.randn(4, 64, dtype=torch.bfloat16)], {})),
    "buffers, constants, nested outputs": (_Stats, lambda: ([torch.randn(4, 64)], {})),
    "keyword arguments": (_Scaled, lambda: ([torch.randn(4, 64)], {"gate": torch.randn(4, 64), "offset": 0.5})),
    "submodules": (_norm_then_silu, lambda: ([torch.randn(4, 64)], {})),
}


def _module_card(tmp_path: Path, exported: torch.nn.Module, live: torch.nn.Module, args: Sequence[object],
                 kwargs: dict[str, object]) -> tuple[OperatorCard, Path, list[torch.Tensor]]:
    """The card of ``live``'s call with ``exported``'s program, saved and loaded as capture and the
    sandbox do, and the call's tensors (forward tensors, then ``live``'s state)."""
    with torch.no_grad():
        torch.export.save(torch.export.export(exported, tuple(args), kwargs), tmp_path / "module.pt2")
        outputs = [t for t in tree_leaves(live(*args, **kwargs)) if isinstance(t, torch.Tensor)]
    key = module_variant_key(live, args, kwargs)
    tensors = [t.detach() for t in encode_call(args, module_call_kwargs(live, kwargs))[1]]
    card = OperatorCard(id=key.id, kind="module", op=key.op, device="cpu", key=key.to_json(),
                        inputs=[tensor_spec(t) for t in tensors], outputs=[tensor_spec(t) for t in outputs])
    return card, tmp_path / "module.pt2", tensors


@pytest.mark.parametrize("kind", list(_CALLS))
def test_a_module_cards_reference_computes_what_the_live_module_does(tmp_path: Path, kind: str) -> None:
    make, call = _CALLS[kind]
    exported, live = make(), make()
    with torch.no_grad():  # the card's state, not the exported one (non-persistent buffers stay the program's)
        for tensor in live.state_dict().values():
            tensor.copy_(torch.randn_like(tensor))
    args, kwargs = call()
    card, program, tensors = _module_card(tmp_path, exported, live, args, kwargs)
    with torch.no_grad():
        expected = [t for t in tree_leaves(live(*args, **kwargs)) if isinstance(t, torch.Tensor)]
    outputs = Reference(card, program)(tensors)
    assert len(outputs) == len(expected)
    assert all(torch.equal(out, ref) for out, ref in zip(outputs, expected, strict=True))


def test_a_module_cards_eager_call_returns_the_flat_outputs(tmp_path: Path) -> None:
    module = _Stats()
    card, program, tensors = _module_card(tmp_path, module, module, [torch.randn(4, 64)], {})
    outputs = Reference(card, program).eager_call(tensors)()
    assert isinstance(outputs, tuple) and len(outputs) == 3, "the dict and tuple of the live output, flattened"

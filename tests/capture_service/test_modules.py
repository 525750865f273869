import io

import torch
from torch import nn

from capture_service.modules import NO_WORK, ModuleRecorder, export_program, forward_call
from capture_service.recorder import MUTATES, OperatorRecorder
from capture_service.records import SamplePolicy
from packager.variant import module_variant_key


class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = RMSNorm(8)
        self.norm_act = nn.Sequential(nn.GroupNorm(2, 4), nn.SiLU())
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.GELU())
        self.relu = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        h = self.norm(h)
        h = self.norm_act(h.reshape(2, 4, 4, 2)).reshape(2, 4, 8)
        return self.drop(self.relu(self.mlp(h)))


def _capture(model: nn.Module, x: torch.Tensor) -> ModuleRecorder:
    policy = SamplePolicy(2, 1 << 24)
    operators = OperatorRecorder(policy)
    modules = ModuleRecorder(model, operators, policy)
    operators.observer = modules
    with torch.inference_mode(), modules, operators:
        model(x)
    return modules


def test_leaf_and_fusable_modules_become_cards_and_others_do_not() -> None:
    modules = _capture(Block().eval(), torch.randn(2, 4, 8))
    cards = {v.record.op.rsplit(".", 1)[1]: v for v in modules.card_variants()}
    assert sorted(cards) == ["Dropout", "GELU", "GroupNorm", "Linear", "RMSNorm", "ReLU", "Sequential", "SiLU"]
    assert cards["Sequential"].record.module_paths == ["norm_act"] and not cards["Sequential"].leaf
    norm = cards["RMSNorm"].record
    assert norm.call_count == 2 and norm.module_paths == ["norm"] and norm.optimisable
    assert "Block" not in {v.record.op.rsplit(".", 1)[1] for v in modules.card_variants()}
    assert cards["Linear"].record.vendor_op and not cards["GroupNorm"].record.vendor_op
    assert cards["ReLU"].record.reason == MUTATES
    assert cards["Dropout"].record.reason == NO_WORK


def test_module_key_and_sample_follow_the_template() -> None:
    model = Block().eval()
    x = torch.randn(2, 4, 8)
    modules = _capture(model, x)
    (norm,) = [v for v in modules.card_variants() if v.record.op.endswith("RMSNorm")]
    assert norm.record.key == module_variant_key(model.norm, [x], {})
    first = norm.record.samples[0]
    assert len(first.inputs) == 2 and torch.equal(first.inputs[0], x)
    assert torch.equal(first.inputs[1], model.norm.weight.detach())
    args, kwargs = forward_call(norm.template, first.inputs)
    assert torch.allclose(model.norm(*args, **kwargs), first.outputs[0])


def test_exported_program_reproduces_the_module() -> None:
    modules = _capture(Block().eval(), torch.randn(2, 4, 8))
    (fused,) = [v for v in modules.card_variants() if v.record.op.endswith("Sequential")]
    program = torch.export.load(io.BytesIO(export_program(fused)))
    sample = fused.record.samples[0]
    assert torch.allclose(program.module()(sample.inputs[0].clone()), sample.outputs[0], atol=1e-6)


def test_a_failing_forward_leaves_no_dangling_frames() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.norm(x) @ torch.ones(3, 3)

    model = Broken()
    policy = SamplePolicy(1, 1 << 20)
    operators = OperatorRecorder(policy)
    modules = ModuleRecorder(model, operators, policy)
    operators.observer = modules
    try:
        with torch.inference_mode(), modules, operators:
            model(torch.randn(2, 4))
    except RuntimeError:
        pass
    assert [v.record.op.rsplit(".", 1)[1] for v in modules.card_variants()] == ["LayerNorm"]
    assert modules.current_path() == ""

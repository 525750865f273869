import io

import torch
from torch import nn

from capture_service.modules import MUTATES_STATE, NO_WORK, ModuleRecorder, export_program, forward_call
from capture_service.recorder import MUTATES, OperatorRecorder
from capture_service.records import SamplePolicy, VariantRecord
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
    program = torch.export.load(io.BytesIO(export_program(fused)[0]))
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


class Scale(nn.Module):
    """Scales by a buffer; with ``bump`` it first adds one to it (an EMA-style update)."""

    def __init__(self, bump: bool) -> None:
        super().__init__()
        self.bump = bump
        self.register_buffer("s", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bump:
            self.s.add_(1.0)
        return torch.tanh(x) * self.s


class RunningNorm(nn.Module):
    """Batch norm on running stats of its own: the update bumps no version counter."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("var", torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.batch_norm(x, self.mean, self.var, training=True)


def _module_records(modules: ModuleRecorder) -> dict[str, list[VariantRecord]]:
    found: dict[str, list[VariantRecord]] = {}
    for variant in modules.card_variants():
        found.setdefault(variant.record.op.rsplit(".", 1)[1], []).append(variant.record)
    return found


def test_a_module_that_writes_its_own_buffer_is_not_optimisable() -> None:
    model = nn.Sequential(Scale(bump=True), nn.ReLU())
    records = _module_records(_capture(model, torch.randn(2, 4)))
    (scale,) = records["Scale"]
    assert not scale.optimisable and scale.reason == MUTATES_STATE and scale.mutated_inputs == [1]
    (block,) = records["Sequential"]  # the buffer is its state too
    assert block.reason == MUTATES_STATE and block.mutated_inputs == [1]
    assert torch.equal(model[0].s, torch.full((4,), 2.0))


def test_running_stats_updated_by_batch_norm_count_as_writes() -> None:
    records = _module_records(_capture(RunningNorm(), torch.randn(8, 4)))
    (norm,) = records["RunningNorm"]
    assert norm.reason == MUTATES_STATE and norm.mutated_inputs == [1, 2]
    (batch_norm,) = _module_records(_capture(nn.BatchNorm1d(4).train(), torch.randn(8, 4)))["BatchNorm1d"]
    assert batch_norm.reason == MUTATES_STATE and batch_norm.mutated_inputs == [3, 4, 5]
    (frozen,) = _module_records(_capture(nn.BatchNorm1d(4).eval(), torch.randn(8, 4)))["BatchNorm1d"]
    assert frozen.optimisable and frozen.mutated_inputs == []


def test_the_first_sample_holds_the_state_at_call_time() -> None:
    class Parent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Scale(bump=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.scale(x)
            self.scale.s.mul_(3.0)  # after the call: the child's sample must not see it
            return y

    model = Parent()
    x = torch.randn(2, 4)
    (scale,) = _module_records(_capture(model, x))["Scale"]
    assert scale.optimisable and scale.mutated_inputs == []
    (sample,) = scale.samples
    assert torch.equal(sample.inputs[1], torch.ones(4)) and torch.equal(model.scale.s, torch.full((4,), 3.0))
    assert torch.equal(sample.outputs[0], torch.tanh(sample.inputs[0]) * sample.inputs[1])

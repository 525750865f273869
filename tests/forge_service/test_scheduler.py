from pathlib import Path

import torch
from torch import nn

from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from capture_service.timing import TimingPolicy
from forge_service.config import RunConfig
from forge_service.runs import proposer_refusal
from forge_service.scheduler import NOT_IN_TOP, NOT_PROPOSABLE, SERVED_BY_ATEN_CARD, plan_cards
from kforge_domain.floor import memory_floor_us
from tests.forge_service.conftest import make_card

FAST = TimingPolicy(warmup=1, min_reps=3, max_reps=5, budget_s=0.005)


def test_floor_counts_every_input_and_output_once() -> None:
    card = make_card(shape=(1000,))
    # 4000 bytes in + 4000 bytes out at 8 GB/s = 1 µs
    assert memory_floor_us(card.inputs, card.outputs, 8.0) == 1.0
    assert memory_floor_us(card.inputs, card.outputs, 0.0) is None


def test_selection_follows_time_share_and_headroom_and_skips_vendor_ops() -> None:
    big = make_card("aten::relu.default", (512, 512), time_share=0.4, eager_us=100.0)
    small = make_card("aten::sigmoid.default", (8, 8), time_share=0.1, eager_us=5.0)
    conv = make_card("aten::convolution.default", (64, 64), time_share=0.5, eager_us=200.0, vendor=True)
    view = make_card("aten::view.default", (64, 64), time_share=0.0, optimisable=False)
    plans = plan_cards([small, conv, big, view], RunConfig(model_spec="m.py", max_cards=1), 1000.0)
    by_op = {p.card.op: p for p in plans}
    assert by_op["aten::relu.default"].selected and by_op["aten::relu.default"].budget == 8
    assert not by_op["aten::sigmoid.default"].selected
    assert "most eager time" in by_op["aten::sigmoid.default"].reason
    assert not by_op["aten::convolution.default"].selected and "vendor" in by_op["aten::convolution.default"].reason
    assert by_op["aten::view.default"].reason == "a view"


def test_a_card_at_its_floor_ranks_below_one_with_headroom() -> None:
    at_floor = make_card("aten::relu.default", (1000,), time_share=0.5, eager_us=1.0)
    slow = make_card("aten::sigmoid.default", (1000,), time_share=0.3, eager_us=50.0)
    plans = plan_cards([at_floor, slow], RunConfig(model_spec="m.py", max_cards=1), 8.0)
    assert plans[0].card.op == "aten::sigmoid.default" and plans[0].selected


def test_a_card_whose_eager_beats_its_floor_ranks_as_one_without_headroom() -> None:
    """Eager under the bound (the sandbox then judges no timing by it) leaves the least to gain."""
    under = make_card("aten::mul.Tensor", (1000,), time_share=0.6, eager_us=0.5)  # floor 1 µs at 8 GB/s
    slow = make_card("aten::sigmoid.default", (1000,), time_share=0.3, eager_us=50.0)
    plans = plan_cards([under, slow], RunConfig(model_spec="m.py", max_cards=1), 8.0)
    assert plans[0].card.op == "aten::sigmoid.default" and plans[0].selected
    assert plans[1].floor_us is None


def test_target_cards_override_the_vendor_rule() -> None:
    conv = make_card("aten::convolution.default", time_share=0.5, vendor=True)
    plans = plan_cards([conv], RunConfig(model_spec="m.py", target_cards=["aten::convolution.default"]), 1000.0)
    assert plans[0].selected


def test_a_card_the_proposer_has_nothing_for_never_takes_a_slot() -> None:
    erf = make_card("aten::erf.default", (512, 512), time_share=0.6, eager_us=100.0)  # no offline template
    relu = make_card("aten::relu.default", (512, 512), time_share=0.3, eager_us=100.0)
    sigmoid = make_card("aten::sigmoid.default", (8, 8), time_share=0.1, eager_us=5.0)
    config = RunConfig(model_spec="m.py", max_cards=1)
    plans = {p.card.op: p for p in plan_cards([erf, relu, sigmoid], config, 1000.0, proposer_refusal(config, "cpu"))}
    erf_plan = plans["aten::erf.default"]
    assert not erf_plan.selected and erf_plan.budget == 0
    assert erf_plan.reason == NOT_PROPOSABLE.format(why="no offline template covers aten::erf.default")
    assert plans["aten::relu.default"].selected and plans["aten::relu.default"].budget == 8
    assert plans["aten::sigmoid.default"].reason == NOT_IN_TOP.format(k=1)
    llm = RunConfig(model_spec="m.py", max_cards=1, proposer="openai/gpt-4.1")
    assert proposer_refusal(llm, "cpu") is None  # an LLM writes for any card
    assert [p.card.op for p in plan_cards([erf, relu, sigmoid], llm, 1000.0) if p.selected] == ["aten::erf.default"]


class StandardModules(nn.Module):
    """torch.nn modules whose forward runs one aten op each, and a block that runs two."""

    def __init__(self) -> None:
        super().__init__()
        self.gn = nn.GroupNorm(4, 16)
        self.bn = nn.BatchNorm2d(16)
        self.act = nn.SiLU()
        self.pool = nn.AvgPool2d(2)
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(self.pool(self.act(self.bn(self.gn(x)))))


def test_a_module_card_that_runs_one_searchable_aten_card_is_that_card(tmp_path: Path) -> None:
    torch.manual_seed(0)
    loaded = LoadedModel(StandardModules().eval(), (torch.randn(2, 16, 16, 16),))
    cards = capture_loaded("standard", loaded, CaptureOptions(), tmp_path, timing=FAST).cards
    config = RunConfig(model_spec="m.py", max_cards=5)
    plans = plan_cards(cards, config, 10.0, proposer_refusal(config, "cpu"))
    by_id = {p.card.id: p for p in plans}
    aten_at = {p.card.module_paths[0]: p for p in plans if p.card.kind == "aten"}
    for plan in plans:
        if plan.card.kind != "module":
            continue
        inner = aten_at[plan.card.module_paths[0]]
        # GroupNorm, BatchNorm2d, SiLU, AvgPool2d and LayerNorm: the aten card is searched in the module's place
        assert plan.reason == SERVED_BY_ATEN_CARD.format(op=inner.card.op, card_id=inner.card.id)
        assert not plan.selected and inner.score >= plan.score
    selected = sorted(p.card.op for p in plans if p.selected)
    assert selected == ["aten::avg_pool2d.default", "aten::batch_norm.default", "aten::group_norm.default",
                        "aten::layer_norm.default", "aten::silu.default"]
    assert all(not by_id[p.card.id].reason for p in plans if p.selected)


def test_a_module_card_that_runs_several_searchable_cards_keeps_its_own_place() -> None:
    relu = make_card("aten::relu.default", (64, 64), time_share=0.2).model_copy(update={"module_paths": ["block"]})
    tanh = make_card("aten::tanh.default", (64, 64), time_share=0.2).model_copy(update={"module_paths": ["block.act"]})
    block = make_card("aten::relu.default", (64, 64), time_share=0.5).model_copy(
        update={"kind": "module", "op": "examples.Block", "id": "block", "module_paths": ["block"]})
    plans = {p.card.id: p for p in plan_cards([relu, tanh, block], RunConfig(model_spec="m.py"), 1000.0)}
    assert plans["block"].selected and plans["block"].rank == 0  # an LLM may fuse what the block runs
    assert plans[relu.id].selected and plans[tanh.id].selected

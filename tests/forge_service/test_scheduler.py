from pathlib import Path

import torch
from torch import nn

from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from capture_service.timing import TimingPolicy
from forge_service.config import RunConfig
from forge_service.runs import promote_next_card, proposer_refusal, release_shadowed_cards
from forge_service.scheduler import (
    NOT_IN_TOP,
    NOT_IN_TOP_COMPILED,
    NOT_PROPOSABLE,
    RUNS_ONLY_INSIDE_MODULE_CARD,
    SERVED_BY_ATEN_CARD,
    plan_cards,
)
from forge_service.store import CardRow, RunStore
from kforge_domain.card import OperatorCard
from kforge_domain.floor import memory_floor_us
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import CandidateStatus, RunFigures
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


def compiled_only(card: OperatorCard, time_share: float) -> OperatorCard:
    return card.model_copy(update={"id": card.id + "c", "compiled_only": True, "time_share": time_share})


def eager_and_compiled_cards() -> list[OperatorCard]:
    """Three eager cards and three compiled-only ones, the compiled-only ones ranked highest."""
    eager = [make_card(op, (64, 64), time_share=share) for op, share in
             (("aten::relu.default", 0.3), ("aten::tanh.default", 0.2), ("aten::sigmoid.default", 0.1))]
    return [*eager, *(compiled_only(card, 0.9 - i / 10) for i, card in enumerate(eager))]


def test_compiled_only_cards_fill_slots_of_their_own() -> None:
    """A kernel for a layout only compiled graphs make speeds up no eager call: such cards never
    take an eager card's slot, however they rank, and have their own (half of max_cards, rounded up)."""
    cards = eager_and_compiled_cards()
    plans = {p.card.id: p for p in plan_cards(cards, RunConfig(model_spec="m.py", max_cards=2), 1000.0)}
    relu, tanh, sigmoid, relu_c, tanh_c, sigmoid_c = (plans[c.id] for c in cards)
    assert relu.selected and tanh.selected and not sigmoid.selected
    assert sigmoid.reason == NOT_IN_TOP.format(k=2)
    assert relu_c.selected and relu_c.rank == 0
    assert not tanh_c.selected and tanh_c.reason == NOT_IN_TOP_COMPILED.format(k=1)
    assert not sigmoid_c.selected
    none = plan_cards(cards, RunConfig(model_spec="m.py", max_cards=2, max_compiled_cards=0), 1000.0)
    assert [p.card.id for p in none if p.selected] == [relu.card.id, tanh.card.id]
    both = plan_cards(cards, RunConfig(model_spec="m.py", max_cards=1, max_compiled_cards=3), 1000.0)
    assert [p.card.id for p in both if p.selected] == [relu_c.card.id, tanh_c.card.id, sigmoid_c.card.id,
                                                        relu.card.id]


def test_a_card_with_no_proposal_gives_its_slot_to_the_next_of_its_own_pool(tmp_path: Path) -> None:
    cards = eager_and_compiled_cards()
    config = RunConfig(model_spec="m.py", max_cards=2)
    store = RunStore(tmp_path)
    store.put_cards([CardRow(p.card.id, p.card.to_json(), p.rank, p.selected, "pending" if p.selected else "skipped",
                             p.reason, p.budget, p.floor_us) for p in plan_cards(cards, config, 1000.0)])
    promoted = promote_next_card(store, config, store.card(cards[3].id))
    assert promoted is not None and promoted.id == cards[4].id and promoted.selected
    promoted = promote_next_card(store, config, store.card(cards[0].id))
    assert promoted is not None and promoted.id == cards[2].id
    assert promote_next_card(store, config, store.card(cards[1].id)) is None  # no eager card waits


def test_max_compiled_cards_travels_on_the_wire() -> None:
    for value in (None, 0, 4):
        config = RunConfig(model_spec="m.py", max_cards=3, max_compiled_cards=value)
        assert RunConfig.from_proto(config.to_proto()) == config
    assert RunConfig(model_spec="m.py", max_cards=3).compiled_slots == 2


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
    lgamma = make_card("aten::lgamma.default", (512, 512), time_share=0.6, eager_us=100.0)  # no offline template
    relu = make_card("aten::relu.default", (512, 512), time_share=0.3, eager_us=100.0)
    sigmoid = make_card("aten::sigmoid.default", (8, 8), time_share=0.1, eager_us=5.0)
    config = RunConfig(model_spec="m.py", max_cards=1)
    plans = {p.card.op: p for p in plan_cards([lgamma, relu, sigmoid], config, 1000.0, proposer_refusal(config, "cpu"))}
    lgamma_plan = plans["aten::lgamma.default"]
    assert not lgamma_plan.selected and lgamma_plan.budget == 0
    assert lgamma_plan.reason == NOT_PROPOSABLE.format(why="no offline template covers aten::lgamma.default")
    assert plans["aten::relu.default"].selected and plans["aten::relu.default"].budget == 8
    assert plans["aten::sigmoid.default"].reason == NOT_IN_TOP.format(k=1)
    llm = RunConfig(model_spec="m.py", max_cards=1, proposer="openai/gpt-4.1")
    assert proposer_refusal(llm, "cpu") is None  # an LLM writes for any card
    chosen = [p.card.op for p in plan_cards([lgamma, relu, sigmoid], llm, 1000.0) if p.selected]
    assert chosen == ["aten::lgamma.default"]


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
    # the block's kernel replaces every call of both: they are left for the case it finds none
    shadowed = RUNS_ONLY_INSIDE_MODULE_CARD.format(op="examples.Block", card_id="block")
    assert plans[relu.id].reason == shadowed and plans[tanh.id].reason == shadowed


def at(card: OperatorCard, *paths: str, **update: str) -> OperatorCard:
    return card.model_copy(update={"module_paths": list(paths), **update})


def norm_model() -> tuple[OperatorCard, OperatorCard, OperatorCard, OperatorCard, OperatorCard]:
    """An RMSNorm module card, the two aten cards only it runs, one that also runs outside it, and
    a card further down; ranked in that order (norm first)."""
    norm = at(make_card("aten::relu.default", (64, 64), time_share=0.5), "layers.0.norm", "layers.1.norm",
              kind="module", op="examples.RMSNorm", id="norm")
    mean = at(make_card("aten::mean.dim", (64, 64), time_share=0.3), "layers.0.norm", "layers.1.norm")
    to = at(make_card("aten::_to_copy.default", (64, 64), time_share=0.25), "layers.0.norm")
    mul = at(make_card("aten::mul.Tensor", (64, 64), time_share=0.2), "layers.0.norm", "layers.0.mlp")
    tanh = at(make_card("aten::tanh.default", (64, 64), time_share=0.1), "layers.0.act")
    return norm, mean, to, mul, tanh


def test_cards_that_run_only_inside_a_selected_module_card_give_their_slots_to_the_next() -> None:
    norm, mean, to, mul, tanh = norm_model()
    plans = {p.card.id: p for p in plan_cards([norm, mean, to, mul, tanh],
                                               RunConfig(model_spec="m.py", max_cards=3), 1000.0)}
    shadowed = RUNS_ONLY_INSIDE_MODULE_CARD.format(op="examples.RMSNorm", card_id="norm")
    assert plans["norm"].selected
    assert not plans[mean.id].selected and plans[mean.id].reason == shadowed and plans[mean.id].budget == 0
    assert not plans[to.id].selected and plans[to.id].reason == shadowed
    assert plans[mul.id].selected  # it also runs in the mlp, which the module kernel leaves alone
    assert plans[tanh.id].selected  # the slots the inner cards left


def test_a_module_card_not_selected_shadows_nothing() -> None:
    norm, mean, to, mul, tanh = norm_model()
    low = norm.model_copy(update={"time_share": 0.01})  # ranked below every aten card
    plans = {p.card.id: p for p in plan_cards([low, mean, to, mul, tanh],
                                               RunConfig(model_spec="m.py", max_cards=2), 1000.0)}
    assert plans[mean.id].selected and plans[to.id].selected
    assert plans["norm"].reason == NOT_IN_TOP.format(k=2)
    assert plans[mul.id].reason == NOT_IN_TOP.format(k=2)


def test_a_module_card_at_the_root_shadows_every_aten_card() -> None:
    norm, mean, to, mul, tanh = norm_model()
    root = at(norm, "", op="examples.Model", id="model")
    plans = plan_cards([root, mean, to, mul, tanh], RunConfig(model_spec="m.py", max_cards=3), 1000.0)
    assert [p.card.id for p in plans if p.selected] == ["model"]


def planned_store(tmp_path: Path, cards: list[OperatorCard], config: RunConfig, module_id: str,
                  module_result: CandidateStatus) -> RunStore:
    """A run store as planning leaves it, with the module card's search ended on one result."""
    store = RunStore(tmp_path)
    store.put_cards([CardRow(p.card.id, p.card.to_json(), p.rank, p.selected, "pending" if p.selected else "skipped",
                             p.reason, p.budget, p.floor_us) for p in plan_cards(cards, config, 1000.0)])
    store.add_candidate("a", module_id, "", 1, "offline", ("add_child", {"parent": 0, "node": 1, "candidate": "a"}))
    figures = RunFigures(module_result, latency_us=5.0, eager_latency_us=10.0)
    store.put_result(CandidateResult("a", figures), module_id, ("tell", {"node": 1}))
    return store


def test_cards_a_module_card_shadowed_are_searched_once_it_ends_without_a_passing_kernel(tmp_path: Path) -> None:
    norm, mean, to, mul, tanh = norm_model()
    config = RunConfig(model_spec="m.py", max_cards=3)
    store = planned_store(tmp_path, [norm, mean, to, mul, tanh], config, "norm", CandidateStatus.WRONG_RESULT)
    assert release_shadowed_cards(store, config) == []  # its search has not ended
    store.set_card_status("norm", "done", "budget spent")
    released = release_shadowed_cards(store, config)
    assert [(module.id, row.id) for module, row in released] == [("norm", mean.id), ("norm", to.id)]
    assert all(row.selected and row.status == "pending" and row.budget == config.budget_per_card and not row.reason
               for _, row in released)
    assert release_shadowed_cards(store, config) == []  # released once


def test_a_failed_root_module_card_releases_at_most_max_cards(tmp_path: Path) -> None:
    norm, mean, to, mul, tanh = norm_model()
    config = RunConfig(model_spec="m.py", max_cards=2)
    root = at(norm, "", op="examples.Model", id="model")
    store = planned_store(tmp_path, [root, mean, to, mul, tanh], config, "model", CandidateStatus.WRONG_RESULT)
    store.set_card_status("model", "done", "budget spent")
    assert [row.id for _, row in release_shadowed_cards(store, config)] == [mean.id, to.id]
    assert {store.card(c.id).reason for c in (mul, tanh)} == {NOT_IN_TOP.format(k=2)}  # they wait like any other
    assert release_shadowed_cards(store, config) == []


def test_a_module_card_with_a_passing_kernel_keeps_its_inner_cards_shadowed(tmp_path: Path) -> None:
    norm, mean, to, mul, tanh = norm_model()
    config = RunConfig(model_spec="m.py", max_cards=3)
    store = planned_store(tmp_path, [norm, mean, to, mul, tanh], config, "norm", CandidateStatus.PASSED)
    store.set_card_status("norm", "done", "budget spent")
    assert release_shadowed_cards(store, config) == []
    assert not store.card(mean.id).selected

from forge_service.config import RunConfig
from forge_service.scheduler import plan_cards
from kforge_domain.floor import memory_floor_us
from tests.forge_service.conftest import make_card


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


def test_target_cards_override_the_vendor_rule() -> None:
    conv = make_card("aten::convolution.default", time_share=0.5, vendor=True)
    plans = plan_cards([conv], RunConfig(model_spec="m.py", target_cards=["aten::convolution.default"]), 1000.0)
    assert plans[0].selected

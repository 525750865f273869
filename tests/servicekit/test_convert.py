import pytest
import torch

from kforge_domain.card import OperatorCard, TensorSpec
from packager.variant import variant_key
from servicekit.convert import card_from_json, card_from_proto, card_to_proto
from servicekit.errors import InvalidArgument


def _card() -> OperatorCard:
    key = variant_key("aten::relu.default", (torch.randn(16),), {})
    spec = TensorSpec(shape=[16], stride=[1], dtype="float32")
    return OperatorCard(id=key.id, kind="aten", op=key.op, device="cpu", key=key.to_json(), inputs=[spec],
                        outputs=[spec], call_count=3, time_share=0.25)


def test_a_card_round_trips_through_its_message() -> None:
    card = _card()
    message = card_to_proto(card)
    assert (message.id, message.op, message.call_count, message.time_share, message.eager_us) == (
        card.id, card.op, 3, 0.25, 0.0)
    assert card_from_proto(message) == card


@pytest.mark.parametrize(("text", "needle"), [("", "card_json is empty"), ("{not json", "not a valid operator card"),
                                              ('{"id": 3}', "not a valid operator card")])
def test_a_malformed_card_is_an_invalid_argument_naming_the_field(text: str, needle: str) -> None:
    with pytest.raises(InvalidArgument, match=needle):
        card_from_json(text)

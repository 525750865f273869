import json

import pytest
import torch
from pydantic import ValidationError

from kforge_domain.card import OperatorCard, TensorSpec
from packager.variant import decode_call, variant_key


def _card() -> OperatorCard:
    x = torch.randn(4, 8)
    key = variant_key("aten::_softmax.default", (x, -1, False), {})
    spec = TensorSpec(shape=[4, 8], stride=[8, 1], dtype="float32")
    return OperatorCard(id=key.id, kind="aten", op=key.op, device="cpu", key=key.to_json(), inputs=[spec],
                        outputs=[spec])


def test_the_template_is_stored_once_in_the_key() -> None:
    card = _card()
    data = json.loads(card.to_json())
    assert "template" not in data and data["key"]["template"] == {"args": [{"tensor": 0}, -1, False], "kwargs": {}}
    assert card.template is card.key["template"]
    args, _ = decode_call(card.template, [torch.ones(4, 8)])
    assert args[1:] == [-1, False]


def test_a_card_written_with_the_old_template_copy_still_loads() -> None:
    card = _card()
    old = json.loads(card.to_json())
    old["template"] = old["key"]["template"]
    loaded = OperatorCard.from_json(json.dumps(old))
    assert loaded == card and "template" not in json.loads(loaded.to_json())


def test_the_eager_spread_round_trips_and_a_card_written_before_it_still_loads() -> None:
    card = _card().model_copy(update={"eager_us": 12.5, "eager_spread_us": 0.75})
    assert OperatorCard.from_json(card.to_json()) == card
    old = json.loads(card.to_json())
    del old["eager_spread_us"]
    loaded = OperatorCard.from_json(json.dumps(old))
    assert loaded.eager_us == 12.5 and loaded.eager_spread_us is None


def test_a_template_copy_that_differs_from_the_key_is_refused() -> None:
    old = json.loads(_card().to_json())
    old["template"] = {"args": [{"tensor": 0}, 0, False], "kwargs": {}}
    with pytest.raises(ValidationError, match="differs from its key"):
        OperatorCard.from_json(json.dumps(old))

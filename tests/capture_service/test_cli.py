import argparse
import json
from typing import Any

import torch

from capture_service.cli import main, register, summary_table
from kforge_domain.card import CardSet, OperatorCard, TensorSpec
from packager.variant import variant_key


def test_json_output_lists_every_card_field(tiny_spec, tmp_path, capsys) -> None:
    code = main(["capture", str(tiny_spec), "--out", str(tmp_path / "out"), "--json", "--samples", "1",
                 "--sample-budget-mb", "4"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    cards = [OperatorCard.model_validate(c) for c in json.loads(captured.out)["cards"]]
    assert {"aten::layer_norm.default", "aten::linear.default"} <= {c.op for c in cards}
    assert all(len(c.samples) <= 1 for c in cards)
    assert "[capturing]" in captured.err and (tmp_path / "out" / "cards.json").is_file()


def test_a_bad_spec_prints_the_cause_and_fails(tmp_path, capsys) -> None:
    code = main([str(tmp_path / "missing.py"), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 1 and "does not exist" in captured.err and "Traceback" not in captured.err


def test_register_adds_the_capture_command() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["capture", "m.py", "--out", "d", "--device", "cuda", "--grad-mode", "no_grad"])
    assert args.device == "cuda" and args.grad_mode == "no_grad" and args.samples == 2 and callable(args.func)


def _softmax_card(**fields: Any) -> OperatorCard:
    key = variant_key("aten::_softmax.default", (torch.randn(4, 8), -1, False), {})
    spec = TensorSpec(shape=[4, 8], stride=[8, 1], dtype="float32")
    return OperatorCard(id=key.id, kind="aten", op=key.op, device="cpu", key=key.to_json(), inputs=[spec],
                        outputs=[spec], call_count=1, time_share=1.0, **fields)


def test_the_table_shows_each_card_s_eager_median_with_its_spread() -> None:
    def row(card: OperatorCard) -> str:
        table = summary_table(CardSet(model_spec="m", device="cpu", grad_mode="inference", total_eager_us=12.5,
                                      cards=[card])).splitlines()
        assert "eager µs ± IQR" in table[0]
        return table[1]

    assert "12.5 ± 0.8" in row(_softmax_card(eager_us=12.5, eager_spread_us=0.75))
    written_before = row(_softmax_card(eager_us=12.5))  # a card from before the spread was recorded
    assert "12.5" in written_before and "±" not in written_before
    assert "±" not in row(_softmax_card())

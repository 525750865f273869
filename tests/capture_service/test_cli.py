import argparse
import json

from capture_service.cli import main, register
from kforge_domain.card import OperatorCard


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

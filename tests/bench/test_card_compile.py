"""The per-card torch.compile baseline replays captured cards, aten and module, and names failures."""

import json
from pathlib import Path

import pytest

from bench.card_compile import card_baselines, main
from capture_service.capture import capture_model

EXAMPLE = Path(__file__).resolve().parents[2] / "examples/small_cnn.py"


@pytest.fixture(scope="module")
def capture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("capture")
    capture_model(str(EXAMPLE), out_dir=out)
    return out


def _top_cards(capture_dir: Path) -> dict[str, str]:
    """The largest optimisable aten and module card: kind -> id."""
    cards = json.loads((capture_dir / "cards.json").read_text())["cards"]
    picked: dict[str, str] = {}
    for card in sorted(cards, key=lambda c: -c["time_share"]):
        if card["optimisable"] and card["samples"] and card["kind"] not in picked:
            picked[card["kind"]] = card["id"]
    return picked


def test_aten_and_module_cards_are_compiled_checked_and_timed(capture_dir: Path) -> None:
    picked = _top_cards(capture_dir)
    assert set(picked) == {"aten", "module"}
    results = card_baselines(capture_dir, [*picked.values(), "0" * 16], "cpu", rounds=3)
    for card_id in picked.values():
        row = results[card_id]
        assert "error" not in row, row
        assert row["eager_us"] > 0 and row["compile_us"] > 0
        assert row["compile_max_abs_diff"] < 1e-3
    assert results["0" * 16] == {"error": f"no card {'0' * 16} in {capture_dir}"}


def test_the_command_line_prints_json_for_a_run_directory(capture_dir: Path, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "capture").symlink_to(capture_dir)
    card_id = _top_cards(capture_dir)["aten"]
    assert main([str(run_dir), "--card", card_id, "--device", "cpu", "--rounds", "2", "--backend", "aot_eager",
                 "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[card_id]
    assert row["op"].startswith("aten::") and row["compile_us"] > 0

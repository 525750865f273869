"""The tuning sweep picks its setting on training landscapes and judges it on others only."""

import json
from pathlib import Path

from bench.search_tuning import HELD_OUT_FIRST_SEED, grid_configs, main, paired


def test_paired_differences_name_the_winner_and_bound_the_mean() -> None:
    faster, slower = [0.4, 0.5, 0.6, 0.5], [0.5, 0.6, 0.6, 0.7]
    result = paired(faster, slower)
    assert result["mean_diff"] < 0 and result["ci_low"] <= result["mean_diff"] <= result["ci_high"]
    assert result["mcts_wins"] == 0.75 and result["ties"] == 0.25


def test_a_small_sweep_writes_every_policy_judged_on_held_out_landscapes(tmp_path: Path) -> None:
    out = tmp_path / "tuning.json"
    assert main(["--train", "3", "--held-out", "4", "--budgets", "12", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["held_out_seeds"] == [HELD_OUT_FIRST_SEED, HELD_OUT_FIRST_SEED + 3]
    assert record["train_seeds"][1] < record["held_out_seeds"][0]
    (result,) = record["results"]
    assert result["tuned"] in list(grid_configs())
    assert set(result["held_out"]) == {"mcts (tuned)", "mcts (default)", "linear (best)", "greedy best-first",
                                       "beam (4x2)"}
    for row in result["held_out"].values():
        assert 0 < row["mean"] <= 1.0  # eager ships when no candidate beats it
    assert len(result["paired"]) == 6

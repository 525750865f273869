from __future__ import annotations

import math

import pandas as pd
import pytest

from tests.ui import factories
from ui.models import CardTree
from ui.tables import (
    OTHER_CARDS,
    candidates_frame,
    cards_frame,
    geomean_card_speedup,
    providers_frame,
    runs_frame,
    time_breakdown,
)


def test_runs_frame_shows_progress_against_budget_cost_and_speedup() -> None:
    frame = runs_frame([factories.run("a", status="running", evaluations_done=2, evaluations_budget=8,
                                      cost_usd=0.25, best_e2e_speedup=None)])
    row = frame.iloc[0]
    assert (row["run"], row["evaluations"], row["progress"], row["cost $"]) == ("a", "2/8", 0.25, 0.25)
    assert row["e2e speedup"] is None and row["outcome"] is None
    assert runs_frame([]).empty and "status" in runs_frame([]).columns


def test_a_finished_run_shows_how_it_ended_instead_of_a_share_of_its_budget() -> None:
    frame = runs_frame([factories.run("spent"), factories.run("early", evaluations_done=5, evaluations_budget=6),
                        factories.run("failed", status="failed", evaluations_done=0, evaluations_budget=4)])
    frame = frame.set_index("run")
    assert frame["progress"].isna().all()
    assert frame["outcome"].to_dict() == {"spent": "budget spent", "early": "stopped early",
                                          "failed": "failed"}


def test_cards_frame_has_the_issue_columns() -> None:
    frame = cards_frame([factories.card(floor_us=2.5, best_us=5.0)])
    assert {"share", "eager µs", "best µs", "speedup", "% of floor", "status", "class"} <= set(frame.columns)
    assert frame.iloc[0]["% of floor"] == 50.0


def test_cards_frame_shows_eager_time_as_median_and_spread() -> None:
    frame = cards_frame([factories.card("a", eager_us=10.0, eager_spread_us=0.25),
                         factories.card("b", eager_us=10.0, eager_spread_us=None),
                         factories.card("c", eager_us=None)])
    assert frame["eager µs"].tolist() == ["10.00 ± 0.25", "10.00 ± —", "—"]


def test_time_breakdown_shrinks_only_cards_whose_kernel_beats_eager() -> None:
    cards = [
        factories.card("win", eager_us=10.0, call_count=3, speedup=2.0),
        factories.card("slow", eager_us=4.0, call_count=1, speedup=0.8),
        factories.card("none", eager_us=6.0, call_count=1, speedup=None, audit_class="fallback"),
        factories.card("untimed", eager_us=None),
    ]
    frame = time_breakdown(cards).pivot(index="card", columns="phase", values="time µs")
    assert frame.loc["aten::relu.default [win]"].tolist() == [30.0, 15.0]
    assert frame.loc["aten::relu.default [slow]"].tolist() == [4.0, 4.0]
    assert frame.loc["aten::relu.default [none]"].tolist() == [6.0, 6.0]
    assert len(frame) == 3


def test_time_breakdown_sums_the_light_cards_as_other() -> None:
    cards = [factories.card(f"c{i}", eager_us=float(10 - i), call_count=1, speedup=None) for i in range(5)]
    frame = time_breakdown(cards, top=2)
    labels = list(dict.fromkeys(frame["card"]))
    assert labels[-1] == OTHER_CARDS and len(labels) == 3
    assert frame[(frame["card"] == OTHER_CARDS) & (frame["phase"] == "eager")]["time µs"].item() == 8 + 7 + 6


def test_candidates_frame_marks_the_best_lineage_and_eager_parents() -> None:
    frame = candidates_frame(factories.tree("k3")).set_index("candidate")
    assert frame["best lineage"].to_dict() == {"k1": True, "k2": False, "k3": True, "k4": False}
    assert frame.loc["k1", "parent"] == "eager" and frame.loc["k2", "parent"] == "k1"


def test_candidates_frame_draws_no_lineage_to_a_best_slower_than_eager() -> None:
    tree = CardTree("c", (factories.node("k1", speedup=0.87), factories.node("k2", "k1", speedup=0.5)), "k1")
    assert not candidates_frame(tree)["best lineage"].any()


def test_candidates_frame_shows_the_visits_and_value_of_each_subtree() -> None:
    tree = factories.tree()
    tree = type(tree)(tree.card_id, (factories.node("k1", visits=3, value=0.25),
                                     factories.node("k2", "k1", "COMPILE_ERROR", None, visits=1, value=None)), "k1")
    frame = candidates_frame(tree).set_index("candidate")
    assert frame.loc["k1", "visits"] == 3 and frame.loc["k1", "value"] == 0.25
    assert frame.loc["k2", "visits"] == 1 and pd.isna(frame.loc["k2", "value"])


def test_geomean_counts_searched_cards_without_a_win_as_one() -> None:
    cards = [factories.card("a", speedup=4.0), factories.card("b", speedup=0.5),
             factories.card("c", evaluations=0, speedup=9.0)]
    assert geomean_card_speedup(cards) == pytest.approx(2.0)
    assert geomean_card_speedup([factories.card(evaluations=0)]) is None


def test_providers_frame_puts_speedup_beside_spend() -> None:
    runs = [factories.run("a", proposer="offline"),
            factories.run("b", proposer="openai/gpt-4.1", cost_usd=1.5, llm_calls=12, best_e2e_speedup=1.6)]
    frame = providers_frame(runs, {"b": [factories.card(speedup=1.44), factories.card("d", speedup=1.0)]})
    b = frame.set_index("run").loc["b"]
    assert (b["cost $"], b["LLM calls"], b["e2e speedup"], b["cards improved"]) == (1.5, 12, 1.6, 1)
    assert math.isclose(b["card speedup (geomean)"], 1.2)
    assert pd.isna(frame.set_index("run").loc["a", "card speedup (geomean)"])

"""A run's failed candidates, grouped by how they failed."""

from __future__ import annotations

from tests.ui import factories
from ui.failures import failed_count, failures_by_status
from ui.models import CardTree


def test_failures_group_by_status_in_debugging_order_and_skip_passed_and_pending() -> None:
    relu = factories.tree()  # k2 compile error, k4 wrong result
    add = CardTree("c2", (factories.node("a1", status="TIMEOUT", speedup=None),
                          factories.node("a2", "a1", "COMPILE_ERROR", None),
                          factories.node("a3", status="PENDING", speedup=None),
                          factories.node("a4", speedup=0.5)), "a4")
    cards = [factories.card("c1"), factories.card("c2", op="aten::add.Tensor")]
    groups = failures_by_status(cards, [relu, add])
    assert list(groups) == ["COMPILE_ERROR", "WRONG_RESULT", "TIMEOUT"]
    assert [(f.card.card_id, f.node.candidate_id) for f in groups["COMPILE_ERROR"]] == [("c1", "k2"), ("c2", "a2")]
    assert failed_count([relu, add]) == 4


def test_a_run_without_failures_has_no_groups() -> None:
    clean = CardTree("c1", (factories.node("k1"),), "k1")
    assert failures_by_status([factories.card("c1")], [clean]) == {} and failed_count([clean]) == 0

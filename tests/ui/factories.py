"""Plain dashboard data made by hand, for the views' and tables' tests."""

from __future__ import annotations

from typing import Any

from ui.models import CardSummary, CardTree, RunSummary, TreeNode


def run(run_id: str = "r1", **fields: Any) -> RunSummary:
    values: dict[str, Any] = dict(
        run_id=run_id, model_name="small_cnn", model_spec="examples/small_cnn.py", backend="cpu", proposer="offline",
        status="done", error="", created_at=1_700_000_000.0, updated_at=1_700_000_100.0, cards_total=2,
        cards_done=2, evaluations_done=6, evaluations_budget=6, cost_usd=0.0, llm_calls=0, best_e2e_speedup=1.2,
    )
    values.update(fields)
    return RunSummary(**values)


def card(card_id: str = "c1", **fields: Any) -> CardSummary:
    values: dict[str, Any] = dict(
        card_id=card_id, op="aten::relu.default", kind="aten", time_share=0.5, call_count=2, optimisable=True,
        status="done", reason="", audit_class="custom", eager_us=10.0, best_us=5.0, speedup=2.0, floor_us=1.0,
        best_candidate_id="k2", evaluations=3, cost_usd=0.0,
    )
    values.update(fields)
    return CardSummary(**values)


def node(candidate_id: str, parent_id: str = "", status: str = "PASSED", speedup: float | None = 1.5,
         description: str = "", visits: int = 1, value: float | None = 0.0) -> TreeNode:
    return TreeNode(candidate_id=candidate_id, parent_id=parent_id, depth=1, status=status,
                    latency_us=10.0 / speedup if speedup else None, speedup=speedup, visits=visits, value=value,
                    description=description)


def tree(best: str = "k3") -> CardTree:
    """eager → k1 (passed) → k2 (compile error), k1 → k3 (best); eager → k4 (wrong result)."""
    return CardTree(card_id="c1", best_candidate_id=best, nodes=(
        node("k1", speedup=1.2), node("k2", "k1", "COMPILE_ERROR", None), node("k3", "k1", speedup=2.5),
        node("k4", "", "WRONG_RESULT", None),
    ))

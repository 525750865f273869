"""Which captured cards the offline proposer covers, and how much eager time they hold.

Shared by the GPU benchmarks that capture a model (paper_models, forge_e2e). Shares are over aten
cards, which partition the forward's work; module cards overlap them and are counted apart.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

TOP_CARDS = 10


def offline_covers() -> Callable[[Any], bool] | str:
    """Whether the offline proposer has a cuda template for a card, or why that cannot be told."""
    try:
        catalog = import_module("agent_service.offline.catalog")
        unsupported = import_module("agent_service.offline.call").UnsupportedCard
    except Exception as exc:
        return f"agent_service unavailable: {type(exc).__name__}: {exc}"

    def covers(card: Any) -> bool:
        try:
            catalog.plan_for_card(card, "cuda")
        except unsupported:
            return False
        except Exception:
            return False
        return True

    return covers


def card_table(cards: Any, covers: Callable[[Any], bool] | str, top: int = TOP_CARDS) -> dict[str, Any]:
    """Top aten cards by time share, and the share of eager time the offline proposer covers."""
    aten = [c for c in cards.cards if c.kind == "aten"]
    modules = [c for c in cards.cards if c.kind == "module"]
    table: dict[str, Any] = {
        "n_cards": len(cards.cards),
        "n_aten_cards": len(aten),
        "n_module_cards": len(modules),
        "captured_eager_us": cards.total_eager_us,
    }
    rows = []
    for card in sorted(aten, key=lambda c: c.time_share, reverse=True)[:top]:
        row = {
            "op": card.op,
            "input_shapes": [spec.shape for spec in card.inputs],
            "dtypes": sorted({spec.dtype for spec in card.inputs}),
            "calls": card.call_count,
            "eager_us": card.eager_us,
            "time_share": card.time_share,
            "vendor_op": card.vendor_op,
        }
        if callable(covers):
            row["offline_covered"] = covers(card)
        rows.append(row)
    table["top_cards"] = rows
    table["vendor_share"] = sum(c.time_share for c in aten if c.vendor_op)
    if callable(covers):
        table["offline_covered_share"] = sum(c.time_share for c in aten if covers(c))
        table["offline_covered_module_cards"] = sum(1 for c in modules if covers(c))
        table["offline_covered_modules"] = sorted({c.op for c in modules if covers(c)})
    else:
        table["offline_covered_share"] = None
        table["offline_coverage_error"] = covers
    return table

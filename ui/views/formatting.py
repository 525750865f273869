"""Number formats shared by the views."""

from __future__ import annotations

import streamlit as st

from ui.models import CardSummary, RunSummary

STATUS_ICONS = {
    "pending": ":material/schedule:", "running": ":material/autorenew:", "done": ":material/check_circle:",
    "failed": ":material/error:", "cancelled": ":material/cancel:",
}


def speedup_text(value: float | None) -> str:
    return f"×{value:.2f}" if value is not None else "—"


def us_text(value: float | None, spread: float | None = None) -> str:
    if value is None:
        return "—"
    return f"{value:.2f} µs" + (f" (IQR {spread:.2f})" if spread is not None else "")


def usd_text(value: float) -> str:
    return f"${value:.4f}" if value else "$0"


def status_icon(status: str) -> str | None:
    """A Material icon for a run status, for ``icon=`` parameters."""
    return STATUS_ICONS.get(status)


SPEEDUP_COLUMN = st.column_config.NumberColumn(format="×%.2f")
US_COLUMN = st.column_config.NumberColumn(format="%.2f")
USD_COLUMN = st.column_config.NumberColumn(format="$%.4f")
SHARE_COLUMN = st.column_config.NumberColumn(format="percent")
PCT_COLUMN = st.column_config.NumberColumn(format="%.0f%%")


def run_label(run: RunSummary) -> str:
    return f"{run.run_id} · {run.model} · {run.proposer} · {run.status}"


def card_label(card: CardSummary) -> str:
    best = f" · {speedup_text(card.speedup)}" if card.speedup is not None else ""
    return f"{card.op} [{card.card_id[:8]}] · {card.time_share:.1%} · {card.status}{best}"

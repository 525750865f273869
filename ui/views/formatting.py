"""Number formats and the table display shared by the views."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from ui.models import CardSummary, RunSummary

STATUS_ICONS = {
    "pending": ":material/schedule:", "running": ":material/autorenew:", "done": ":material/check_circle:",
    "failed": ":material/error:", "cancelled": ":material/cancel:",
}


#: How every page shows a value that is absent (not measured, not reached, not applicable).
ABSENT = "—"
#: Rows tall enough for three lines of text: Streamlit wraps a cell's text only in rows over 4rem.
WRAPPING_ROW_HEIGHT = 72


def speedup_text(value: float | None) -> str:
    return f"×{value:.2f}" if value is not None else ABSENT


def ms_text(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else ABSENT


def us_text(value: float | None, spread: float | None = None) -> str:
    if value is None:
        return ABSENT
    return f"{value:.2f} µs" + (f" (IQR {spread:.2f})" if spread is not None else "")


def duration_text(seconds: float | None) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 04 min``."""
    if seconds is None:
        return ABSENT
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def verdict_text(status: str, speedup: float | None) -> str:
    """A candidate's verdict in words; a kernel that passed but is no faster than eager says so."""
    if status != "PASSED":
        return status.lower().replace("_", " ") if status else ABSENT
    if speedup is None:
        return "passed"
    if speedup < 1.0:
        return f"passed, {speedup_text(speedup)} (slower than eager)"
    return f"passed, {speedup_text(speedup)}" + (" (no faster than eager)" if speedup == 1.0 else "")


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
#: Op names, reasons and descriptions: a wide column, its text wrapped in tables shown with ``wrap``.
TEXT_COLUMN = st.column_config.TextColumn(width="large")


def render_table(frame: pd.DataFrame, column_config: Mapping[str, Any] | None = None, wrap: bool = False) -> None:
    """A read-only table whose absent values read "—"; with ``wrap``, long text wraps onto three
    lines per row instead of being cut off (a clicked cell shows all of its text)."""
    st.dataframe(frame, hide_index=True, placeholder=ABSENT, column_config=column_config,
                 row_height=WRAPPING_ROW_HEIGHT if wrap else None)


def select_row(frame: pd.DataFrame, key: str, column_config: Mapping[str, Any] | None = None,
               wrap: bool = False) -> int | None:
    """A table like :func:`render_table` whose rows can be selected; the selected row's position."""
    event = st.dataframe(frame, hide_index=True, placeholder=ABSENT, column_config=column_config,
                         row_height=WRAPPING_ROW_HEIGHT if wrap else None, key=key, on_select="rerun",
                         selection_mode="single-row")
    rows = event.selection.rows if event is not None else []  # type: ignore[union-attr]
    return int(rows[0]) if rows else None


def run_label(run: RunSummary) -> str:
    return f"{run.run_id} · {run.model} · {run.proposer} · {run.status}"


def card_label(card: CardSummary) -> str:
    best = f" · {speedup_text(card.speedup)}" if card.speedup is not None else ""
    return f"{card.op} [{card.card_id[:8]}] · {card.time_share:.1%} · {card.status}{best}"

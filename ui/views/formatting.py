"""Number formats and the table display shared by the views."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

import pandas as pd
import streamlit as st

from ui.models import CardSummary, RunSummary
from ui.numbers import ABSENT

STATUS_ICONS = {
    "pending": ":material/schedule:", "running": ":material/autorenew:", "done": ":material/check_circle:",
    "failed": ":material/error:", "cancelled": ":material/cancel:",
}

#: Streamlit wraps a cell's text only in rows taller than 4rem; below that a row holds one line.
WRAPPING_ROW_HEIGHT = 72
#: Pixels per line of wrapped cell text, a row's padding above and below it, a cell's padding on
#: its sides, and the average width of a character.
LINE_PX, ROW_PADDING_PX, CELL_PADDING_PX, CHAR_PX = 20, 12, 16, 6.5
#: Rows grow to fit their longest wrapped text up to this many lines; a clicked cell shows the rest.
MAX_WRAPPED_LINES = 8


def speedup_text(value: float | None) -> str:
    return f"×{value:.2f}" if value is not None else ABSENT


def ms_text(value: float | None) -> str:
    return f"{value:.3f} ms" if value is not None else ABSENT


def us_text(value: float | None) -> str:
    """A figure shown alone (a floor; a card's best latency): ``250.00 µs``; a timed median shown
    with its spread reads as :func:`ui.numbers.spread_text` writes it."""
    return f"{value:.2f} µs" if value is not None else ABSENT


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


#: The width of the page's main column at 1400 px with the sidebar open: every table's columns
#: have fixed widths that add up to no more, so none scrolls sideways.
TABLE_WIDTH_PX = 920
#: The column of row markers that a table whose rows can be selected adds on its left.
ROW_MARKER_PX = 32


def text_column(width_px: int, label: str | None = None, help: str | None = None) -> Any:
    """A text column ``width_px`` wide; in tables shown with ``wrap`` its text wraps."""
    return st.column_config.TextColumn(label, width=width_px, help=help)


def number_column(width_px: int, number_format: str | None = None, label: str | None = None,
                  help: str | None = None) -> Any:
    return st.column_config.NumberColumn(label, width=width_px, format=number_format, help=help)


SPEEDUP_COLUMN = number_column(68, "×%.2f")
US_COLUMN = number_column(70, "%.2f")
USD_COLUMN = number_column(72, "$%.4f")
SHARE_COLUMN = number_column(58, "percent")
#: Columns a table leaves out: what they hold is on another page or elsewhere on the page.
HIDDEN = None


def table_width(frame: pd.DataFrame, column_config: Mapping[str, Any], selectable: bool = False) -> int | None:
    """The width of the frame's shown columns (and row markers where rows can be selected); None
    if a shown column has no fixed width."""
    total = ROW_MARKER_PX if selectable else 0
    for name in frame.columns:
        config = column_config.get(name, {})
        if config is HIDDEN:
            continue
        width = config.get("width")
        if not isinstance(width, int):
            return None
        total += width
    return total


def wrapped_lines(text: str, width_px: int) -> int:
    """About how many lines ``text`` wraps onto in a column ``width_px`` wide."""
    per_line = max(int((width_px - CELL_PADDING_PX) / CHAR_PX), 1)
    return max(len(textwrap.wrap(text, per_line)), 1)


def row_height(frame: pd.DataFrame, column_config: Mapping[str, Any] | None) -> int | None:
    """A row height that fits the longest text of the frame's fixed-width text columns, up to
    :data:`MAX_WRAPPED_LINES` lines; None (one line) when every text fits on one."""
    lines = 1
    for name, config in (column_config or {}).items():
        width = config.get("width") if isinstance(config, Mapping) else None
        if name not in frame.columns or not isinstance(width, int):
            continue
        texts = [str(v) for v in frame[name] if isinstance(v, str)]
        lines = max([lines, *(wrapped_lines(t, width) for t in texts)])
    if lines == 1:
        return None
    return max(ROW_PADDING_PX + LINE_PX * min(lines, MAX_WRAPPED_LINES), WRAPPING_ROW_HEIGHT)


def render_table(frame: pd.DataFrame, column_config: Mapping[str, Any] | None = None, wrap: bool = False) -> None:
    """A read-only table whose absent values read "—"; with ``wrap``, rows are as tall as the
    longest text of its fixed-width text columns needs (a clicked cell shows all of its text)."""
    st.dataframe(frame, hide_index=True, placeholder=ABSENT, column_config=column_config,
                 row_height=row_height(frame, column_config) if wrap else None)


def select_row(frame: pd.DataFrame, key: str, column_config: Mapping[str, Any] | None = None,
               wrap: bool = False) -> int | None:
    """A table like :func:`render_table` whose rows can be selected; the selected row's position."""
    event = st.dataframe(frame, hide_index=True, placeholder=ABSENT, column_config=column_config,
                         row_height=row_height(frame, column_config) if wrap else None, key=key,
                         on_select="rerun", selection_mode="single-row")
    rows = event.selection.rows if event is not None else []  # type: ignore[union-attr]
    return int(rows[0]) if rows else None


def run_label(run: RunSummary) -> str:
    return f"{run.run_id} · {run.model} · {run.proposer} · {run.status}"


def card_label(card: CardSummary) -> str:
    best = f" · {speedup_text(card.speedup)}" if card.speedup is not None else ""
    return f"{card.op} [{card.card_id[:8]}] · {card.time_share:.1%} · {card.status}{best}"

"""How the dashboard writes a figure where tables and views alike show it (pure: no Streamlit)."""

from __future__ import annotations

#: How every page shows a value that is absent (not measured, not reached, not applicable).
ABSENT = "—"


def spread_text(median: float | None, spread: float | None, unit: str = "") -> str:
    """A timed median and its spread (interquartile range), ``500.00 ± 5.00 µs``; ABSENT for a
    median not measured, and in the spread's place for a spread not recorded."""
    if median is None:
        return ABSENT
    text = f"{median:.2f} ± " + (f"{spread:.2f}" if spread is not None else ABSENT)
    return f"{text} {unit}" if unit else text

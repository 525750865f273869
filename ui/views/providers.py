"""Proposers compared on one model: speedup reached against dollars and evaluations spent."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from ui.views.formatting import USD_COLUMN, number_column, render_table, text_column


def speedup_column(frame: pd.DataFrame) -> str:
    """The measured end-to-end speedup where any run has one, else the per-card geometric mean."""
    return "e2e speedup" if frame["e2e speedup"].notna().any() else "card speedup (geomean)"


def spend_chart(frame: pd.DataFrame, spend: str) -> alt.Chart:
    """Each run as a point: ``spend`` across, speedup up, one colour per proposer."""
    y = speedup_column(frame)
    return (
        alt.Chart(frame.dropna(subset=[y]))
        .mark_circle(size=120)
        .encode(
            x=alt.X(f"{spend}:Q", title=spend),
            y=alt.Y(f"{y}:Q", title=y, scale=alt.Scale(zero=False), axis=alt.Axis(format=".2f")),
            color=alt.Color("proposer:N"),
            tooltip=["proposer", "run", alt.Tooltip(f"{y}:Q", format=".2f"), spend],
        )
    )


#: Fixed widths that fit the page at 1400 px.
PROVIDER_COLUMNS = {
    "proposer": text_column(110), "run": text_column(162), "status": text_column(66),
    "e2e speedup": number_column(90, "×%.2f"),
    "card speedup (geomean)": number_column(100, "×%.2f", "card speedup",
                                            help="geometric mean over the searched cards, 1.0 where eager stays"),
    "cards improved": number_column(105), "cost $": USD_COLUMN, "evaluations": number_column(85),
    "LLM calls": number_column(75),
}


def render_comparison(model: str, frame: pd.DataFrame) -> None:
    if frame.empty:
        st.info(f"No runs of {model} yet.")
        return
    render_table(frame, column_config=PROVIDER_COLUMNS)
    if frame["proposer"].nunique() < 2:
        st.info("Only one proposer has optimised this model so far; start a run with another "
                "(e.g. a litellm model string) on the Runs page to compare.")
    y = speedup_column(frame)
    if frame[y].isna().all():
        st.info("No run of this model has a speedup yet.")
        return
    left, right = st.columns(2)
    with left:
        st.markdown(f"**{y} against dollars**")
        st.altair_chart(spend_chart(frame, "cost $"))
    with right:
        st.markdown(f"**{y} against evaluations**")
        st.altair_chart(spend_chart(frame, "evaluations"))

"""Providers: runs of one model with different proposers, speedup against spend."""

import streamlit as st

from ui import state
from ui.selection import choose
from ui.tables import providers_frame
from ui.views import providers as view

st.title("Providers")
runs = state.fetch(state.list_runs)
if not runs:
    st.info("No runs yet: start one on the Runs page.")
    st.stop()
models = sorted({r.model for r in runs})


def comparison_weight(model: str) -> tuple[int, int]:
    """Models compared across the most proposers first, then those with the most finished runs."""
    of_model = [r for r in runs if r.model == model]
    return len({r.proposer for r in of_model}), sum(r.status == "done" for r in of_model)


most_compared = max(models, key=comparison_weight)
model = choose("Model", "model", models, page="providers", default=most_compared)
of_model = [r for r in runs if r.model == model]
cards = {r.run_id: state.fetch(state.list_cards, r.run_id) for r in of_model}
view.render_comparison(model, providers_frame(of_model, cards))

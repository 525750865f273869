"""Run: live progress, the card table and where the model's time goes."""

import streamlit as st

from ui import state
from ui.client import ForgeError
from ui.selection import choose
from ui.views import run as view
from ui.views.formatting import card_label, run_label

LIVE_REFRESH_S = 2.0

st.title("Run")
runs = state.fetch(state.list_runs)
if not runs:
    st.info("No runs yet: start one on the Runs page.")
    st.stop()
labels = {r.run_id: run_label(r) for r in runs}
run_id = choose("Run", "run", list(labels), page="run", format_func=labels.__getitem__)
opened = state.fetch(state.get_run, run_id)


@st.fragment(run_every=LIVE_REFRESH_S if opened.active else None)
def live_progress() -> None:
    run = state.fetch(state.get_run, run_id)
    view.render_progress(run)
    if run.status == "done":
        view.render_end_to_end(state.fetch(state.end_to_end, run_id))
    cards = state.fetch(state.list_cards, run_id)
    view.render_card_table(cards)
    view.render_time_plot(cards)
    searched = [c for c in cards if c.evaluations]
    if searched:
        st.subheader("Cards searched")
        for card in searched:
            st.page_link("pages/card.py", label=card_label(card), query_params={"run": run_id, "card": card.card_id})
    if opened.active and not run.active:
        st.rerun()


live_progress()

if opened.active and st.button("Cancel this run"):
    try:
        state.forge_client().cancel_run(run_id)
    except ForgeError as exc:
        st.error(str(exc))
    state.forget_cached_answers()
    st.rerun()
if opened.status == "done":
    try:
        view.render_report(state.forge_client().report_markdown(run_id))
    except ForgeError as exc:
        st.info(f"No report: {exc}")

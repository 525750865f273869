"""Run: live progress and phase, the activity feed, the card table and where the model's time goes."""

import time

import streamlit as st

from ui import state
from ui.client import ForgeError
from ui.failures import failed_count
from ui.run_story import run_story
from ui.selection import choose_run
from ui.views import activity
from ui.views import run as view
from ui.views.formatting import card_label

LIVE_REFRESH_S = 2.0

st.title("Run")
run_id = choose_run(state.fetch(state.list_runs), page="run")
opened = state.fetch(state.get_run, run_id)


@st.fragment(run_every=LIVE_REFRESH_S if opened.active else None)
def live_progress() -> None:
    run = state.fetch(state.get_run, run_id)
    events = state.fetch(state.run_events, run_id)
    view.render_progress(run)
    activity.render_story(run, run_story(run, events, time.time()))
    if run.status == "done":
        view.render_end_to_end(state.fetch(state.end_to_end, run_id))
    cards = state.fetch(state.list_cards, run_id)
    view.render_card_table(cards)
    searched = [c for c in cards if c.evaluations]
    if searched:
        st.subheader("Cards searched")
        for card in searched:
            st.page_link("screens/card.py", label=card_label(card), query_params={"run": run_id, "card": card.card_id})
        failed = failed_count([state.fetch(state.card_tree, run_id, c.card_id) for c in searched])
        if failed:
            st.page_link("screens/failures.py", icon=":material/bug_report:", query_params={"run": run_id},
                         label=f"{failed} failed candidate{'s' if failed != 1 else ''}: their errors and logs")
        else:
            st.caption("No candidate failed.")
    activity.render_feed(run, events)
    view.render_time_plot(cards)
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

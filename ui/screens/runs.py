"""Runs: every run, starting a new one and cancelling one."""

import streamlit as st

from ui import state
from ui.client import ForgeError
from ui.views import runs as view

st.title("Runs")
table = st.container()

run_id = view.cancel_run_picker(state.fetch(state.list_runs))
if run_id:
    try:
        cancelled = state.forge_client().cancel_run(run_id)
        st.success(f"Run {cancelled.run_id} is {cancelled.status}.")
    except ForgeError as exc:
        st.error(str(exc))
    state.forget_cached_answers()

config = view.start_run_form()
if config is not None:
    try:
        started = state.forge_client().start_run(config)
        st.success(f"Started run {started.run_id} ({started.status}).")
        st.page_link("screens/run.py", label=f"Follow run {started.run_id}", query_params={"run": started.run_id})
    except ForgeError as exc:
        st.error(str(exc))
    state.forget_cached_answers()

with table:
    runs = state.fetch(state.list_runs)
    view.render_runs_table(runs)
    view.render_open_run(runs)

"""Failures: every candidate of a run that did not pass, by how it failed, with its error, log and source."""

import streamlit as st

from ui import state
from ui.failures import failures_by_status
from ui.selection import choose_run
from ui.views import failures as view

#: Candidates whose error, log and source are read at once; the rest link to the Candidate page.
DETAILED = 40

st.title("Failures")
run_id = choose_run(state.fetch(state.list_runs), page="failures")
cards = [c for c in state.fetch(state.list_cards, run_id) if c.evaluations]
if not cards:
    st.info("No card of this run has been searched yet, so no candidate has failed.")
    st.stop()
trees = [state.fetch(state.card_tree, run_id, c.card_id) for c in cards]
groups = failures_by_status(cards, trees)
view.render_summary(groups, sum(n.status != "PENDING" for t in trees for n in t.nodes))
if not groups:
    st.success("No candidate of this run failed.")
    st.stop()
detailed = 0
for status, failed in groups.items():
    st.subheader(view.status_title(status, len(failed)))
    for item in failed:
        detail = state.fetch(state.candidate, run_id, item.node.candidate_id) if detailed < DETAILED else None
        detailed += 1
        view.render_failure(run_id, item, detail)
if detailed > DETAILED:
    st.caption(f"The first {DETAILED} failures show their error, log and source here; the others on the Candidate "
               "page.")

"""Candidate: source, diff against its parent, logs, numerics, timings and LLM exchanges."""

import streamlit as st

from ui import state
from ui.selection import choose, choose_run
from ui.views import candidate as view
from ui.views.formatting import card_label, verdict_text

st.title("Candidate")
run_id = choose_run(state.fetch(state.list_runs), page="candidate")
cards = [c for c in state.fetch(state.list_cards, run_id) if c.evaluations]
if not cards:
    st.info("No card of this run has candidates yet.")
    st.stop()
by_id = {c.card_id: c for c in cards}
card_id = choose("Card", "card", list(by_id), page="candidate", format_func=lambda i: card_label(by_id[i]))
tree = state.fetch(state.card_tree, run_id, card_id)
nodes = {n.candidate_id: n for n in tree.nodes}
if not nodes:
    st.info("This card has no candidates yet.")
    st.stop()


def candidate_label(candidate_id: str) -> str:
    node = nodes[candidate_id]
    best = " · best" if candidate_id == tree.best_candidate_id and tree.best_beats_eager else ""
    return f"#{node.order} {candidate_id} · {verdict_text(node.status, node.speedup)}{best} · {node.description[:60]}"


candidate_id = choose("Candidate", "candidate", list(nodes), page="candidate", format_func=candidate_label,
                      default=tree.best_candidate_id)
cand = state.fetch(state.candidate, run_id, candidate_id)
parent = state.fetch(state.candidate, run_id, cand.parent_id) if cand.parent_id else None

view.render_verdict(cand)
source_tab, diff_tab, log_tab, llm_tab = st.tabs(["Source", "Diff against parent", "Logs", "LLM"])
with source_tab:
    view.render_source(cand)
with diff_tab:
    view.render_diff(cand, parent)
with log_tab:
    view.render_logs(cand)
with llm_tab:
    view.render_llm(cand)

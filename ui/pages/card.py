"""Card: the MCTS revision tree of one card and its candidates."""

import streamlit as st

from ui import state
from ui.selection import choose
from ui.views import card as view
from ui.views.formatting import card_label, run_label

st.title("Card")
runs = state.fetch(state.list_runs)
if not runs:
    st.info("No runs yet: start one on the Runs page.")
    st.stop()
run_labels = {r.run_id: run_label(r) for r in runs}
run_id = choose("Run", "run", list(run_labels), page="card", format_func=run_labels.__getitem__)
cards = [c for c in state.fetch(state.list_cards, run_id) if c.optimisable or c.evaluations]
if not cards:
    st.info("This run has no cards yet.")
    st.stop()
by_id = {c.card_id: c for c in cards}
searched = [c.card_id for c in cards if c.evaluations]
card_id = choose("Card", "card", list(by_id), page="card", format_func=lambda i: card_label(by_id[i]),
                 default=searched[0] if searched else None)
card = by_id[card_id]
view.render_card_header(card)
tree = state.fetch(state.card_tree, run_id, card_id)
view.render_tree(tree)
view.render_candidates(tree)
if tree.nodes:
    ids = [n.candidate_id for n in tree.nodes]
    default = tree.best_candidate_id or ids[0]
    chosen = st.selectbox("Candidate", ids, index=ids.index(default) if default in ids else 0)
    st.page_link("pages/candidate.py", label=f"Open candidate {chosen}",
                 query_params={"run": run_id, "card": card_id, "candidate": chosen})

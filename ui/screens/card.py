"""Card: the MCTS revision tree of one card and its candidates, each a way to open one."""

from urllib.parse import urlencode

import streamlit as st

from ui import state
from ui.selection import choose, choose_run
from ui.views import card as view
from ui.views.formatting import card_label

st.title("Card")
run_id = choose_run(state.fetch(state.list_runs), page="card")
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


def candidate_query(candidate_id: str) -> dict[str, str]:
    return {"run": run_id, "card": card_id, "candidate": candidate_id}


view.render_tree(tree, link=lambda candidate_id: "candidate?" + urlencode(candidate_query(candidate_id)))
selected = view.render_candidates(tree)
if selected is not None:
    st.switch_page("screens/candidate.py", query_params=candidate_query(selected))
if tree.nodes:
    ids = [n.candidate_id for n in tree.nodes]
    default = tree.best_candidate_id or ids[0]
    chosen = st.selectbox("Candidate", ids, index=ids.index(default) if default in ids else 0)
    st.page_link("screens/candidate.py", label=f"Open candidate {chosen}", query_params=candidate_query(chosen))

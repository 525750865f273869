"""One card: its MCTS revision tree as a graph, and its candidates."""

from __future__ import annotations

import streamlit as st

from ui.models import CardSummary, CardTree
from ui.tables import candidates_frame
from ui.tree_graph import SPEEDUP_FILL, STATUS_FILL, card_tree_dot
from ui.views.formatting import SPEEDUP_COLUMN, TEXT_COLUMN, US_COLUMN, render_table, speedup_text, us_text

VISITS_COLUMN = st.column_config.NumberColumn(help="Evaluations in this candidate's subtree, failures counted")
VALUE_COLUMN = st.column_config.NumberColumn(
    format="%+.3f", help="Mean ln(eager / latency) of the subtree's passed evaluations: 0 is eager speed")


def render_card_header(card: CardSummary) -> None:
    st.caption(f"`{card.op}` · {card.kind} card · {card.call_count} calls · status {card.status}"
               + (f" ({card.reason})" if card.reason else ""))
    cols = st.columns(4)
    cols[0].metric("Time share", f"{card.time_share:.1%}")
    cols[1].metric("Eager", us_text(card.eager_us))
    cols[2].metric("Best", us_text(card.best_us))
    cols[3].metric("Speedup", speedup_text(card.speedup))


def render_tree(tree: CardTree) -> None:
    """The revision tree; blue outlines mark the best candidate and its ancestors."""
    st.subheader("Revision tree")
    if not tree.nodes:
        st.info("No candidates yet for this card.")
        return
    st.graphviz_chart(card_tree_dot(tree))
    entries = [(fill, text) for _, fill, text in SPEEDUP_FILL]
    entries += [(fill, status.lower()) for status, fill in STATUS_FILL.items() if status != "PASSED"]
    legend = " · ".join(
        f'<span style="background:{fill};padding:0 0.4em;border:1px solid #ced4da">{text}</span>'
        for fill, text in entries
    )
    st.html(f'<div style="font-size:0.8em">{legend} · <b style="color:#1f4fd1">best lineage</b>'
            " · n: evaluations in the subtree · v: its mean ln(eager / latency)</div>")


def render_candidates(tree: CardTree) -> None:
    st.subheader("Candidates")
    if not tree.nodes:
        return
    render_table(candidates_frame(tree), wrap=True,
                 column_config={"latency µs": US_COLUMN, "speedup": SPEEDUP_COLUMN, "visits": VISITS_COLUMN,
                                "value": VALUE_COLUMN, "description": TEXT_COLUMN})

"""One card: its MCTS revision tree as a graph, and its candidates."""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from ui.models import CardSummary, CardTree
from ui.numbers import spread_text
from ui.tables import candidates_frame
from ui.tree_graph import SPEEDUP_FILL, STATUS_FILL, card_tree_dot
from ui.views.formatting import HIDDEN, SPEEDUP_COLUMN, number_column, select_row, speedup_text, text_column


def render_card_header(card: CardSummary) -> None:
    st.caption(f"`{card.op}` · {card.kind} card · {card.call_count} calls · status {card.status}"
               + (f" ({card.reason})" if card.reason else ""))
    cols = st.columns(4)
    cols[0].metric("Time share", f"{card.time_share:.1%}")
    if card.eager_in_series:
        at_capture = spread_text(card.model_eager_us, card.model_eager_spread_us, "µs")
        cols[1].metric("Eager, same series as best", spread_text(card.eager_us, card.eager_spread_us, "µs"),
                       help="median ± IQR, timed interleaved with the best kernel, so Speedup is this over Best; "
                            f"in the model at capture: {at_capture}")
    else:
        cols[1].metric("Eager in the model", spread_text(card.eager_us, card.eager_spread_us, "µs"),
                       help="median ± IQR of the card's time in the model at capture; once a kernel passes, the "
                            "eager time measured beside it is shown")
    cols[2].metric("Best", spread_text(card.best_us, card.best_spread_us, "µs"),
                   help="median ± IQR of the best kernel's timed calls, in the same series as the eager time")
    cols[3].metric("Speedup", speedup_text(card.speedup))


def render_tree(tree: CardTree, link: Callable[[str], str] | None = None) -> None:
    """The revision tree, each node a link to its candidate; blue outlines mark the best candidate
    and its ancestors when it beats eager."""
    st.subheader("Revision tree")
    if not tree.nodes:
        st.info("No candidates yet for this card.")
        return
    st.graphviz_chart(card_tree_dot(tree, link))
    entries = [(fill, text) for _, fill, text in SPEEDUP_FILL]
    entries += [(fill, status.lower()) for status, fill in STATUS_FILL.items() if status != "PASSED"]
    legend = " · ".join(
        f'<span style="background:{fill};padding:0 0.4em;border:1px solid #ced4da">{text}</span>'
        for fill, text in entries
    )
    st.html(f'<div style="font-size:0.8em">{legend} · <b style="color:#1f4fd1">best lineage</b>'
            " · #: the order the search expanded the tree in · n: evaluations in the subtree"
            " · v: its mean ln(eager / latency) · click a node to open its candidate</div>")
    best = tree.node(tree.best_candidate_id)
    if best is not None and not tree.best_beats_eager:
        st.warning(f"No kernel beats eager for this card: the fastest that passed, {best.candidate_id}, runs at "
                   f"{speedup_text(best.speedup)}, so the .cast keeps eager PyTorch and no lineage is drawn.")


#: Fixed widths that fit the page at 1400 px beside the row markers; a candidate's depth shows in
#: the tree, and rows grow to fit the longest description.
CANDIDATE_COLUMNS = {
    "order": number_column(40, label="#", help="The order the search expanded the tree in"),
    "candidate": text_column(106), "parent": text_column(106), "depth": HIDDEN, "status": text_column(118),
    "latency µs": number_column(80, "%.2f"), "speedup": SPEEDUP_COLUMN,
    "visits": number_column(56, help="Evaluations in this candidate's subtree, failures counted"),
    "value": number_column(64, "%+.3f",
                           help="Mean ln(eager / latency) of the subtree's passed evaluations: 0 is eager speed"),
    "best lineage": st.column_config.CheckboxColumn("best", width=50,
                                                    help="the best candidate and its ancestors, when it beats eager"),
    "description": text_column(196),
}


def render_candidates(tree: CardTree) -> str | None:
    """The candidates table; the id of the candidate whose row was selected, if one was."""
    st.subheader("Candidates")
    if not tree.nodes:
        return None
    st.caption("Select a row to open its candidate.")
    rows = select_row(candidates_frame(tree), key=f"candidates:{tree.card_id}", wrap=True,
                      column_config=CANDIDATE_COLUMNS)
    return tree.nodes[rows].candidate_id if rows is not None else None

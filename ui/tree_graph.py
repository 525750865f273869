"""A card's revision tree as Graphviz DOT: passed nodes coloured by their speedup against eager,
the others by status; labelled by the order the search expanded the tree in, speedup and the
search's statistics of their subtree (visits, value); each node a link to its candidate.

The browser renders DOT (``st.graphviz_chart``), so no Graphviz binary is needed. The root is
eager PyTorch; the best candidate and its ancestors, when it beats eager, are drawn with heavy
blue outlines and edges.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ui.models import CardTree, TreeNode

ROOT_ID = "__eager__"
BEST_COLOUR = "#1f4fd1"
STATUS_FILL = {
    "PASSED": "#b7e4c7",
    "WRONG_RESULT": "#ffd8a8",
    "COMPILE_ERROR": "#ffb3b3",
    "RUNTIME_ERROR": "#f28b82",
    "TIMEOUT": "#d0bfff",
    "REJECTED": "#dee2e6",
    "PENDING": "#ffffff",
}
UNKNOWN_FILL = "#f1f3f5"
#: Fills of passed candidates by speedup against eager: (upper bound, fill, legend), in order.
SPEEDUP_FILL = (
    (1.0, "#ffe8cc", "passed, no faster than eager"),
    (1.5, "#d3f9d8", "passed, up to ×1.5"),
    (3.0, "#8ce99a", "passed, up to ×3"),
    (float("inf"), "#40c057", "passed, ×3 and more"),
)


def node_fill(node: TreeNode) -> str:
    """A passed candidate's fill by its speedup (the status's own without one), else its status's."""
    if node.status == "PASSED" and node.speedup is not None:
        return next(fill for bound, fill, _ in SPEEDUP_FILL if node.speedup <= bound)
    return STATUS_FILL.get(node.status, UNKNOWN_FILL)


def _quote(text: str) -> str:
    """A DOT string literal (JSON escaping is a subset DOT accepts)."""
    return json.dumps(text, ensure_ascii=False)


def node_label(node: TreeNode) -> str:
    """Short id and expansion order, then the speedup when it passed, else the status, then
    visits and value."""
    verdict = f"×{node.speedup:.2f}" if node.status == "PASSED" and node.speedup is not None else node.status.lower()
    order = f" #{node.order}" if node.order else ""
    return f"{short_id(node.candidate_id)}{order}\n{verdict}\n{search_stats(node)}"


def search_stats(node: TreeNode) -> str:
    """``n=3 v=+0.41``: the subtree's visits and value (``v=—`` while nothing in it passed)."""
    value = f"{node.value:+.2f}" if node.value is not None else "—"
    return f"n={node.visits} v={value}"


def short_id(candidate_id: str) -> str:
    """Enough of a candidate id to tell it apart on a graph."""
    return candidate_id[:8]


def card_tree_dot(tree: CardTree, link: Callable[[str], str] | None = None) -> str:
    """DOT source of the tree, top to bottom, eager PyTorch at the root; with ``link``, clicking a
    node opens ``link(candidate_id)`` in the same tab."""
    lineage = set(tree.best_lineage())
    lines = [
        "digraph revisions {",
        '  graph [rankdir=TB, bgcolor="transparent", nodesep=0.25, ranksep=0.35];',
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, penwidth=1];',
        '  edge [color="#868e96", arrowsize=0.6];',
        f'  {_quote(ROOT_ID)} [label="eager\\nPyTorch", fillcolor="#e9ecef", shape=ellipse];',
    ]
    known = {n.candidate_id for n in tree.nodes}
    for node in tree.nodes:
        best = node.candidate_id in lineage
        attrs = {
            "label": node_label(node),
            "fillcolor": node_fill(node),
            "tooltip": node.description or node.candidate_id,
        }
        if link is not None:
            attrs |= {"URL": link(node.candidate_id), "target": "_self"}
        extra = f', color="{BEST_COLOUR}", penwidth=3' if best else ""
        rendered = ", ".join(f"{k}={_quote(v)}" for k, v in attrs.items())
        lines.append(f"  {_quote(node.candidate_id)} [{rendered}{extra}];")
        parent = node.parent_id if node.parent_id in known else ROOT_ID
        edge = f' [color="{BEST_COLOUR}", penwidth=2.5]' if best else ""
        lines.append(f"  {_quote(parent)} -> {_quote(node.candidate_id)}{edge};")
    lines.append("}")
    return "\n".join(lines)

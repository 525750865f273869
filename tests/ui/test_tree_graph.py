from __future__ import annotations

import re
from dataclasses import replace

from tests.ui import factories
from ui.models import CardTree
from ui.tree_graph import BEST_COLOUR, ROOT_ID, SPEEDUP_FILL, STATUS_FILL, card_tree_dot, node_fill, node_label


def _node_line(dot: str, candidate_id: str) -> str:
    return next(line for line in dot.splitlines() if line.strip().startswith(f'"{candidate_id}" ['))


def test_nodes_are_coloured_by_status_and_labelled_by_speedup() -> None:
    dot = card_tree_dot(factories.tree())
    assert node_fill(factories.node("k", speedup=2.5)) in _node_line(dot, "k3") and "×2.50" in _node_line(dot, "k3")
    assert STATUS_FILL["COMPILE_ERROR"] in _node_line(dot, "k2") and "compile_error" in _node_line(dot, "k2")
    assert STATUS_FILL["WRONG_RESULT"] in _node_line(dot, "k4")


def test_passed_nodes_are_coloured_by_their_speedup_against_eager() -> None:
    slower, modest, good, great = (fill for _, fill, _ in SPEEDUP_FILL)
    assert node_fill(factories.node("a", speedup=0.87)) == slower
    assert node_fill(factories.node("a", speedup=1.0)) == slower  # no gain is no reason to ship it
    assert node_fill(factories.node("a", speedup=1.2)) == modest
    assert node_fill(factories.node("a", speedup=2.5)) == good
    assert node_fill(factories.node("a", speedup=12.0)) == great
    assert node_fill(factories.node("a", speedup=None)) == STATUS_FILL["PASSED"]
    assert node_fill(factories.node("a", status="TIMEOUT", speedup=None)) == STATUS_FILL["TIMEOUT"]
    assert len({slower, modest, good, great, *STATUS_FILL.values()}) == len(SPEEDUP_FILL) + len(STATUS_FILL)


def test_the_best_lineage_is_highlighted_and_nothing_else() -> None:
    dot = card_tree_dot(factories.tree("k3"))
    highlighted = {m for m in re.findall(r'^\s+"(\w+)" \[.*' + BEST_COLOUR, dot, re.MULTILINE)}
    assert highlighted == {"k1", "k3"}
    assert f'"{ROOT_ID}" -> "k1" [color="{BEST_COLOUR}"' in dot
    assert f'"k1" -> "k3" [color="{BEST_COLOUR}"' in dot
    assert '"k1" -> "k2";' in dot and f'"{ROOT_ID}" -> "k4";' in dot


def test_first_revisions_and_orphans_hang_from_eager() -> None:
    tree = CardTree("c", (factories.node("a"), factories.node("b", "gone")), "")
    dot = card_tree_dot(tree)
    assert f'"{ROOT_ID}" -> "a";' in dot and f'"{ROOT_ID}" -> "b";' in dot


def test_descriptions_with_quotes_cannot_break_the_graph() -> None:
    tree = CardTree("c", (factories.node("a", description='use "restrict"\\ and {braces}'),), "a")
    dot = card_tree_dot(tree)
    assert r'tooltip="use \"restrict\"\\ and {braces}"' in dot
    assert dot.count("{") - dot.count("{braces}") == dot.count("}") - dot.count("{braces}")


def test_label_shows_status_when_not_passed() -> None:
    label = node_label(factories.node("abcdefghijkl", status="TIMEOUT", speedup=None, value=None))
    assert label == "abcdefgh\ntimeout\nn=1 v=—"


def test_label_shows_the_order_the_search_expanded_the_tree_in() -> None:
    assert node_label(replace(factories.node("abcdefghijkl", speedup=2.0), order=4)).startswith("abcdefgh #4\n")


def test_each_node_links_to_its_candidate_and_the_root_to_nothing() -> None:
    dot = card_tree_dot(factories.tree(), link=lambda candidate_id: f"candidate?candidate={candidate_id}")
    for candidate_id in ("k1", "k2", "k3", "k4"):
        assert f'URL="candidate?candidate={candidate_id}", target="_self"' in _node_line(dot, candidate_id)
    assert "URL" not in _node_line(dot, ROOT_ID) and "URL" not in card_tree_dot(factories.tree())


def test_a_best_slower_than_eager_gets_no_lineage() -> None:
    tree = CardTree("c", (factories.node("a", speedup=0.87), factories.node("b", "a", "COMPILE_ERROR", None)), "a")
    assert BEST_COLOUR not in card_tree_dot(tree)
    assert node_fill(tree.nodes[0]) == SPEEDUP_FILL[0][1]


def test_label_shows_the_visits_and_value_of_the_subtree() -> None:
    label = node_label(factories.node("abcdefghijkl", speedup=2.0, visits=3, value=0.4581))
    assert label == "abcdefgh\n×2.00\nn=3 v=+0.46"

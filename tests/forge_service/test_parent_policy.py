"""Parent picks by policy on a real search tree: MCTS asks the tree, greedy refines the fastest
passed candidate, beam takes the three fastest in turn, least revised first."""

from __future__ import annotations

import pytest

from forge_service.parent_policy import BEAM_WIDTH, POLICIES, ROOT, pick_parents
from search_core import SearchConfig, SearchTree


def tree_with(latencies: list[float | None]) -> SearchTree:
    """A root with one child per latency (None: the child failed)."""
    tree = SearchTree(SearchConfig(seed=3), reference_latency_us=10.0)
    for latency in latencies:
        node = tree.add_child(ROOT)
        tree.tell(node, latency is not None, latency, None)
    return tree


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_starts_from_the_root(policy: str) -> None:
    assert pick_parents(policy, tree_with([]), 2) == [ROOT, ROOT]


@pytest.mark.parametrize("policy", ["greedy", "beam"])
def test_failures_alone_leave_the_root_to_revise(policy: str) -> None:
    assert pick_parents(policy, tree_with([None, None]), 1) == [ROOT]


def test_greedy_revises_the_fastest_passed_candidate_for_every_pick() -> None:
    tree = tree_with([8.0, None, 5.0, 9.0])
    assert pick_parents("greedy", tree, 3) == [3, 3, 3]
    faster = tree.add_child(3)
    tree.tell(faster, True, 4.0, None)
    assert pick_parents("greedy", tree, 1) == [faster]


def test_beam_takes_the_fastest_in_turn_least_revised_first() -> None:
    tree = tree_with([8.0, 5.0, 9.0, 6.0, None])
    assert BEAM_WIDTH == 3
    assert pick_parents("beam", tree, 4) == [2, 4, 1, 2]  # 9.0 is outside the beam
    tree.add_child(2)
    tree.add_child(4)
    assert pick_parents("beam", tree, 1) == [1]


def test_mcts_picks_what_the_tree_asks_and_reserves_them() -> None:
    tree = tree_with([8.0, 5.0])
    twin = tree_with([8.0, 5.0])
    assert pick_parents("mcts", tree, 2) == twin.ask(2)
    assert tree.node(ROOT).in_flight == 2


def test_an_unknown_policy_is_named() -> None:
    with pytest.raises(ValueError, match="unknown search policy 'random'"):
        pick_parents("random", tree_with([]), 1)

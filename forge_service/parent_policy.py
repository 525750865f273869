"""Which candidates a card's search revises next: MCTS, or the loops it is measured against.

``mcts`` asks the tree (UCT with progressive widening and virtual loss, ``search_core``).
``greedy`` always revises the fastest passed candidate so far: linear refinement of the best,
from the root until one passes. ``beam`` revises the :data:`BEAM_WIDTH` fastest passed candidates
in turn, each pick the member revised least so far. All three grow the same tree with the same
proposer and budget, so runs that differ only in the policy compare the searches and nothing else
(``bench/gpu/search_policies.py``). Picks other than MCTS's are logged as ``pick`` operations: the
tree did not choose them, so a resumed run takes them from the log instead of asking again.
"""

from __future__ import annotations

from search_core import SearchTree

POLICIES = ("mcts", "greedy", "beam")
DEFAULT_POLICY = "mcts"
BEAM_WIDTH = 3
ROOT = 0


def pick_parents(policy: str, tree: SearchTree, n: int) -> list[int]:
    """``n`` parents to revise now, by ``policy`` (one of :data:`POLICIES`)."""
    if policy == "mcts":
        return tree.ask(n)
    if policy == "greedy":
        best = tree.best()
        return [ROOT if best is None else best] * n
    if policy == "beam":
        return _beam_picks(tree, n)
    raise ValueError(f"unknown search policy {policy!r}: one of {', '.join(POLICIES)}")


def _beam_picks(tree: SearchTree, n: int) -> list[int]:
    nodes = (tree.node(i) for i in range(len(tree)))
    beam = sorted((v for v in nodes if v.status == "passed" and v.latency_us is not None),
                  key=lambda v: (v.latency_us, v.id))[:BEAM_WIDTH]
    if not beam:
        return [ROOT] * n
    revisions = {v.id: len(tree.children(v.id)) for v in beam}
    rank = {v.id: position for position, v in enumerate(beam)}
    picks: list[int] = []
    for _ in range(n):
        pick = min(revisions, key=lambda node: (revisions[node], rank[node]))
        revisions[pick] += 1
        picks.append(pick)
    return picks

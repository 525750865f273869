"""A run's failed candidates: every evaluated candidate that did not pass, grouped by how it failed.

Pure (no Streamlit): read from the cards' revision trees, which hold every candidate's status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ui.models import CardSummary, CardTree, TreeNode

NOT_FAILED = ("PASSED", "PENDING")
#: Failure kinds in the order a user debugs them: it did not build, did not run, ran wrong, ran too long.
STATUS_ORDER = ("COMPILE_ERROR", "RUNTIME_ERROR", "WRONG_RESULT", "TIMEOUT", "REJECTED")
STATUS_MEANING = {
    "COMPILE_ERROR": "the source did not compile",
    "RUNTIME_ERROR": "the kernel crashed or returned an error",
    "WRONG_RESULT": "the kernel's outputs departed from eager's beyond the tolerance",
    "TIMEOUT": "the evaluation ran past its time limit",
    "REJECTED": "the sandbox refused it: forbidden by the kernel contract, or a suspect timing",
}


@dataclass(frozen=True)
class FailedCandidate:
    """One candidate that did not pass, with the card it was written for."""

    card: CardSummary
    node: TreeNode


def is_failure(node: TreeNode) -> bool:
    return node.status not in NOT_FAILED


def failed_count(trees: Sequence[CardTree]) -> int:
    return sum(is_failure(n) for tree in trees for n in tree.nodes)


def failures_by_status(cards: Sequence[CardSummary], trees: Sequence[CardTree]) -> dict[str, list[FailedCandidate]]:
    """The failed candidates of the cards, grouped by status (known kinds first), each group in
    card order, then in the order the search proposed them."""
    by_id = {c.card_id: c for c in cards}
    groups: dict[str, list[FailedCandidate]] = {}
    for tree in trees:
        card = by_id.get(tree.card_id)
        if card is None:
            continue
        for node in tree.nodes:
            if is_failure(node):
                groups.setdefault(node.status, []).append(FailedCandidate(card, node))
    rank = {status: i for i, status in enumerate(STATUS_ORDER)}
    return dict(sorted(groups.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))

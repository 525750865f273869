"""The search tree's one log: each card's tree operations in the run store, and their replay.

The tree keeps no files of its own. Every operation is a row of the store's ``tree_ops`` table,
written in the same SQLite transaction as the fact that caused it (a candidate row, a proposal,
a result; an ``ask`` is its own fact), so after a crash the log and the facts agree and replaying
the log into a new tree rebuilds the tree the search had, choice for choice.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from typing import Any

from forge_service.store import RunStore
from search_core import NodeView, SearchConfig, SearchError, SearchTree

TreeOp = tuple[str, dict[str, Any]]
"""An operation as the store keeps it: its name and its arguments (JSON)."""


class TreeLogError(RuntimeError):
    """A card's logged operations do not rebuild a tree: the run store is damaged."""


def ask_op(n: int, parents: list[int]) -> TreeOp:
    return "ask", {"n": n, "parents": parents}


def pick_op(n: int, parents: list[int]) -> TreeOp:
    """Parents a policy other than the tree's own chose (``forge_service.parent_policy``)."""
    return "pick", {"n": n, "parents": parents}


def add_child_op(parent: int, node: int, candidate_id: str) -> TreeOp:
    return "add_child", {"parent": parent, "node": node, "candidate": candidate_id}


def tell_op(node: int, passed: bool, latency_us: float | None, spread_us: float | None) -> TreeOp:
    return "tell", {"node": node, "passed": passed, "latency_us": latency_us, "spread_us": spread_us}


def cancel_op(node: int) -> TreeOp:
    return "cancel", {"node": node}


def card_seed(seed: int, card_id: str) -> int:
    """A card's own seed, derived from the run's."""
    return (seed * 1_000_003 + zlib.crc32(card_id.encode())) & 0xFFFF_FFFF


def new_card_tree(run_seed: int, card_id: str, eager_us: float | None) -> SearchTree:
    """The empty tree of a card: its root is eager PyTorch at the card's captured latency."""
    return SearchTree(SearchConfig(seed=card_seed(run_seed, card_id)), reference_latency_us=eager_us or 1.0)


@dataclass
class ReplayedTree:
    tree: SearchTree
    node_to_candidate: dict[int, str] = field(default_factory=dict)
    unexpanded: list[int] = field(default_factory=list)
    """Parents an ``ask`` chose that were not expanded yet (the process stopped in between), in
    the order they were chosen."""


def replay(card_id: str, tree: SearchTree, ops: list[TreeOp], *, choices: bool = True) -> ReplayedTree:
    """Applies a card's logged operations to ``tree`` (new, from :func:`new_card_tree`).

    With ``choices`` every ``ask`` is asked again and must choose what the log says (resume needs
    this). Without, asks are skipped: each node's results, visits and value come out the same,
    only the virtual losses of unexpanded picks (what the next ``ask`` would choose) are left out,
    so a run made by an older selection rule can still be shown.
    """
    out = ReplayedTree(tree)
    for seq, (op, args) in enumerate(ops, 1):
        try:
            _apply(out, op, args, choices)
        except (KeyError, TypeError, SearchError, TreeLogError) as exc:
            raise TreeLogError(f"card {card_id}: tree operation {seq} ({op} {json.dumps(args)}) does not replay: "
                               f"{exc}") from exc
    return out


def _apply(out: ReplayedTree, op: str, args: dict[str, Any], choices: bool) -> None:
    tree = out.tree
    if op == "ask":
        if choices:
            got = tree.ask(args["n"])
            if got != args["parents"]:
                raise TreeLogError(f"ask chose {got} on replay, the log has {args['parents']}")
            out.unexpanded += got
    elif op == "pick":  # chosen by a policy, not the tree: nothing to ask again
        if choices:
            out.unexpanded += args["parents"]
    elif op == "add_child":
        if args["parent"] in out.unexpanded:
            out.unexpanded.remove(args["parent"])
        node = tree.add_child(args["parent"])
        if node != args["node"]:
            raise TreeLogError(f"add_child made node {node} on replay, the log has {args['node']}")
        out.node_to_candidate[node] = args["candidate"]
    elif op == "tell":
        tree.tell(args["node"], args["passed"], args["latency_us"], args["spread_us"])
    elif op == "cancel":
        tree.cancel(args["node"])
    else:
        raise TreeLogError(f"unknown tree operation {op!r}")


def candidate_nodes(store: RunStore, card_id: str, run_seed: int) -> dict[str, NodeView]:
    """Each candidate of a card with its node of the card's tree, rebuilt from the log (its
    visits and value included)."""
    card = json.loads(store.card(card_id).card_json)
    replayed = replay(card_id, new_card_tree(run_seed, card_id, card.get("eager_us")), store.tree_ops(card_id),
                      choices=False)
    return {candidate: replayed.tree.node(node) for node, candidate in replayed.node_to_candidate.items()}

"""The public search tree: a thread-safe wrapper of the native (Rust) core."""

from __future__ import annotations

from search_core import _native
from search_core.config import SearchConfig
from search_core.errors import InvalidArgumentError
from search_core.node import NodeStatus, NodeView


class SearchTree:
    """An MCTS tree over kernel revisions that minimises latency.

    Node 0 is the eager baseline measured at ``reference_latency_us``. The forge loop asks for
    parents, adds one pending child per parent, and tells each child's result::

        for parent in tree.ask(n):
            child = tree.add_child(parent)
            ...  # propose and evaluate a revision of ``parent``
            tree.tell(child, passed=True, latency_us=12.5)

    The tree keeps no files: a caller that must survive a crash logs each operation with the
    fact that caused it and replays the log into a new tree (``forge_service.tree_log``), which
    reproduces the tree exactly. :meth:`snapshot` / :meth:`restore` give its exact serialised
    form. Methods may be called from several threads; the native tree runs its calls one at a
    time.
    """

    def __init__(self, config: SearchConfig, reference_latency_us: float) -> None:
        native = _native.NativeTree(
            config.seed,
            config.exploration,
            config.widen_k,
            config.widen_alpha,
            config.virtual_loss,
            config.max_weight,
            config.widen_alpha_end,
            config.widen_anneal_evaluations,
            reference_latency_us,
        )
        self._adopt(native)

    @classmethod
    def restore(cls, data: bytes) -> SearchTree:
        """Rebuilds a tree from :meth:`snapshot` bytes (raises :class:`InvalidSnapshotError`)."""
        tree = cls.__new__(cls)
        tree._adopt(_native.NativeTree.restore(data))
        return tree

    def _adopt(self, native: _native.NativeTree) -> None:
        self._native = native
        self.config = SearchConfig(*native.config())

    @property
    def reference_latency_us(self) -> float:
        return self._native.reference_latency_us

    def ask(self, n: int) -> list[int]:
        """``n`` parents to revise (a node may repeat); each holds a virtual loss until its child
        is told or cancelled, or the pick is given back with :meth:`release`."""
        if not (type(n) is int or (isinstance(n, int) and not isinstance(n, bool))) or n < 0:
            raise InvalidArgumentError(f"n must be an integer >= 0, got {n!r}")
        return self._native.ask(n)

    def release(self, parent_id: int) -> None:
        """Gives back one parent pick of :meth:`ask` that will not be expanded."""
        self._native.release(parent_id)

    def add_child(self, parent_id: int) -> int:
        """A new pending candidate under ``parent_id`` (the root or a passed node)."""
        return self._native.add_child(parent_id)

    def tell(self, child_id: int, passed: bool, latency_us: float | None, spread_us: float | None = None) -> None:
        """The result of a pending candidate: a latency when it passed, none when it failed."""
        self._native.tell(child_id, passed, latency_us, spread_us)

    def cancel(self, child_id: int) -> None:
        """A pending candidate's evaluation was lost: it becomes failed-not-evaluated."""
        self._native.cancel(child_id)

    def best(self) -> int | None:
        """The passed candidate with the lowest latency, if any (the root is never returned)."""
        return self._native.best()

    def node(self, node_id: int) -> NodeView:
        raw = self._native.node(node_id)
        ident, parent, depth, status, cancelled, latency, spread, visits, value, best_reward, in_flight = raw
        node_status: NodeStatus = status  # type: ignore[assignment]
        return NodeView(
            id=ident,
            parent=parent,
            depth=depth,
            status=node_status,
            latency_us=latency,
            spread_us=spread,
            visits=visits,
            value=value,
            in_flight=in_flight,
            cancelled=cancelled,
            best_reward=best_reward,
        )

    def ancestors(self, node_id: int) -> list[int]:
        """Parent, grandparent, ... up to the root, nearest first."""
        return self._native.ancestors(node_id)

    def best_descendant(self, node_id: int) -> int | None:
        """The fastest passed node strictly below ``node_id``, if any."""
        return self._native.best_descendant(node_id)

    def failed_siblings(self, node_id: int) -> list[int]:
        """Failed children of ``node_id``'s parent other than ``node_id``, oldest first."""
        return self._native.failed_siblings(node_id)

    def children(self, node_id: int) -> list[int]:
        return self._native.children(node_id)

    def snapshot(self) -> bytes:
        """The whole tree as bytes for :meth:`restore` (equal trees give equal bytes)."""
        return self._native.snapshot()

    def __len__(self) -> int:
        return len(self._native)

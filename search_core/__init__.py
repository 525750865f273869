"""search_core: the MCTS revision tree (Rust core, PyO3 bindings, exact snapshots)."""

from search_core._native import __version__
from search_core.config import SearchConfig
from search_core.errors import (
    InvalidArgumentError,
    InvalidSnapshotError,
    InvalidStateError,
    SearchError,
    UnknownNodeError,
)
from search_core.node import NodeStatus, NodeView
from search_core.tree import SearchTree

__all__ = [
    "InvalidArgumentError",
    "InvalidSnapshotError",
    "InvalidStateError",
    "NodeStatus",
    "NodeView",
    "SearchConfig",
    "SearchError",
    "SearchTree",
    "UnknownNodeError",
    "__version__",
]

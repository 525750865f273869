"""search_core: the MCTS revision tree (Rust core, PyO3 bindings, crash-safe persistence)."""

from search_core._native import __version__
from search_core.config import SearchConfig
from search_core.errors import (
    CorruptLogError,
    InvalidArgumentError,
    InvalidStateError,
    PersistenceError,
    SearchError,
    UnknownNodeError,
)
from search_core.node import NodeStatus, NodeView
from search_core.tree import SearchTree

__all__ = [
    "CorruptLogError",
    "InvalidArgumentError",
    "InvalidStateError",
    "NodeStatus",
    "NodeView",
    "PersistenceError",
    "SearchConfig",
    "SearchError",
    "SearchTree",
    "UnknownNodeError",
    "__version__",
]

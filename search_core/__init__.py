"""search_core: the MCTS revision tree (Rust core, PyO3 bindings)."""

from search_core._native import __version__

__all__ = ["__version__"]

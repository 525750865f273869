"""One exception hierarchy for the search tree; the native module raises these classes."""

from __future__ import annotations


class SearchError(Exception):
    """Base of every error the search tree raises."""


class InvalidArgumentError(SearchError, ValueError):
    """A value outside its domain: a non-positive latency, an out-of-range config value."""


class UnknownNodeError(SearchError, LookupError):
    """No node has the given id."""


class InvalidStateError(SearchError):
    """The operation does not fit the node's state (telling a node twice, revising a failed node)."""


class InvalidSnapshotError(SearchError, ValueError):
    """Snapshot bytes that do not describe a valid tree."""

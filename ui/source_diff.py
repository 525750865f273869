"""What a revision changed: a unified diff of a candidate's source against its parent's."""

from __future__ import annotations

import difflib


def source_diff(parent_source: str, source: str, parent_name: str = "parent", name: str = "candidate") -> str:
    """Unified diff text, empty when the sources are equal."""
    lines = difflib.unified_diff(
        parent_source.splitlines(keepends=True), source.splitlines(keepends=True),
        fromfile=parent_name, tofile=name, n=3,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)

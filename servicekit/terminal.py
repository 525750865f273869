"""Human output of the command-line tools: at most 100 columns, and no value cut short.

A value too long for its table column (an op name, a reason, a path) folds onto the cell's next
lines instead of ending in "…"; ids and numbers are never broken. A cell may hold two values on
two lines, named by a two-line header (``"op\\ncard"``). JSON for scripts is not wrapped at all.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from rich.console import Console
from rich.table import Table

COLUMNS = 100


def console(stderr: bool = False) -> Console:
    """A console as wide as the terminal up to ``COLUMNS``; ``COLUMNS`` wide when piped."""
    probe = Console(stderr=stderr)
    return Console(stderr=stderr, width=min(probe.width, COLUMNS) if probe.is_terminal else COLUMNS)


def folding_table(title: str, columns: Iterable[str], right: Collection[str] = (), whole: Collection[str] = ()
                  ) -> Table:
    """A table whose cells wrap at spaces and fold long words; ``right`` columns are right-justified,
    ``whole`` ones (ids, numbers) keep each value on one line and give their width up last."""
    table = Table(title=title)
    for name in columns:
        table.add_column(name, justify="right" if name in right else "left", overflow="fold", no_wrap=name in whole)
    return table

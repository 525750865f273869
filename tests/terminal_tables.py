"""Reading the command-line tools' box-drawn tables back, for tests of what a user sees."""

from __future__ import annotations

from servicekit.terminal import COLUMNS

Row = dict[str, list[str]]


def assert_fits(text: str) -> None:
    """Every line of ``text`` is at most ``COLUMNS`` wide, and nothing was cut short with "…"."""
    for line in text.splitlines():
        assert len(line) <= COLUMNS, f"{len(line)} columns: {line!r}"
    assert "…" not in text


def _cells(line: str, edge: str) -> list[str]:
    return [cell.strip() for cell in line.split(edge)[1:-1]]


def table_rows(text: str, anchor: str) -> list[Row]:
    """The rows of every table in ``text`` with an ``anchor`` column: per row, each column's lines by
    header (a two-line header reads ``"op\\ncard"``). A row starts at each line filling ``anchor``."""
    rows: list[Row] = []
    headers: list[list[str]] = []
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            headers, names = [], []
        elif line.startswith("┃"):
            headers.append(_cells(line, "┃"))
        elif line.startswith("┡"):
            names = ["\n".join(part for part in parts if part) for parts in zip(*headers, strict=True)]
        elif line.startswith("│") and anchor in names:
            cells = dict(zip(names, _cells(line, "│"), strict=True))
            if cells[anchor]:
                rows.append({name: [] for name in names})
            for name, cell in cells.items():
                if cell:
                    rows[-1][name].append(cell)
    return rows


def stacked(row: Row, column: str) -> tuple[str, str]:
    """The two values of a two-line column (``"op\\ncard"``): the first folded over its lines, the second
    whole on the last line."""
    *first, second = row[column]
    return "".join(first), second

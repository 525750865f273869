"""Every wide table's columns have fixed widths that fit the page at 1400 px, and wrapped rows are
as tall as their longest text needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import pytest

from tests.ui import factories
from ui.tables import candidates_frame, cards_frame, providers_frame, runs_frame
from ui.views.activity import FEED_COLUMNS
from ui.views.card import CANDIDATE_COLUMNS
from ui.views.failures import SUMMARY_COLUMNS
from ui.views.formatting import TABLE_WIDTH_PX, WRAPPING_ROW_HEIGHT, row_height, table_width, wrapped_lines
from ui.views.package import FALLBACK_COLUMNS, KERNEL_COLUMNS, REASON_COLUMNS
from ui.views.providers import PROVIDER_COLUMNS
from ui.views.run import CARD_COLUMNS
from ui.views.runs import RUNS_COLUMNS

ACTIVE = factories.run("a", status="running", evaluations_done=2, evaluations_budget=8)
TABLES: list[tuple[str, pd.DataFrame, Mapping[str, Any], bool]] = [
    ("runs with a progress column", runs_frame([ACTIVE, factories.run("b")]), RUNS_COLUMNS, False),
    ("cards", cards_frame([factories.card()]), CARD_COLUMNS, False),
    ("candidates", candidates_frame(factories.tree()), CANDIDATE_COLUMNS, True),
    ("activity", pd.DataFrame(columns=list(FEED_COLUMNS)), FEED_COLUMNS, False),
    ("failures", pd.DataFrame(columns=list(SUMMARY_COLUMNS)), SUMMARY_COLUMNS, False),
    ("kernels", pd.DataFrame(columns=list(KERNEL_COLUMNS)), KERNEL_COLUMNS, False),
    ("fallback reasons", pd.DataFrame(columns=list(REASON_COLUMNS)), REASON_COLUMNS, False),
    ("fallbacks", pd.DataFrame(columns=list(FALLBACK_COLUMNS)), FALLBACK_COLUMNS, False),
    ("providers", providers_frame([factories.run("b")], {}), PROVIDER_COLUMNS, False),
]


@pytest.mark.parametrize(("frame", "config", "selectable"), [t[1:] for t in TABLES], ids=[t[0] for t in TABLES])
def test_every_shown_column_has_a_width_and_together_they_fit(frame: pd.DataFrame, config: Mapping[str, Any],
                                                              selectable: bool) -> None:
    width = table_width(frame, config, selectable)
    assert width is not None and width <= TABLE_WIDTH_PX


def test_a_column_without_a_fixed_width_has_no_known_table_width() -> None:
    assert table_width(pd.DataFrame(columns=["run", "extra"]), {"run": RUNS_COLUMNS["run"]}) is None


def test_rows_grow_with_the_longest_wrapped_text() -> None:
    config = {"why": FALLBACK_COLUMNS["why"]}
    assert row_height(pd.DataFrame({"why": ["short"]}), config) is None
    assert wrapped_lines("word " * 200, 570) > 3
    tall = row_height(pd.DataFrame({"why": ["short", "word " * 200]}), config)
    assert tall is not None and tall > WRAPPING_ROW_HEIGHT
    assert row_height(pd.DataFrame({"why": ["word " * 5000]}), config) == row_height(
        pd.DataFrame({"why": ["word " * 9000]}), config)  # capped

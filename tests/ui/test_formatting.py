"""How values read on every page."""

from __future__ import annotations

from ui.numbers import spread_text
from ui.views.formatting import ABSENT, duration_text, us_text, verdict_text


def test_a_passed_kernel_slower_than_eager_says_so() -> None:
    assert verdict_text("PASSED", 0.87) == "passed, ×0.87 (slower than eager)"
    assert verdict_text("PASSED", 1.0) == "passed, ×1.00 (no faster than eager)"
    assert verdict_text("PASSED", 2.0) == "passed, ×2.00"
    assert verdict_text("COMPILE_ERROR", None) == "compile error" and verdict_text("", None) == ABSENT


def test_durations_read_in_the_largest_sensible_unit() -> None:
    assert [duration_text(s) for s in (None, 4.4, 185, 7_440)] == [ABSENT, "4 s", "3 min 05 s", "2 h 04 min"]


def test_a_timed_median_reads_with_its_spread_and_never_as_none() -> None:
    assert spread_text(500.0, 5.0, "µs") == "500.00 ± 5.00 µs" and spread_text(500.0, 5.0) == "500.00 ± 5.00"
    assert spread_text(500.0, None, "µs") == f"500.00 ± {ABSENT} µs"
    assert spread_text(None, 5.0, "µs") == spread_text(None, None) == ABSENT
    assert us_text(250.0) == "250.00 µs" and us_text(None) == ABSENT

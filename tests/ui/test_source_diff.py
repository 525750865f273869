from __future__ import annotations

from ui.source_diff import source_diff


def test_diff_names_both_sides_and_the_changed_line() -> None:
    diff = source_diff("a\nb\nc\n", "a\nB\nc\n", "p1", "k2")
    assert diff.splitlines()[:2] == ["--- p1", "+++ k2"]
    assert "-b" in diff.splitlines() and "+B" in diff.splitlines()


def test_equal_sources_give_no_diff_and_a_missing_final_newline_is_kept_readable() -> None:
    assert source_diff("x\n", "x\n") == ""
    diff = source_diff("x", "y")
    assert diff.endswith("+y\n") and "-x\n" in diff

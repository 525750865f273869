"""A candidate's timing series stops early only on whole rounds, once both medians are settled."""

from __future__ import annotations

from gpu_sandbox_service.harness.session import SETTLED_PAIRS, Session


def test_a_timing_series_stops_only_on_whole_rounds_with_both_medians_settled() -> None:
    quiet = [10.0] * SETTLED_PAIRS
    busy = [10.0, 14.0] * (SETTLED_PAIRS // 2)
    assert Session.settled(quiet, quiet)
    assert not Session.settled(quiet[:-2], quiet[:-2])  # fewer pairs than the minimum
    assert not Session.settled([*quiet, 10.0], [*quiet, 10.0])  # half a round
    assert not Session.settled(quiet, busy) and not Session.settled(busy, quiet)

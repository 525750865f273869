"""Where a run stands: its phase, elapsed time and estimate, from its status and events."""

from __future__ import annotations

import pytest

from tests.ui import factories
from ui.models import RunEvent
from ui.run_story import FINISHING, outcome_word, run_phase, run_story

START = 1_700_000_000.0


def _events(*kinds_and_messages: tuple[str, str]) -> list[RunEvent]:
    return [RunEvent(seq=i, timestamp=START + 10 * i, kind=kind, message=message)
            for i, (kind, message) in enumerate(kinds_and_messages)]


CAPTURING = _events(("status", "run started"), ("capture", "tracing: running the model"))
SEARCHING = [*CAPTURING, *_events(("card_started", "searching aten::relu.default (40.0% of eager time)"),
                                  ("candidate", "unroll: passed"))]


def test_a_running_run_reads_its_phase_from_its_latest_events() -> None:
    running = factories.run(status="running", cards_done=0, cards_total=2)
    assert run_phase(running, []) == "starting"
    assert run_phase(running, CAPTURING) == "capturing the model (tracing: running the model)"
    assert run_phase(running, SEARCHING) == "searching aten::relu.default (40.0% of eager time)"
    one_done = factories.run(status="running", cards_done=1, cards_total=2)
    assert run_phase(one_done, [*SEARCHING, *_events(("card_done", "relu: budget spent"))]) == "choosing the next card"
    all_done = factories.run(status="running", cards_done=2, cards_total=2)
    assert run_phase(all_done, [*SEARCHING, *_events(("card_done", "relu: budget spent"))]) == FINISHING


@pytest.mark.parametrize("status", ["done", "failed", "cancelled"])
def test_a_finished_run_reads_its_status_whatever_its_last_event(status: str) -> None:
    assert run_phase(factories.run(status=status), SEARCHING) == status
    assert run_phase(factories.run(status="pending"), []) == "waiting to start"


def test_a_live_run_estimates_the_search_left_at_its_pace_so_far() -> None:
    run = factories.run(status="running", created_at=START, evaluations_done=4, evaluations_budget=10)
    search_start = next(e.timestamp for e in SEARCHING if e.kind == "card_started")
    story = run_story(run, SEARCHING, now=search_start + 40.0)  # 10 s per evaluation, 6 left
    assert story.remaining_s == pytest.approx(60.0)
    assert story.elapsed_s == pytest.approx(search_start + 40.0 - START)


def test_the_estimate_never_passes_the_time_limit_and_waits_for_an_evaluation() -> None:
    run = factories.run(status="running", created_at=START, evaluations_done=1, evaluations_budget=100,
                        time_limit_s=120.0)
    assert run_story(run, SEARCHING, now=START + 100.0).remaining_s == pytest.approx(20.0)
    fresh = factories.run(status="running", created_at=START, evaluations_done=0)
    assert run_story(fresh, SEARCHING, now=START + 100.0).remaining_s is None
    assert run_story(fresh, CAPTURING, now=START + 100.0).remaining_s is None


def test_a_finished_run_took_from_its_first_event_to_its_last_and_has_no_estimate() -> None:
    story = run_story(factories.run(), SEARCHING, now=START + 10_000)
    assert story.elapsed_s == pytest.approx(SEARCHING[-1].timestamp - SEARCHING[0].timestamp)
    assert story.remaining_s is None
    without_events = run_story(factories.run(created_at=START, updated_at=START + 90), [], now=START + 10_000)
    assert without_events.elapsed_s == pytest.approx(90.0)


def test_a_finished_run_has_an_outcome_and_an_active_one_a_bar() -> None:
    assert outcome_word(factories.run()) == "budget spent"
    assert outcome_word(factories.run(evaluations_done=2, evaluations_budget=6)) == "stopped early"
    assert outcome_word(factories.run(status="cancelled", evaluations_done=1)) == "cancelled"
    assert outcome_word(factories.run(status="running")) is None

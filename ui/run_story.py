"""Where a run stands, told from its status and its event log: the phase it is in, how long it
has run, and how long its search should still take.

Pure (no Streamlit): the Run page shows these, the tests check them on hand-made events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ui.models import RunEvent, RunSummary

FINISHED_PHASES = {"done": "done", "failed": "failed", "cancelled": "cancelled"}
FINISHING = "packaging the .cast and timing the model end to end"


@dataclass(frozen=True)
class RunStory:
    """The run's phase, its elapsed time and, while it searches, the search time left."""

    phase: str
    elapsed_s: float | None
    remaining_s: float | None
    """Search time left at the pace so far (capped by the run's time limit); None: not known yet."""


def outcome_word(run: RunSummary) -> str | None:
    """How a finished run ended against its budget, in a word or two beside its evaluations done /
    budgeted; None while it is active (its progress bar says it). A finished run never shows a bar
    stuck at a share of its budget."""
    if run.active:
        return None
    if run.status == "done":
        return "budget spent" if run.evaluations_done >= run.evaluations_budget else "stopped early"
    return run.status


def run_phase(run: RunSummary, events: Sequence[RunEvent]) -> str:
    """What the run is doing: a finished run's status, else what its latest events say."""
    if run.status in FINISHED_PHASES:
        return FINISHED_PHASES[run.status]
    if run.status == "pending":
        return "waiting to start"
    phase = "starting"
    for event in events:
        if event.kind == "capture":
            phase = f"capturing the model ({event.message})"
        elif event.kind == "card_started":
            phase = event.message  # "searching <op> (<share> of eager time)"
        elif event.kind == "card_done":
            everything = run.cards_total > 0 and run.cards_done >= run.cards_total
            phase = FINISHING if everything else "choosing the next card"
        elif event.kind == "run_done":
            phase = "writing the report"
    return phase


def run_story(run: RunSummary, events: Sequence[RunEvent], now: float) -> RunStory:
    """The story at time ``now`` (unix seconds)."""
    start = events[0].timestamp if events else run.created_at
    end = now if run.active else (events[-1].timestamp if events else run.updated_at)
    elapsed = end - start if start and end >= start else None
    return RunStory(run_phase(run, events), elapsed, _search_left(run, events, now) if run.active else None)


def _search_left(run: RunSummary, events: Sequence[RunEvent], now: float) -> float | None:
    """The evaluations left times the time each one has taken since the search began."""
    search_start = next((e.timestamp for e in events if e.kind == "card_started"), None)
    if search_start is None or run.evaluations_done <= 0:
        return None
    per_evaluation = max(now - search_start, 0.0) / run.evaluations_done
    left = max(run.evaluations_budget - run.evaluations_done, 0) * per_evaluation
    if run.time_limit_s is not None:
        left = min(left, max(run.created_at + run.time_limit_s - now, 0.0))
    return left


"""How the run page words a finished run's use of its budget."""

from __future__ import annotations

from tests.ui import factories
from ui.views.run import outcome_text


def test_a_finished_run_reads_how_it_ended_against_its_budget() -> None:
    assert outcome_text(factories.run()) == "done: the evaluation budget is spent (6 of 6 budgeted evaluations)"
    early = outcome_text(factories.run(evaluations_done=4, evaluations_budget=8))
    assert early.startswith("done: stopped before its budget was spent, 4 of 8 budgeted evaluations")
    failed = outcome_text(factories.run(status="failed", evaluations_done=2))
    assert failed == "failed after 2 of 6 budgeted evaluations"
    assert outcome_text(factories.run(status="cancelled", evaluations_done=0)).startswith("cancelled after 0 of 6")

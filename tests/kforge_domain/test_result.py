import pytest

from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures


def test_a_passed_result_ranks_by_its_run_s_figures() -> None:
    result = CandidateResult("c1", RunFigures(CandidateStatus.PASSED, latency_us=5.0, eager_latency_us=20.0))
    assert result.passed and result.status == CandidateStatus.PASSED
    assert (result.latency_us, result.eager_latency_us, result.speedup) == (5.0, 20.0, 4.0)


def test_a_result_that_never_ran_has_no_figures() -> None:
    result = CandidateResult("c1", BuildFailure(CandidateStatus.COMPILE_ERROR, "expected ';'"), log_tail="x.cu:3")
    assert not result.passed and result.figures is None and result.error_message == "expected ';'"
    assert (result.latency_us, result.eager_latency_us, result.speedup) == (None, None, None)


def test_a_failed_run_keeps_what_it_measured_but_has_not_passed() -> None:
    result = CandidateResult("c1", RunFigures(CandidateStatus.WRONG_RESULT, "off", rel_l2_error=0.3))
    assert not result.passed and result.figures is not None and result.figures.rel_l2_error == 0.3


def test_results_are_values() -> None:
    verdict = RunFigures(CandidateStatus.PASSED, latency_us=1.0)
    assert CandidateResult("c1", verdict, arch="sm_90") == CandidateResult("c1", verdict, arch="sm_90")
    with pytest.raises(AttributeError):
        CandidateResult("c1", verdict).arch = "cpu"  # type: ignore[misc]


def test_an_offline_proposal_costs_nothing() -> None:
    assert Cost() == Cost(prompt_tokens=0, completion_tokens=0, usd=0.0, llm_calls=0)
    assert LlmExchange("m", "p").cost == Cost() and LlmExchange("m", "p").error == ""


def test_costs_add_up() -> None:
    assert Cost(1200, 300, 0.0125, 1) + Cost(800, 0, 0.004, 1) == Cost(2000, 300, 0.0165, 2)
    assert Cost() + Cost() == Cost()

import pytest

from kforge_domain.verdict import FIGURE_NAMES, BuildFailure, CandidateStatus, RunFigures, verdict_of


def test_a_build_failure_cannot_carry_run_figures() -> None:
    with pytest.raises(TypeError):
        BuildFailure(CandidateStatus.COMPILE_ERROR, "no", latency_us=1.0)  # type: ignore[call-arg]
    assert not hasattr(BuildFailure(CandidateStatus.COMPILE_ERROR), "latency_us")


@pytest.mark.parametrize("status", [s for s in CandidateStatus if s not in (CandidateStatus.COMPILE_ERROR,
                                                                            CandidateStatus.REJECTED)])
def test_a_build_failure_is_a_compile_error_or_an_audit_rejection(status: CandidateStatus) -> None:
    with pytest.raises(ValueError, match="COMPILE_ERROR or REJECTED"):
        BuildFailure(status)


def test_a_run_is_never_a_compile_error() -> None:
    with pytest.raises(ValueError, match="BuildFailure"):
        RunFigures(CandidateStatus.COMPILE_ERROR)


def test_speedup_is_derived_from_the_two_latencies() -> None:
    assert RunFigures(CandidateStatus.PASSED, latency_us=5.0, eager_latency_us=20.0).speedup == 4.0
    assert RunFigures(CandidateStatus.PASSED, latency_us=5.0).speedup is None
    assert RunFigures(CandidateStatus.TIMEOUT, "slow").speedup is None


def test_a_compile_error_or_an_unmeasured_rejection_never_ran() -> None:
    assert verdict_of(CandidateStatus.COMPILE_ERROR, "e", {}) == BuildFailure(CandidateStatus.COMPILE_ERROR, "e")
    assert verdict_of(CandidateStatus.REJECTED, "audit", {}) == BuildFailure(CandidateStatus.REJECTED, "audit")


def test_a_rejection_with_figures_and_every_other_status_ran() -> None:
    timed = verdict_of(CandidateStatus.REJECTED, "under the floor", {"latency_us": 0.1, "floor_us": 2.0})
    assert timed == RunFigures(CandidateStatus.REJECTED, "under the floor", latency_us=0.1, floor_us=2.0)
    assert verdict_of(CandidateStatus.TIMEOUT, "slow", {}) == RunFigures(CandidateStatus.TIMEOUT, "slow")


def test_the_figure_names_are_the_run_s_measured_fields() -> None:
    assert "latency_us" in FIGURE_NAMES and "workspace_bytes" in FIGURE_NAMES
    assert not {"status", "error_message", "speedup"} & set(FIGURE_NAMES)

import pytest

from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures


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

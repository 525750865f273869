"""How the candidate page words a kernel's verdict."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest


def _verdict_page(speedup: float) -> AppTest:
    def page(speedup: float) -> None:
        from ui.models import CandidateDetail
        from ui.views.candidate import render_verdict

        render_verdict(CandidateDetail(
            candidate_id="k1", card_id="c1", parent_id="", source="", description="", knobs_json="{}",
            proposer="offline", status="PASSED", latency_us=10.0, eager_latency_us=10.0 * speedup, speedup=speedup))

    at = AppTest.from_function(page, kwargs={"speedup": speedup})
    at.run()
    assert not at.exception
    return at


def test_a_passed_kernel_slower_than_eager_is_not_shown_as_a_success() -> None:
    slower = _verdict_page(0.87)
    assert not slower.success and any("PASSED but not faster than eager: ×0.87" in w.value for w in slower.warning)
    faster = _verdict_page(1.5)
    assert any("PASSED: ×1.50 against eager" in s.value for s in faster.success) and not faster.warning

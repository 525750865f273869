from __future__ import annotations

import torch

from gpu_sandbox_service.harness.checks import check_invariants, compare


def test_matching_outputs_pass_and_report_errors() -> None:
    ref = torch.randn(32, 64)
    result = compare(ref + 1e-7, ref, "out")
    assert not result.problem and 0 < result.rel_l2_error < 1e-5 and result.max_scaled_error < 1e-5


def test_nan_never_passes_and_infinities_must_match() -> None:
    ref = torch.randn(8, 8)
    out = ref.clone()
    out[3, 3] = float("nan")
    assert "NaN" in compare(out, ref, "out").problem
    ref_inf = ref.clone()
    ref_inf[0, 0] = float("inf")
    assert not compare(ref_inf.clone(), ref_inf, "out").problem
    flipped = ref_inf.clone()
    flipped[0, 0] = -float("inf")
    assert "infinities" in compare(flipped, ref_inf, "out").problem


def test_tolerance_depends_on_dtype() -> None:
    ref = torch.randn(256, 256)
    noisy = ref + 3e-3 * torch.randn_like(ref)
    assert compare(noisy, ref, "out").problem
    assert not compare(noisy.half(), ref.half(), "out").problem


def test_integers_must_be_exact() -> None:
    ref = torch.arange(10)
    out = ref.clone()
    out[4] += 1
    assert compare(out, ref, "out").problem and not compare(ref.clone(), ref, "out").problem


def test_softmax_rows_must_sum_to_one() -> None:
    x = torch.randn(4, 16)
    good = torch.softmax(x, -1)
    assert check_invariants("aten::_softmax.default", [x, -1, False], [good]) == ""
    assert "sum to 1" in check_invariants("aten::_softmax.default", [x, -1, False], [good * 1.01])
    assert check_invariants("aten::_log_softmax.default", [x, 1, False], [torch.log_softmax(x, 1)]) == ""
    assert check_invariants("aten::add.Tensor", [x, x], [x]) == ""

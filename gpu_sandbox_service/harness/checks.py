"""Numerical checks: per-dtype tolerances on normalised errors, NaN handling, op invariants."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

# (max ||out - ref|| / ||ref||, max |out - ref| / max |ref|) per output dtype.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-9, 1e-8),
    torch.float32: (1e-4, 1e-3),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 4e-2),
}
EXACT = (0.0, 0.0)


@dataclass(frozen=True)
class Comparison:
    """Errors of one output against its reference; ``problem`` empty means within tolerance."""

    rel_l2_error: float
    max_scaled_error: float
    problem: str = ""


def compare(out: torch.Tensor, ref: torch.Tensor, name: str) -> Comparison:
    """Compare an output with eager's; a NaN or infinity where eager has none never passes."""
    if out.shape != ref.shape:
        return Comparison(float("inf"), float("inf"), f"{name}: shape {tuple(out.shape)} != {tuple(ref.shape)}")
    # Compared where the tensors live: moving a large output to the host dominated a candidate's time.
    o = out.detach().to(torch.float64)
    r = ref.detach().to(device=out.device, dtype=torch.float64)
    o_nan, r_nan = torch.isnan(o), torch.isnan(r)
    if not torch.equal(o_nan, r_nan):
        count = int((o_nan != r_nan).sum())
        return Comparison(float("nan"), float("nan"), f"{name}: {count} elements are NaN where eager's are not "
                          "(or the reverse); NaN also marks elements never written")
    o_inf, r_inf = torch.isinf(o), torch.isinf(r)
    if not torch.equal(o.masked_fill(~o_inf, 0), r.masked_fill(~r_inf, 0)):
        return Comparison(float("inf"), float("inf"), f"{name}: infinities differ from eager's")
    finite = torch.isfinite(r)
    diff = (o - r).masked_fill(~finite, 0)
    ref_finite = r.masked_fill(~finite, 0)
    ref_norm, ref_max = float(ref_finite.norm()), float(ref_finite.abs().max()) if r.numel() else 0.0
    diff_norm, diff_max = float(diff.norm()), float(diff.abs().max()) if r.numel() else 0.0
    rel_l2 = diff_norm / ref_norm if ref_norm > 0 else diff_norm
    max_scaled = diff_max / ref_max if ref_max > 0 else diff_max
    rel_tol, max_tol = TOLERANCES.get(out.dtype, EXACT)
    if rel_l2 > rel_tol or max_scaled > max_tol:
        return Comparison(rel_l2, max_scaled, f"{name}: error rel_l2={rel_l2:.3g} max_scaled={max_scaled:.3g} "
                          f"exceeds the {out.dtype} tolerance ({rel_tol:g}, {max_tol:g})")
    return Comparison(rel_l2, max_scaled)


Invariant = Callable[[Sequence[object], Sequence[torch.Tensor]], str]


def _rows_sum_to_one(log: bool) -> Invariant:
    def check(args: Sequence[object], outputs: Sequence[torch.Tensor]) -> str:
        dim = args[1] if len(args) > 1 and isinstance(args[1], int) else -1
        out = outputs[0].double()
        if out.numel() == 0:
            return ""
        sums = (out.exp() if log else out).sum(dim=dim)
        tol = 1e-3 if outputs[0].dtype in (torch.float32, torch.float64) else 2e-2
        worst = float((sums - 1).abs().max())
        return f"rows along dim {dim} sum to 1 within {worst:.3g}, over {tol:g}" if worst > tol else ""

    return check


INVARIANTS: dict[str, Invariant] = {
    "aten::_softmax.default": _rows_sum_to_one(log=False),
    "aten::softmax.int": _rows_sum_to_one(log=False),
    "aten::_log_softmax.default": _rows_sum_to_one(log=True),
    "aten::log_softmax.int": _rows_sum_to_one(log=True),
}


def check_invariants(op: str, args: Sequence[object], outputs: Sequence[torch.Tensor]) -> str:
    """The first violated invariant of ``op`` (empty if none is known or all hold)."""
    invariant = INVARIANTS.get(op)
    return invariant(args, outputs) if invariant else ""

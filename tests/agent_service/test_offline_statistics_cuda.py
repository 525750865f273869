"""Variance, standard deviation, vector norms and logsumexp, reductions of slices, bilinear resizing,
the three-tensor elementwise ops, nan_to_num and the log forms on the GPU: every cuda mode of each
card against eager's own cuda kernels."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.catalog import plan_for_card
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, compile_cuda, on_cuda, run_kernel

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
SPECIAL = [float("nan"), float("inf"), -float("inf"), -0.0, 2.5, 1e30, -7.0, 0.125]


def _r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))) * 3 + 1).to(dtype)


def _cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    rows = _r(6, 4096)
    rows[1, 7], rows[2, 100] = float("nan"), float("inf")
    return [
        (aten.var.dim, [_r(64, 4096, dtype=bf16), [-1]], {}),
        (aten.var.dim, [rows, [-1]], {}),
        (aten.std.correction, [_r(4, 65536), [-1]], {"correction": 0}),
        (aten.std.dim, [_r(8, 96, 33), [1]], {}),
        (aten.linalg_vector_norm.default, [_r(128, 64, dtype=f16), 2, [-1]], {}),
        (aten.linalg_vector_norm.default, [_r(3, 200000)], {}),
        (aten.logsumexp.default, [_r(64, 4096, dtype=bf16) * 20, [-1]], {}),
        (aten.logsumexp.default, [_lse_rows(), [-1]], {}),
        (aten.logsumexp.default, [_r(4, 8, 300), [1]], {}),
        (aten.mean.dim, [_r(64, 197, 768, dtype=bf16)[:, 1:], [1]], {}),
        (aten.sum.dim_IntList, [_r(256, 1024)[:, :1000], [-1]], {}),
        (aten.var.dim, [_r(8, 3, 64, 64)[::2], [2, 3]], {}),
        (aten.upsample_bilinear2d.vec, [_r(2, 64, 32, 32, dtype=bf16), None, False, [2.0, 2.0]], {}),
        (aten.upsample_bilinear2d.vec, [_r(1, 8, 9, 7), [20, 30], True, None], {}),
        (aten.upsample_bilinear2d.vec, [_r(2, 4, 64, 48), None, False, [0.5, 0.75]], {}),
        (aten.upsample_linear1d.vec, [_r(4, 32, 4000, dtype=bf16), None, False, [2.0]], {}),
        (aten.glu.default, [_r(4, 64, 4000, dtype=bf16), 1], {}),
        (aten.glu.default, [_r(6, 30, 8).transpose(1, 2), -1], {}),
        (aten.upsample_linear1d.vec, [_r(2, 8, 77), [300], True, None], {}),
        (aten.addcmul.default, [_r(64, 24, dtype=bf16), _r(64, 24, dtype=bf16), _r(24, dtype=bf16)], {"value": 0.5}),
        (aten.addcdiv.default, [_r(256, 33), _r(256, 33), _r(256, 33).abs() + 0.5], {"value": -2.0}),
        (aten.lerp.Tensor, [_r(64, 24), _r(64, 24), torch.rand(64, 24) * 2 - 0.5], {}),
        (aten.lerp.Scalar, [_r(64, 24, dtype=f16), _r(64, 24, dtype=f16), 0.75], {}),
        (aten.nan_to_num.default, [torch.tensor(SPECIAL * 40, dtype=bf16)], {}),
        (aten.nan_to_num.default, [torch.tensor(SPECIAL * 40), 1.0, None, -3.0], {}),
        (aten.log1p.default, [_r(64, 24).abs()], {}),
        (aten.softplus.default, [_r(64, 24) * 8, 2.0, 10.0], {}),
    ]


def _lse_rows() -> torch.Tensor:
    """Rows of 65536 (split and resident modes) holding only -inf, +inf twice, a NaN, large values."""
    rows = _r(5, 65536)
    rows[0] = -float("inf")
    rows[1, 10], rows[1, 60000] = float("inf"), float("inf")
    rows[2, 123] = float("nan")
    rows[3] *= 60
    return rows


def _knob_sets(plan: Any) -> list[dict[str, Any]]:
    """Each cuda mode of the plan, with each statistics pass and math form it offers, at their defaults."""
    space = plan.knob_space("cuda", H200)
    sets: list[dict[str, Any]] = [{}]
    for name in ("mode", "stats", "fast_math"):
        sets = [{**s, name: value} for s in sets for value in space.choices.get(name, (None,)) if value is not None] \
            or sets
    return [space.normalise(s) for s in sets]


def _on_cuda(t: torch.Tensor, device: str = "cuda") -> torch.Tensor:
    """``t`` on the device with its strides and storage offset kept (``.cuda()`` makes a slice
    contiguous, which is not the card's layout)."""
    storage = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()).to(device)
    return storage.as_strided(t.size(), t.stride(), t.storage_offset())


def test_a_slice_moved_to_the_device_keeps_its_layout() -> None:
    sliced = _r(4, 5, 6)[:, 1:, ::2]
    moved = _on_cuda(sliced, "cpu")
    assert (moved.stride(), moved.storage_offset()) == (sliced.stride(), sliced.storage_offset())
    assert torch.equal(moved, sliced)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda kernels")
def test_every_mode_matches_eagers_cuda_result(tmp_path: Path) -> None:
    runs = []
    for op, args, kwargs in _cases():
        card, _ = aten_card(op, args, kwargs)
        plan = plan_for_card(on_cuda(card), "cuda")
        runs += [(op, args, kwargs, knobs, plan.render("cuda", knobs, H200)) for knobs in _knob_sets(plan)]
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        libraries = list(pool.map(lambda run: compile_cuda(run[4], tmp_path), runs))
    for (op, args, kwargs, knobs, _), library in zip(runs, libraries, strict=True):
        cuda_args = [_on_cuda(a) if isinstance(a, torch.Tensor) else a for a in args]
        expected = op(*cuda_args, **kwargs)
        got = torch.full_like(expected, 7.0)
        assert run_kernel(library, [a for a in cuda_args if isinstance(a, torch.Tensor)], [got]) == 0
        torch.cuda.synchronize()
        assert torch.equal(got.isnan(), expected.isnan()), (op, knobs)
        tolerance = 2e-2 if expected.dtype in (bf16, f16) else 2e-5
        torch.testing.assert_close(got.nan_to_num(123.0), expected.nan_to_num(123.0), rtol=tolerance, atol=tolerance,
                                   msg=lambda m, op=op, knobs=knobs: f"{op} {knobs}: {m}")

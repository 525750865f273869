"""col2im (``F.fold``): each case compiled with g++ and run against eager, whose cpu sums a pixel's
overlapping blocks in a fixed order; every output element must be eager's bits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, compile_cpu, nvcc_object, on_cuda, root_and_revisions, run_kernel

aten = torch.ops.aten
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
#: (batch or None, channels, output size, kernel, dilation, padding, stride, dtype, transposed input)
CASES = {
    "overlapping_3x3_stride_1": (2, 3, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), torch.float32, False),
    "strided_2_bf16": (2, 4, (9, 8), (3, 2), (2, 1), (2, 0), (1, 2), torch.bfloat16, False),
    "unbatched_f16_transposed_columns": (None, 2, (6, 5), (2, 3), (1, 1), (1, 1), (2, 1), torch.float16, True),
    "patches_without_overlap_f64": (1, 3, (8, 8), (4, 4), (1, 1), (0, 0), (4, 4), torch.float64, False),
}


def _blocks(size: tuple[int, int], k: tuple[int, int], d: tuple[int, int], p: tuple[int, int],
            s: tuple[int, int]) -> int:
    return (((size[0] + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1)
            * ((size[1] + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1))


def _case(name: str) -> tuple[torch.Tensor, list[object]]:
    batch, channels, size, k, d, p, s, dtype, transposed = CASES[name]
    rows, length = channels * k[0] * k[1], _blocks(size, k, d, p, s)
    shape = (length, rows) if transposed else (rows, length)
    columns = torch.randn(*((batch,) if batch else ()), *shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    if transposed:
        columns = columns.transpose(-1, -2)
    return columns, [list(size), list(k), list(d), list(p), list(s)]


@pytest.mark.parametrize("name", list(CASES))
def test_fold_is_eagers_bit_for_bit(name: str, tmp_path: Path) -> None:
    columns, geometry = _case(name)
    card, (expected,) = aten_card(aten.col2im.default, [columns, *geometry])
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "col2im"
        got = torch.full_like(expected, float("nan"))
        assert run_kernel(compile_cpu(source, tmp_path), [columns], [got]) == 0
        assert torch.equal(got, expected), (name, knobs, (got.double() - expected.double()).abs().max())
    fresh = torch.randn(columns.shape, generator=torch.Generator().manual_seed(8)).to(columns.dtype)
    fresh = fresh.transpose(-1, -2).contiguous().transpose(-1, -2) if CASES[name][-1] else fresh
    got = torch.full_like(expected, float("nan"))
    assert run_kernel(compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), tmp_path), [fresh], [got]) == 0
    assert torch.equal(got, torch.nn.functional.fold(fresh, *geometry))


def test_the_cuda_kernel_builds_for_sm_90(tmp_path: Path) -> None:
    columns, geometry = _case("strided_2_bf16")
    card = on_cuda(aten_card(aten.col2im.default, [columns, *geometry])[0])
    for source, knobs in root_and_revisions(card, H200, revisions=1):
        unit = tmp_path / f"f{len(list(tmp_path.iterdir()))}.cu"
        rc, log = nvcc_object(source, unit)
        assert rc == 0 and unit.with_suffix(".o").stat().st_size > 0, (knobs, log)


def test_a_geometry_eager_would_raise_on_is_refused() -> None:
    columns, geometry = _case("overlapping_3x3_stride_1")
    card, _ = aten_card(aten.col2im.default, [columns, *geometry])
    template = {**card.template, "args": [card.template["args"][0], [8, 7], *card.template["args"][2:]]}
    card = card.model_copy(update={"key": {**card.key, "template": template}})
    with pytest.raises(UnsupportedCard, match="eager raises"):
        plan_for_card(card, "cpu")

"""Pooling and resizing of channels-last and sliced inputs: the plan refuses the layouts it does not
walk, and on a device the cuda kernels give eager's cuda results (max pools bit for bit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import (
    aten_card,
    compile_cuda_each,
    root_and_revisions,
    run_kernel,
    to_cuda_keeping_strides,
)

aten = torch.ops.aten
bf16 = torch.bfloat16
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)


def cl(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous(memory_format=torch.channels_last)


CASES: dict[str, tuple[Any, list[Any]]] = {
    "max_pool_stem_channels_last_bf16": (aten.max_pool2d.default, [cl(r(8, 64, 56, 56, dtype=bf16)), [3, 3], [2, 2],
                                                                   [1, 1]]),
    "avg_pool_channels_last": (aten.avg_pool2d.default, [cl(r(2, 32, 17, 15)), [3, 3], [2, 2], [1, 1], True, False]),
    "adaptive_avg_pool_channels_last": (aten._adaptive_avg_pool2d.default, [cl(r(4, 48, 9, 11)), [4, 5]]),
    "max_pool_of_a_slice": (aten.max_pool2d.default, [r(2, 8, 20, 24)[..., 2:22], [2, 2], [2, 2]]),
    "bilinear_channels_last_bf16": (aten.upsample_bilinear2d.vec, [cl(r(2, 64, 16, 16, dtype=bf16)), None, False,
                                                                   [2.0, 2.0]]),
    "bicubic_position_embedding": (aten.upsample_bicubic2d.vec, [r(1, 192, 14, 14), [23, 23], False, None]),
    "bicubic_channels_last_aligned": (aten.upsample_bicubic2d.vec, [cl(r(2, 16, 9, 7)), [20, 30], True, None]),
}


def test_other_layouts_are_refused_with_the_reason() -> None:
    three_d = aten_card(aten.max_pool2d.default, [r(8, 20, 24)[..., 2:22], [2, 2], [2, 2]])[0]
    with pytest.raises(UnsupportedCard, match="4-d"):
        plan_for_card(three_d, "cpu")
    linear = aten_card(aten.upsample_linear1d.vec, [r(2, 8, 40)[..., ::2], None, False, [2.0]])[0]
    with pytest.raises(UnsupportedCard, match="4-d"):
        plan_for_card(linear, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda kernels")
def test_cuda_kernels_give_eagers_cuda_results_on_the_device_in_every_layout(tmp_path: Path) -> None:
    runs = []
    for name, (op, args) in CASES.items():
        cuda_args = [to_cuda_keeping_strides(a) if isinstance(a, torch.Tensor) else a for a in args]
        card = aten_card(op, cuda_args)[0]
        runs += [(name, op, cuda_args, knobs, source) for source, knobs in root_and_revisions(card, H200)]
    libraries = compile_cuda_each([source for *_, source in runs], tmp_path)
    for (name, op, cuda_args, knobs, _), library in zip(runs, libraries, strict=True):
        expected = op(*cuda_args)
        got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype, device="cuda").fill_(7)
        assert run_kernel(library, [cuda_args[0]], [got]) == 0, name
        if op is aten.max_pool2d.default:
            assert torch.equal(got, expected), (name, knobs)
        else:
            torch.testing.assert_close(got, expected, rtol=1e-2 if got.dtype == bf16 else 1e-5, atol=1e-5,
                                       msg=f"{name} {knobs}")

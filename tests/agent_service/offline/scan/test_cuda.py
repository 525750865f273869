"""The cuda scan kernels compile with nvcc for sm_90 in every mode, each card is offered the modes
that suit its runs, and where a GPU is present every mode is run against eager's scan."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.catalog import plan_for_card
from agent_service.offline.scan.plan import ScanPlan
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import (
    NVCC,
    aten_card,
    compile_cuda,
    cuda_bundle,
    nvcc_object,
    on_cuda,
    run_kernel,
)

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def _plan(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> ScanPlan:
    card, _ = aten_card(op, args, kwargs or {})
    plan = plan_for_card(on_cuda(card), "cuda")
    assert isinstance(plan, ScanPlan)
    return plan


def _modes(*args: Any, **kwargs: Any) -> tuple[str, ...]:
    return tuple(_plan(aten.cumsum.default, list(args), kwargs).knob_space("cuda", H200).choices["mode"])


def test_each_card_is_offered_the_modes_that_suit_its_runs() -> None:
    assert _modes(torch.randint(0, 9, (4096,)), 0)[0] == "block"  # one run: a block, not a warp
    assert _modes(r(4096, 64), -1)[0] == "warp"
    assert _modes(r(8192, 16), -1)[0] == "thread"
    assert _modes(r(64, 2048, 128), 1)[0] == "thread"  # runs side by side: a thread each reads in order
    assert _modes(r(1, 100_000, 4), 1)[0] == "split"  # four long runs: chunks with carries
    long_rows = _plan(aten.cumsum.default, [r(4, 1_000_000), 1]).knob_space("cuda", H200)
    assert long_rows.choices["mode"] == ("split", "block", "warp")
    assert long_rows.choices["blocks_per_row"] == (66, 132, 33, 264)  # 2, 4, 1 and 8 blocks per SM
    assert long_rows.normalise({"mode": "block", "blocks_per_row": 33}) == {**long_rows.default(), "mode": "block"}
    assert _plan(aten.cumsum.default, [r(200_000), 0]).split_choices(H200) == (97,)  # chunks of 2048 at least
    # few runs too short to split: one tile of the block covers the run, so tiles never wait on each other
    threads = {length: _plan(aten.cumsum.default, [torch.randint(0, 9, (length,)), 0]).knob_space("cuda", H200)
               .default()["threads_per_block"] for length in (1024, 2000, 4096, 12000)}
    assert threads == {1024: 256, 2000: 512, 4096: 1024, 12000: 1024}
    many_runs = _plan(aten.cumsum.default, [r(4096, 1000), -1]).knob_space("cuda", H200)
    assert many_runs.default()["threads_per_block"] == 256
    ints = _plan(aten.cumsum.default, [torch.randint(0, 9, (64, 64)), 1]).knob_space("cuda", H200)
    assert ints.choices["accumulate"] == ("double",)


Case = tuple[str, Any, list[Any], dict[str, Any], list[dict[str, Any]]]


def _cases() -> list[Case]:
    return [
        ("tokens_int64", aten.cumsum.default, [torch.randint(0, 9, (4096,)), 0], {},
         [{}, {"mode": "warp", "items_per_thread": 8}, {"threads_per_block": 512}]),
        ("mask_bool_outer", aten.cumsum.default, [r(2048, 8) > 0, 0], {}, [{}, {"mode": "warp"}]),
        ("rows_f32", aten.cumsum.default, [r(4096, 1000), -1], {},
         [{}, {"accumulate": "float"}, {"mode": "block", "threads_per_block": 1024, "items_per_thread": 1}]),
        ("middle_bf16", aten.cumsum.default, [r(64, 2048, 128, dtype=bf16), 1], {},
         [{}, {"mode": "block", "accumulate": "float"}]),
        ("transposed_f16", aten.cumsum.default, [r(512, 300, dtype=f16).t(), -1], {}, [{}]),
        ("long_row_split", aten.cumsum.default, [r(300_000), 0], {},
         [{}, {"threads_per_block": 128, "items_per_thread": 2, "blocks_per_row": 132}]),
        ("few_columns_split_f64", aten.cumsum.default, [r(1, 100_000, 4).double(), 1], {}, [{}]),
        ("dtype_f16_of_f32", aten.cumsum.default, [r(8, 5000), -1], {"dtype": f16}, [{}]),
        ("cumprod_int32", aten.cumprod.default, [torch.randint(0, 3, (64, 70), dtype=torch.int32), 1], {}, [{}]),
        ("cumprod_bf16_split", aten.cumprod.default, [r(2, 65536, dtype=bf16), -1], {}, [{}, {"mode": "block"}]),
        ("zero_dim", aten.cumsum.default, [torch.tensor(2.5), 0], {}, [{}]),
        ("moe_offsets_float_counts_to_int32", aten.cumsum.default, [torch.randint(0, 64, (256,)).float(), 0],
         {"dtype": torch.int32}, [{}]),
        ("two_rows_int64", aten.cumsum.default, [torch.randint(-9, 9, (2, 3000)), 1], {}, [{}]),
        ("outer_f16_long", aten.cumsum.default, [r(4096, 64, dtype=f16), 0], {}, [{}, {"mode": "thread"}]),
    ]


def _sources() -> dict[str, str]:
    sources = {}
    for name, op, args, kwargs, knob_sets in _cases():
        plan = _plan(op, args, kwargs)
        space = plan.knob_space("cuda", H200)
        for i, overrides in enumerate(knob_sets):
            assert set(overrides) <= set(space.choices), (name, overrides)
            knobs = {**space.default(), **overrides}
            assert space.normalise(knobs) == knobs, (name, knobs)
            sources[f"{name}_{i}"] = plan.render("cuda", knobs, H200)
    return sources


def test_split_mode_takes_its_chunk_totals_from_the_callers_workspace() -> None:
    sources = _sources()
    with_workspace = {name for name, source in sources.items() if "kf_workspace_bytes" in source}
    assert with_workspace == {"long_row_split_0", "long_row_split_1", "few_columns_split_f64_0",
                              "cumprod_bf16_split_0"}
    for source in sources.values():
        assert not re.search(r"cudaMalloc|cudaFree|Synchronize", source)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_mode_compiles_for_sm90_without_warnings(tmp_path: Path) -> None:
    rc, err = nvcc_object(cuda_bundle(_sources()), tmp_path / "scan.cu")
    assert rc == 0, err[-4000:]
    assert "warning" not in err, err[-4000:]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_one_kernel_compiles_alone_as_the_sandbox_builds_it(tmp_path: Path) -> None:
    plan = _plan(aten.cumsum.default, [r(3, 50_000), -1])
    source = plan.render("cuda", plan.knob_space("cuda", H200).default(), H200)
    rc, err = nvcc_object(source, tmp_path / "alone.cu")
    assert rc == 0 and "warning" not in err, err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda scans")
def test_every_mode_writes_eagers_scan(tmp_path: Path) -> None:
    """Integer and bool scans bit for bit, and a half's scan walked in eager's order with eager's
    rounding (thread mode over an outer or middle dim, precision native) too; any other float scan
    no further from the exact sum than eager's own (eager rounds in its own order)."""
    sources = _sources()
    for name, op, args, kwargs, knob_sets in _cases():
        cuda_args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
        expected = op(*cuda_args, **kwargs)
        plan = _plan(op, args, kwargs)
        space = plan.knob_space("cuda", H200)
        for i, overrides in enumerate(knob_sets):
            knobs = {**space.default(), **overrides}
            got = torch.full_like(expected, 7)
            assert run_kernel(compile_cuda(sources[f"{name}_{i}"], tmp_path), [cuda_args[0]], [got]) == 0, name
            in_order = knobs["mode"] == "thread" and plan.columnar and knobs.get("accumulate") == "native"
            if not expected.dtype.is_floating_point or in_order:
                assert torch.equal(got, expected), (name, knobs)
                continue
            exact = op(cuda_args[0].to(expected.dtype).double(), *cuda_args[1:])
            ours, eagers = (got.double() - exact).abs().max(), (expected.double() - exact).abs().max()
            slack = torch.finfo(expected.dtype).eps * exact.abs().max()
            assert ours <= 2 * eagers + slack, (name, knobs, float(ours), float(eagers))

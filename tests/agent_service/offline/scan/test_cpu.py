"""The cpu scan kernels, compiled with g++ and run against eager: every dim, length and dtype.

Each run is walked in order in eager's cpu accumulator, so outputs are compared exactly, for
floats too, at the root knobs and at two revisions of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.scan.elements import check_conversion
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, fresh_like, reference, root_and_revisions, run_cpu_card

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


def counts(n: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(0, 64, (n,)).to(dtype)


CASES: dict[str, Callable[[], tuple[Any, list[Any], dict[str, Any]]]] = {
    # MoE routing: tokens per expert, and a mask of the tokens each expert takes
    "int64_tokens_per_expert": lambda: (aten.cumsum.default, [counts(4096), 0], {}),
    "bool_mask_rows_to_int64": lambda: (aten.cumsum.default, [r(300, 8) > 0, 0], {}),
    "float_histogram_last": lambda: (aten.cumsum.default, [r(64, 1000), -1], {}),
    "middle_dim": lambda: (aten.cumsum.default, [r(8, 33, 70), 1], {}),
    "outer_dim_bf16": lambda: (aten.cumsum.default, [r(40, 5, 7, dtype=bf16), 0], {}),
    "last_of_transposed_f16": lambda: (aten.cumsum.default, [r(40, 24, dtype=f16).t(), -1], {}),
    "last_of_sliced": lambda: (aten.cumsum.default, [r(6, 64)[:, ::2], -1], {}),
    "int32_promotes_to_int64": lambda: (aten.cumsum.default, [counts(600, torch.int32).view(20, 30), 0], {}),
    "uint8_promotes_to_int64": lambda: (aten.cumsum.default, [counts(256, torch.uint8), -1], {}),
    "long_row": lambda: (aten.cumsum.default, [r(150_000), 0], {}),
    "long_rows_float64": lambda: (aten.cumsum.default, [r(3, 120_000).double(), 1], {}),
    "dtype_float64_of_float32": lambda: (aten.cumsum.default, [r(5, 300), -1], {"dtype": torch.float64}),
    "dtype_float16_of_float32": lambda: (aten.cumsum.default, [r(5, 300), -1], {"dtype": f16}),
    "dtype_int32_of_int64": lambda: (aten.cumsum.default, [counts(500).view(5, 100), 1], {"dtype": torch.int32}),
    "zero_dim": lambda: (aten.cumsum.default, [torch.tensor(2.5), 0], {}),
    "length_one": lambda: (aten.cumsum.default, [r(7, 1), -1], {}),
    "expanded_rows": lambda: (aten.cumsum.default, [r(1, 50).expand(8, 50), 0], {}),
    "position_ids_of_attention_mask": lambda: (aten.cumsum.default, [torch.ones(4, 128, dtype=torch.int64), -1], {}),
    # MoE offsets on the cpu: histc's float counts summed into int32 (transformers' grouped_mm path)
    "float_counts_to_int32": lambda: (aten.cumsum.default, [counts(64).float(), 0], {"dtype": torch.int32}),
    "float_truncated_to_int64": lambda: (aten.cumsum.default, [r(6, 50) * 40, -1], {"dtype": torch.int64}),
    "cumprod_rows": lambda: (aten.cumprod.default, [r(6, 20), -1], {}),
    "cumprod_int64_middle": lambda: (aten.cumprod.default, [counts(120).view(2, 20, 3) % 3 + 1, 1], {}),
}


def _inputs(card: OperatorCard, args: list[Any], sample: int) -> list[torch.Tensor]:
    """The card's own tensors first (their special values: masks, counts), then fresh ones of its layouts."""
    if sample == 0:
        return [a for a in args if isinstance(a, torch.Tensor)]
    fresh = fresh_like(card, torch.Generator().manual_seed(sample))
    return [(f * 50).to(f.dtype) if not f.is_floating_point() and f.dtype != torch.bool else f for f in fresh]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scan_cpu")


@pytest.mark.parametrize("name", CASES)
def test_the_scan_matches_eager_exactly_at_the_root_and_two_revisions(name: str, build_dir: Path) -> None:
    op, args, kwargs = CASES[name]()
    card, _ = aten_card(op, args, kwargs)
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "scan"
        for sample in range(2):
            inputs = _inputs(card, args, sample)
            before = [t.clone() for t in inputs]
            (expected,) = reference(card, op, inputs)
            got = run_cpu_card(card, source, inputs, build_dir)
            assert got.dtype == expected.dtype
            where = f"{name} {knobs}"
            torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True,
                                       msg=lambda m, where=where: f"{where}: {m}")
            assert all(torch.equal(a, b) for a, b in zip(inputs, before, strict=True)), "the kernel wrote its input"


def test_sums_wrap_as_eager_int64_does_and_nan_and_inf_propagate(build_dir: Path) -> None:
    big = torch.tensor([2**62, 2**62, 2**62, -5, 3], dtype=torch.int64)
    card, _ = aten_card(aten.cumsum.default, [big, 0])
    plan = plan_for_card(card, "cpu")
    source = plan.render("cpu", plan.knob_space("cpu", CPU).default(), CPU)
    torch.testing.assert_close(run_cpu_card(card, source, [big], build_dir), torch.cumsum(big, 0), rtol=0, atol=0)
    # Out of int32's range and NaN: the kernel's cast is the instruction eager's conversion uses.
    wide = torch.tensor([-2.7, 3.9, 1e10, -1e10, float("nan"), 7.5, float("inf"), 2.0] * 5)
    card, _ = aten_card(aten.cumsum.default, [wide, 0], {"dtype": torch.int32})
    plan = plan_for_card(card, "cpu")
    source = plan.render("cpu", plan.knob_space("cpu", CPU).default(), CPU)
    torch.testing.assert_close(run_cpu_card(card, source, [wide], build_dir),
                               torch.cumsum(wide, 0, dtype=torch.int32), rtol=0, atol=0)
    special = torch.tensor([1.0, float("inf"), 2.0, float("-inf"), 1.0, float("nan"), 0.0])
    card, _ = aten_card(aten.cumsum.default, [special, 0])
    plan = plan_for_card(card, "cpu")
    source = plan.render("cpu", plan.knob_space("cpu", CPU).default(), CPU)
    torch.testing.assert_close(run_cpu_card(card, source, [special], build_dir), torch.cumsum(special, 0), rtol=0,
                               atol=0, equal_nan=True)


def _refusal(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    card, _ = aten_card(op, args, kwargs)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def test_empty_tensors_and_conversions_eager_truncates_are_refused() -> None:
    assert "no output" in _refusal(aten.cumsum.default, [r(0, 5), 1])
    assert "8-bit integer" in _refusal(aten.cumsum.default, [r(4, 5), 1], {"dtype": torch.uint8})
    with pytest.raises(UnsupportedCard, match="into bool"):  # eager's cpu kernel has none either
        check_conversion("bool", "bool")
    assert "complex64" in _refusal(aten.cumsum.default, [r(4, 5).to(torch.complex64), 1])

"""The cpu histc kernels, compiled with g++ and run against eager: counts compared exactly.

Inputs are MoE-like ids as floats, random floats with values on every bin edge, at ``min`` and
``max``, outside the range, NaN and infinities, in every floating dtype and several layouts, at
the root knobs and at two revisions of them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.histc.eager_range import cpu_range
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import aten_card, reference, root_and_revisions, run_cpu_card

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)


def ids(n: int, experts: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Expert ids as MoE routing hands them to histc on the cpu: integers as floats."""
    return torch.randint(0, experts, (n,)).to(dtype)


def edgy(n: int, bins: int, low: float, high: float, dtype: torch.dtype = torch.float32,
         seed: int = 0) -> torch.Tensor:
    """Values on and between the bin edges, at min and max, outside them, NaN and infinities."""
    gen = torch.Generator().manual_seed(seed)
    width = (high - low) / bins
    on_edges = low + width * torch.randint(-2, 2 * bins + 3, (n // 2,), generator=gen) / 2
    spread = low - width + (high - low + 2 * width) * torch.rand(n - n // 2, generator=gen)
    special = torch.tensor([low, high, float("nan"), float("inf"), -float("inf"), low - width, high + width])
    values = torch.cat([on_edges, spread, special]).to(dtype)
    return values[torch.randperm(values.numel(), generator=gen)]


CASES: dict[str, Callable[[], tuple[list[Any], dict[str, Any]]]] = {
    "moe_64_experts": lambda: ([ids(4096, 64), 64, 0, 63], {}),
    "moe_512_experts_keywords": lambda: ([ids(3000, 512)], {"bins": 512, "min": 0, "max": 511}),
    "edges_default_bins": lambda: ([edgy(5000, 100, -2.0, 2.0), 100, -2.0, 2.0], {}),
    "tenths_seven_bins": lambda: ([edgy(2000, 7, 0.1, 0.7), 7, 0.1, 0.7], {}),
    "one_bin": lambda: ([edgy(500, 1, -1.0, 3.0), 1, -1, 3], {}),
    "float64": lambda: ([edgy(3000, 97, -1.3, 2.9, torch.float64), 97, -1.3, 2.9], {}),
    "float16_ids": lambda: ([ids(2048, 64, f16), 64, 0, 63], {}),
    "float16_edges": lambda: ([edgy(1500, 33, 0.3, 7.9, f16), 33, 0.3, 7.9], {}),
    "bfloat16_edges": lambda: ([edgy(200, 100, -3.0, 3.0, bf16), 100, -3, 3], {}),
    "transposed": lambda: ([edgy(3000, 50, 0.0, 1.0)[:3000].view(60, 50).t(), 50, 0.0, 1.0], {}),
    "sliced": lambda: ([edgy(4000, 64, 0.0, 63.0)[::2], 64, 0, 63], {}),
    "expanded": lambda: ([edgy(64, 16, -1.0, 1.0).expand(8, 71), 16, -1, 1], {}),
    "zero_dim": lambda: ([torch.tensor(0.5), 10, 0, 1], {}),
    "many_elements": lambda: ([edgy(200_000, 128, -4.0, 4.0), 128, -4, 4], {}),
}


def _fresh(card: OperatorCard, args: list[Any], kwargs: dict[str, Any], sample: int) -> list[torch.Tensor]:
    """The card's own tensor first, then new values of its exact layout drawn the same way."""
    x = args[0]
    if sample == 0:
        return [x]
    call = dict(zip(("bins", "min", "max"), args[1:], strict=False)) | kwargs
    bins, low, high = call.get("bins", 100), float(call.get("min", 0)), float(call.get("max", 0))
    span = sum((n - 1) * s for n, s in zip(x.shape, x.stride(), strict=True)) + x.storage_offset() + 1
    storage = edgy(span, bins, low, high, x.dtype, seed=sample)[:span]
    return [torch.as_strided(storage, x.shape, x.stride(), x.storage_offset())]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("histc_cpu")


@pytest.mark.parametrize("name", CASES)
def test_the_counts_match_eager_exactly_at_the_root_and_two_revisions(name: str, build_dir: Path) -> None:
    args, kwargs = CASES[name]()
    card, _ = aten_card(aten.histc.default, args, kwargs)
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "histc"
        for sample in range(2):
            inputs = _fresh(card, args, kwargs, sample)
            before = [t.clone() for t in inputs]
            (expected,) = reference(card, aten.histc.default, inputs)
            got = run_cpu_card(card, source, inputs, build_dir)
            where = f"{name} {knobs}"
            torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=lambda m, where=where: f"{where}: {m}")
            for a, b in zip(inputs, before, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg="the kernel wrote its input")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, f16, bf16])
def test_the_ends_are_the_first_and_last_of_eagers_linspace(dtype: torch.dtype) -> None:
    for bins, low, high in ((64, 0, 63), (7, 0.1, 0.7), (100, -0.3, 511.7), (1000, 1e-3, 3.3), (3, -2.5, 1e-3)):
        edges = torch.linspace(float(low), float(high), bins + 1, dtype=dtype)
        found = cpu_range(str(dtype).removeprefix("torch."), bins, low, high)
        assert (found.low, found.high) == (edges[0].item(), edges[-1].item()), (bins, low, high)


def _refusal(args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    card, _ = aten_card(aten.histc.default, args, kwargs)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def _range_refusal(dtype: str, bins: int, low: Any, high: Any) -> str:
    """Ranges eager raises for cannot be captured: the eager range is asked directly."""
    with pytest.raises(UnsupportedCard) as refused:
        cpu_range(dtype, bins, low, high)
    return str(refused.value)


def test_ranges_eager_takes_from_the_data_or_rejects_are_refused() -> None:
    x = torch.rand(100)
    assert "from the data" in _refusal([x])  # min == max == 0: the defaults
    assert "from the data" in _refusal([x, 10, 0.5, 0.5])
    assert "does not fit float16" in _refusal([x.half(), 512, 0, 511])  # (x - min) * bins passes 65504
    assert "does not fit float16" in _refusal([x.half(), 4, -1.0001, -1.0])  # one float16 value: no range
    assert "not exact" in _refusal([ids(3000, 64, f16), 64, 0, 63])  # eager's counts round past 2048
    assert "8192" in _refusal([x, 10_000, 0, 1])
    assert "not increasing" in _range_refusal("float32", 10, 3, 1)
    assert "not finite" in _range_refusal("float32", 10, float("nan"), 1)
    assert "overflows float16" in _range_refusal("float16", 10, 0, 1e6)
    assert "overflows float32" in _range_refusal("float32", 10, 0, 1e39)
    assert "cpu histc has no int64" in _range_refusal("int64", 9, 0, 8)
    assert "not a real number" in _range_refusal("float32", 9, 0, 1j)

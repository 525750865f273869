"""copy_ between every pair of the ABI's dtypes: the gather engine's conversions
(agent_service/offline/convert.py) give eager's values bit for bit, rounding, truncation, wrap-around,
NaN and signed zeros included; compiled with g++ and run, and their cuda variants compiled with nvcc."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import permutations
from pathlib import Path

import pytest
import torch

from agent_service.offline.catalog import plan_for_card
from kforge_domain.card import OperatorCard
from tests.agent_service.agent_cards import NVCC, aten_card, compile_cpu, cuda_bundle, nvcc_object, on_cuda, run_kernel
from tests.agent_service.test_offline_cpu import CPU
from tests.agent_service.test_offline_cuda import H200

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool)
PAIRS = list(permutations(DTYPES, 2))

# Floats where rounding decides: ties to even in float16 (1 + 2**-11) and bfloat16 (1 + 2**-8), a
# float64 value rounded twice on its way to float16 (1 + 2**-11 + 2**-40), overflow to inf, subnormals.
FLOATS_TO_FLOATS = (0.0, -0.0, 0.5, -2.5, 1 + 2**-11, 1 + 3 * 2**-11, 1 + 2**-8, 1 + 2**-11 + 2**-40, 65504.0,
                    65520.0, -70000.0, 3.4e38, 1e300, 6e-8, 1e-40, 1e-310, float("nan"), float("inf"),
                    float("-inf"), 16777217.0, 2049.0)
# Floats an int target holds after truncation toward zero (uint8: negative ones wrap, as eager's cast through int64)
FLOATS_TO_INTS = {torch.int64: (0.0, -0.0, 2.7, -2.7, 0.99, -0.99, 1e15 + 0.5, -3e18, 127.9, -128.9),
                  torch.int32: (0.0, -0.0, 2.7, -2.7, 0.99, -0.99, 2.1e9, -2.1e9, 127.9, -128.9),
                  torch.int8: (0.0, -0.0, 2.7, -2.7, 0.99, -0.99, 127.9, -128.9, 100.5, -5.5),
                  torch.uint8: (0.0, -0.0, 2.7, 0.99, 255.9, 128.5, -1.5, -2.7, -128.0, 200.2)}
INTS = (0, 1, -1, 127, 128, 255, 256, -129, 2049, 2051, 16777217, 2**31 - 1, 2**31, -(2**31) - 1, 2**40 + 1,
        2**53 + 1, 2**63 - 1, -(2**63))


def _source(src: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    if src is torch.bool:
        return torch.tensor([True, False, True, True])
    if src.is_floating_point:
        values = FLOATS_TO_INTS.get(dst, FLOATS_TO_FLOATS)
        if dst in FLOATS_TO_INTS and src is torch.float16:  # float16 overflows to inf: no int holds it
            values = tuple(v for v in values if abs(v) <= 65504)
        return torch.tensor(values, dtype=torch.float64).to(src)
    return torch.tensor(INTS, dtype=torch.int64).to(src)  # wrapped to the narrower ints


def _card(src: torch.dtype, dst: torch.dtype) -> tuple[OperatorCard, torch.Tensor]:
    source = _source(src, dst)
    card, _ = aten_card(aten.copy_.default, [torch.zeros(source.shape, dtype=dst), source])
    return card, source


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Values to compare exactly: a float's bits (signed zeros told apart), NaN as one pattern."""
    if not t.is_floating_point():
        return t
    bits = {8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()]
    return torch.where(t.isnan(), torch.full_like(t, float("nan")), t).view(bits)


def test_every_conversion_gives_eagers_bits(tmp_path: Path) -> None:
    cards = {pair: _card(*pair) for pair in PAIRS}
    sources = {pair: plan_for_card(card, "cpu").render("cpu", {}, CPU) for pair, (card, _) in cards.items()}
    with ThreadPoolExecutor(max_workers=2) as pool:
        libraries = dict(zip(sources, pool.map(lambda s: compile_cpu(s, tmp_path), sources.values()), strict=True))
    wrong = []
    for (src, dst), (_, source) in cards.items():
        want = torch.zeros(source.shape, dtype=dst).copy_(source)
        got = torch.zeros(source.shape, dtype=dst)
        assert run_kernel(libraries[(src, dst)], [got, source], [got]) == 0
        if not torch.equal(_bits(got), _bits(want)):
            wrong.append(f"{src} -> {dst}: {source.tolist()} gives {got.tolist()}, eager {want.tolist()}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_cuda_conversion_compiles_for_sm90(tmp_path: Path) -> None:
    sources = {f"copy_{str(src)[6:]}_to_{str(dst)[6:]}": plan_for_card(on_cuda(_card(src, dst)[0]), "cuda")
               .render("cuda", {}, H200) for src, dst in PAIRS}
    rc, err = nvcc_object(cuda_bundle(sources), tmp_path / "convert.cu")
    assert rc == 0 and "warning" not in err, err[-4000:]

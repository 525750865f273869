"""The sort family proposes a card only where eager's order of ties is the one its kernels write.

Eager's cpu unstable paths (``std::sort``/x86-simd-sort), cuda's unsorted topk and outputs the
kernel cannot write are refused, each with its reason; cuda's bitonic sort of rows up to 32 and
its topk are replayed step for step (checked against eager on a GPU in ``offline/sort/test_cuda_orders.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard, bind_aten_call
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.ops_sort import sort_plan
from agent_service.offline.sort.plan import SortPlan
from kforge_domain.card import OperatorCard
from tests.agent_service.agent_cards import aten_card, compile_cpu, on_cuda, run_kernel
from tests.agent_service.test_offline_cpu import CPU
from tests.agent_service.test_offline_cuda import H200

aten = torch.ops.aten


def _card(op: Any, args: list[Any], kwargs: dict[str, Any] | None, backend: str) -> OperatorCard:
    card, _ = aten_card(op, args, kwargs)
    return on_cuda(card) if backend == "cuda" else card


def _plan(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None, backend: str = "cpu") -> SortPlan:
    plan = plan_for_card(_card(op, args, kwargs, backend), backend)
    assert isinstance(plan, SortPlan)
    return plan


def _refusal(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None, backend: str = "cpu") -> str:
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(_card(op, args, kwargs, backend), backend)
    return str(refused.value)


def _as_dtype(card: OperatorCard, dtype: str) -> OperatorCard:
    """``card`` with its input and values output of ``dtype`` (a card eager itself refuses to run)."""
    x, values = (spec.model_copy(update={"dtype": dtype}) for spec in (card.inputs[0], card.outputs[0]))
    return card.model_copy(update={"inputs": [x], "outputs": [values, card.outputs[1]]})


def ints(*shape: int) -> torch.Tensor:
    return torch.randint(-3, 4, shape)


def test_unstable_eager_sorts_are_refused_with_their_reason() -> None:
    assert "std::sort or x86-simd-sort" in _refusal(aten.sort.default, [ints(4, 100)])
    assert "only stable=True" in _refusal(aten.sort.stable, [ints(4, 100)], {"stable": False})
    assert "only stable=True" in _refusal(aten.argsort.default, [ints(4, 100)])



def test_cuda_unstable_short_sorts_and_topk_replay_eager_steps() -> None:
    short = _plan(aten.sort.default, [ints(4, 32)], backend="cuda")
    assert (short.order, short.k, short.shared_bytes()) == ("cuda_bitonic", 32, 0)
    assert _plan(aten.argsort.default, [ints(4, 8)], backend="cuda").order == "cuda_bitonic"
    assert _plan(aten.sort.stable, [ints(4, 8)], {"stable": True}, backend="cuda").order == "stable"
    assert _plan(aten.sort.default, [ints(4, 33)], backend="cuda").order == "stable"
    router = _plan(aten.topk.default, [torch.randn(512, 256), 8], backend="cuda")
    assert (router.order, router.k, router.nan_order, router.descending) == ("cuda_topk", 8, "comparator", True)
    assert router.shared_bytes() == 256 * 8  # no pick list below 33
    assert _plan(aten.topk.default, [ints(4, 500), 32], backend="cuda").order == "cuda_topk"  # bitonic k
    assert _plan(aten.topk.default, [ints(4, 500), 33], backend="cuda").order == "stable"  # same order for ints
    wide = _plan(aten.topk.default, [torch.randn(4, 1000), 129, -1, False], backend="cuda")
    assert (wide.order, wide.nan_order, wide.descending, wide.padded_k) == ("cuda_topk", "bits", False, 256)
    assert wide.shared_bytes() == 1024 * 8 + 256 * 4


def test_unsorted_cuda_topk_bool_and_empty_topk_are_refused() -> None:
    assert "sorted=False" in _refusal(aten.topk.default, [ints(4, 500), 64, -1, True, False], backend="cuda")
    assert "no output to write" in _refusal(aten.topk.default, [ints(4, 50), 0], backend="cuda")  # the catalog
    empty = _card(aten.topk.default, [ints(4, 50), 0], None, "cuda")
    with pytest.raises(UnsupportedCard, match="k=0 writes nothing"):
        sort_plan(empty, "topk", bind_aten_call(empty))
    for backend in ("cpu", "cuda"):
        card = _as_dtype(_card(aten.topk.default, [ints(4, 50), 3], None, backend), "bool")
        with pytest.raises(UnsupportedCard, match=f"eager's {backend} topk does not take bool"):
            plan_for_card(card, backend)


def test_what_the_kernels_cannot_hold_or_write_is_refused() -> None:
    assert "shared memory" in _refusal(aten.sort.stable, [torch.randn(2, 5000)], {"stable": True}, backend="cuda")
    assert "shared memory" in _refusal(aten.sort.stable, [torch.randn(2, 8193).half()], {"stable": True},
                                       backend="cuda")
    complex_card = _as_dtype(_card(aten.sort.stable, [torch.randn(3, 8)], {"stable": True}, "cpu"), "complex64")
    with pytest.raises(UnsupportedCard, match="complex numbers have no order"):
        plan_for_card(complex_card, "cpu")
    assert "no code for int16" in _refusal(aten.sort.stable, [ints(3, 8).short()], {"stable": True})
    card = _card(aten.sort.stable, [torch.randn(4, 8)], {"stable": True}, "cpu")
    overlapping = card.outputs[0].model_copy(update={"stride": [0, 1]})
    with pytest.raises(UnsupportedCard, match="overlaps itself"):
        plan_for_card(card.model_copy(update={"outputs": [overlapping, card.outputs[1]]}), "cpu")
    topk = _card(aten.topk.default, [torch.randn(4, 8), 3], None, "cpu")
    topk_out = topk.model_copy(update={"op": "aten::topk.values"})
    with pytest.raises(UnsupportedCard, match="only the default overloads are templated"):
        sort_plan(topk_out, "topk", {})


def test_cuda_sorts_longer_than_a_warp_are_stable_and_place_nan_as_eager_does() -> None:
    short = _plan(aten.sort.default, [ints(8, 33)], backend="cuda")
    assert (short.length, short.order) == (33, "stable")  # WarpMergeSort or radix sort, both stable
    with pytest.raises(UnsupportedCard, match="which release"):  # their NaN orders differ
        _plan(aten.sort.default, [torch.randn(8, 33)], backend="cuda")
    long = _plan(aten.sort.default, [torch.randn(8, 129)], backend="cuda")
    assert long.nan_order == "bits"  # cub's radix sort: a NaN with its sign bit set before -inf
    assert _plan(aten.sort.stable, [torch.randn(8, 129)], {"stable": True}).nan_order == "comparator"  # cpu
    halves = _plan(aten.sort.stable, [torch.randn(2, 8192).half()], {"stable": True}, backend="cuda")
    assert halves.padded == 8192 and halves.knob_space("cuda", H200).choices["threads_per_block"][0] == 1024  # 2 rows
    topk = _plan(aten.topk.default, [ints(4, 500), 33], backend="cuda")
    assert (topk.k, topk.descending, topk.order) == (33, True, "stable")
    assert _plan(aten.topk.default, [ints(4, 500), 3]).order == "cpu_topk"


def test_radix_nan_order_puts_a_negative_nan_first_and_keeps_zeros_in_index_order(tmp_path: Path) -> None:
    """The keys of cuda rows over 128 (cub's radix order), checked through the cpu renderer: same key code."""
    nan, neg_nan = float("nan"), -float("nan")
    x = torch.tensor([0.0, neg_nan, -0.0, 1.0, nan, -float("inf"), 0.0, float("inf"), -0.0, -1.0])
    assert torch.signbit(x[1]) and not torch.signbit(x[4])
    plan = replace(_plan(aten.sort.stable, [x], {"stable": True}), nan_order="bits")
    lib = compile_cpu(plan.render("cpu", plan.knob_space("cpu", CPU).default(), CPU), tmp_path)
    values, indices = torch.empty_like(x), torch.empty(10, dtype=torch.int64)
    assert run_kernel(lib, [x], [values, indices]) == 0
    assert indices.tolist() == [1, 5, 9, 0, 2, 6, 8, 3, 7, 4]
    assert torch.equal(values.view(torch.int32), x[indices].view(torch.int32))
    descending = replace(plan, descending=True)
    lib = compile_cpu(descending.render("cpu", descending.knob_space("cpu", CPU).default(), CPU), tmp_path)
    assert run_kernel(lib, [x], [values, indices]) == 0
    assert indices.tolist() == [4, 7, 3, 0, 2, 6, 8, 9, 5, 1]

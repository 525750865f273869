"""Eager's cuda sorting orders, ties included: the unstable bitonic sort of short rows and topk.

Every mode's source compiles for sm_90 with nvcc here. Where a GPU is present, each kernel is
run on rows full of ties, signed zeros and NaNs of either sign, and its indices and the values'
bits must equal eager's exactly: the order of equal keys is the algorithm's, so only eager on the
same device can say what it is.
"""

from __future__ import annotations

import ctypes
import os
import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.sort.cuda import SMALL_BITONIC
from agent_service.offline.sort.plan import SortPlan
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import NVCC, aten_card, compile_cuda, cuda_bundle, nvcc_object, on_cuda, run_kernel

aten = torch.ops.aten
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
GPU = torch.cuda.is_available()
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _cuda_card(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> OperatorCard:
    return on_cuda(aten_card(op, args, kwargs or {})[0])


def _plan(card: OperatorCard) -> SortPlan:
    plan = plan_for_card(card, "cuda")
    assert isinstance(plan, SortPlan)
    return plan


def ties(rows: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Rows of few distinct values; floats also get -0.0, 0.0 and NaNs of both signs."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, (rows, n), generator=gen)
    if not dtype.is_floating_point:
        return x.to(dtype)
    x = x.to(torch.float32)
    special = torch.tensor([-0.0, 0.0, float("nan"), -float("nan"), float("inf"), -float("inf")])
    where = torch.randint(0, 4, (rows, n), generator=gen) == 0
    picks = special[torch.randint(0, len(special), (rows, n), generator=gen)]
    return torch.where(where, picks, x).to(dtype)


def _cases() -> list[tuple[str, Any, list[Any]]]:
    cases: list[tuple[str, Any, list[Any]]] = []
    for n in (2, 3, 8, 17, 32):
        for dtype in (torch.float32, torch.bfloat16, torch.int64):
            for descending in (False, True):
                cases.append((f"sort_{n}_{dtype}_{descending}", aten.sort.default,
                              [ties(67, n, dtype, n), -1, descending]))
    cases.append(("argsort_8", aten.argsort.default, [ties(40, 8, torch.float32, 1), -1, True]))
    cases.append(("sort_dim0", aten.sort.default, [ties(8, 30, torch.float32, 2), 0]))
    for n, k in ((8, 1), (8, 2), (128, 8), (256, 8), (256, 32), (256, 33), (500, 64), (1000, 128),
                 (1000, 129), (300, 300)):
        for dtype in (*FLOATS, torch.int64, torch.int32):
            if not dtype.is_floating_point and k > 32:
                continue  # the plain stable order, checked by the families model
            for largest in (True, False):
                cases.append((f"topk_{n}_{k}_{dtype}_{largest}", aten.topk.default,
                              [ties(9, n, dtype, n + k), k, -1, largest]))
    cases.append(("topk_dim0", aten.topk.default, [ties(200, 6, torch.float32, 3), 8, 0]))
    return cases


def _release_dependent(name: str) -> bool:
    """Float topks sorting 33 to 128 results: their NaN order is the release's (see ops_sort)."""
    parts = name.split("_")
    return name.startswith("topk_") and parts[1] != "dim0" and 32 < int(parts[2]) <= 128 and "float" in name


def _proposed() -> list[tuple[str, Any, list[Any]]]:
    return [case for case in _cases() if not _release_dependent(case[0])]


def eager_bitonic(keys: list[int], n: int) -> list[int]:
    """``bitonicSortKVInPlace`` as eager's 16 threads run it (SortUtils.cuh): the slots' indices after it."""
    slots = [(keys[j] if j < n else 0, j if j < n else 0, j < n) for j in range(32)]

    def swap(a: int, b: int, direction: bool) -> None:
        (ka, _, va), (kb, _, vb) = slots[a], slots[b]
        if ((ka < kb and va) or not vb) == direction:
            slots[a], slots[b] = slots[b], slots[a]

    size = 2
    while size < 32:
        stride = size // 2
        while stride > 0:
            for thread in range(16):
                pos = 2 * thread - (thread & (stride - 1))
                swap(pos, pos + stride, (thread & (size // 2)) != 0)
            stride //= 2
        size *= 2
    stride = 16
    while stride > 0:
        for thread in range(16):
            pos = 2 * thread - (thread & (stride - 1))
            swap(pos, pos + stride, False)
        stride //= 2
    return [index for _, index, _ in slots[:n]]


def test_the_one_thread_replay_of_eagers_network_swaps_as_its_16_threads_do(tmp_path: Path) -> None:
    """The kernel's serial network, built for the host, against eager's threads transcribed: ties
    and every row length land the same, and the keys come out sorted."""
    host = SMALL_BITONIC.replace("static __device__ __forceinline__", "static inline")
    source = ("#include <stdint.h>\ntypedef uint32_t TB;\n" + host + 'extern "C" void run(TB *key, int32_t *idx, '
              "uint32_t valid) { kf_small_bitonic(key, idx, valid); }\n")
    (tmp_path / "net.cpp").write_text(source)
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-o", str(tmp_path / "net.so"), str(tmp_path / "net.cpp")],
                   check=True, capture_output=True)
    run = ctypes.CDLL(str(tmp_path / "net.so")).run
    rng = random.Random(0)
    for trial in range(400):
        n = 2 + trial % 31
        keys = [rng.randrange(3 if trial % 2 else 1000) for _ in range(n)]
        key_array = (ctypes.c_uint32 * 32)(*keys, *[0] * (32 - n))
        idx_array = (ctypes.c_int32 * 32)(*range(n), *[0] * (32 - n))
        run(key_array, idx_array, ctypes.c_uint32((1 << n) - 1))
        assert list(idx_array[:n]) == eager_bitonic(keys, n), (n, keys)
        assert list(key_array[:n]) == sorted(keys)


def _source(op: Any, args: list[Any]) -> str:
    plan = _plan(_cuda_card(op, args))
    return plan.render("cuda", plan.knob_space("cuda", H200).default(), H200)


def test_the_replayed_orders_are_chosen_where_eager_takes_them() -> None:
    orders = {name: _plan(_cuda_card(op, args)).order for name, op, args in _proposed()}
    assert all(o == "cuda_bitonic" for name, o in orders.items() if name.startswith(("sort", "argsort")))
    assert all(o == "cuda_topk" for name, o in orders.items() if name.startswith("topk"))


def test_rows_fewer_than_the_sms_start_from_the_widest_block() -> None:
    def threads(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> tuple[int, ...]:
        return tuple(_plan(_cuda_card(op, args, kwargs)).knob_space("cuda", H200).choices["threads_per_block"])

    one_row = torch.randint(0, 64, (4096,))
    assert threads(aten.sort.stable, [one_row], {"stable": True}) == (1024, 512, 256, 128)
    assert threads(aten.topk.default, [one_row, 64])[0] == 1024
    assert threads(aten.sort.stable, [torch.randn(512, 1000)], {"stable": True})[0] == 256  # a row for every SM


def test_float_sorts_whose_nan_order_is_the_releases_are_refused_with_the_reason() -> None:
    refused = [(op, args) for name, op, args in _cases() if _release_dependent(name)]
    assert len(refused) == 18
    for op, args in refused:
        with pytest.raises(UnsupportedCard, match="the kernel cannot know which release"):
            plan_for_card(_cuda_card(op, args), "cuda")
    for stable_sort in (ties(4, 8, torch.float32, 0), ties(4, 100, torch.bfloat16, 0)):
        with pytest.raises(UnsupportedCard, match="NaNs of either sign"):
            plan_for_card(_cuda_card(aten.sort.stable, [stable_sort], {"stable": True}), "cuda")
    for kept in (ties(4, 129, torch.float32, 0), ties(4, 100, torch.int64, 0)):
        assert isinstance(plan_for_card(_cuda_card(aten.sort.stable, [kept], {"stable": True}), "cuda"), SortPlan)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_order_compiles_for_sm90_without_warnings(tmp_path: Path) -> None:
    picked = ["sort_8_torch.float32_False", "sort_32_torch.int64_True", "argsort_8", "topk_8_1_torch.float32_True",
              "topk_256_8_torch.bfloat16_True", "topk_1000_129_torch.float16_False", "topk_1000_129_torch.float32_True",
              "topk_256_32_torch.int64_True"]
    cases = {name: (op, args) for name, op, args in _cases()}
    sources = {name.replace(".", "_"): _source(*cases[name]) for name in picked}
    rc, err = nvcc_object(cuda_bundle(sources), tmp_path / "sorts.cu")
    assert rc == 0, err[-4000:]
    assert "warning" not in err, err[-4000:]


@pytest.mark.skipif(not GPU, reason="compares with eager's cuda kernels")
def test_indices_and_value_bits_equal_eagers_on_ties_zeros_and_nans(tmp_path: Path) -> None:
    cases = _proposed()
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:  # one nvcc per kernel, side by side
        libraries = list(pool.map(lambda case: compile_cuda(_source(case[1], case[2]), tmp_path), cases))
    wrong = []
    for (name, op, args), library in zip(cases, libraries, strict=True):
        x = args[0].cuda()
        expected = op(x, *args[1:])
        expected = expected if isinstance(expected, tuple) else (expected,)
        outputs = [torch.empty_like(e) for e in expected]
        assert run_kernel(library, [x], outputs) == 0, name
        torch.cuda.synchronize()
        for got, want in zip(outputs, expected, strict=True):
            if want.is_floating_point():  # compare bits: NaN payloads and zero signs included
                bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
                got, want = got.view(bits), want.view(bits)
            if not torch.equal(got, want):
                wrong.append(name)
                break
    assert not wrong, f"{len(wrong)} of {len(cases)} differ from eager: {wrong}"


@pytest.mark.skipif(not GPU, reason="compares with eager's cuda kernels")
def test_the_refused_topks_follow_one_of_the_two_nan_orders_on_this_release(tmp_path: Path) -> None:
    """Why they are refused: by their headers, eager's order there is the merge sort's (the
    comparator's) on some releases and the radix sort's (the bits') on others; on this device's
    release every case follows the same one of the two."""
    runs = []
    for name, op, args in (case for case in _cases() if _release_dependent(case[0])):
        card = _cuda_card(op, args)
        for nan_order in ("comparator", "bits"):
            plan = SortPlan(summary=name, inputs=tuple(card.inputs), outputs=tuple(card.outputs), x=0, dim=1,
                            k=int(args[1]), descending=bool(args[3]), order="cuda_topk", nan_order=nan_order)
            runs.append((name, nan_order, op, args, plan.render("cuda", plan.knob_space("cuda", H200).default(), H200)))
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        libraries = list(pool.map(lambda run: compile_cuda(run[4], tmp_path), runs))
    matches: dict[str, set[str]] = {}
    for (name, nan_order, op, args, _), library in zip(runs, libraries, strict=True):
        x = args[0].cuda()
        expected = op(x, *args[1:])
        outputs = [torch.empty_like(e) for e in expected]
        assert run_kernel(library, [x], outputs) == 0, name
        torch.cuda.synchronize()
        bits = [o.view(torch.int32 if o.element_size() == 4 else torch.int16) if o.is_floating_point() else o
                for o in (*outputs, *expected)]
        found = matches.setdefault(name, set())
        if all(torch.equal(g, e) for g, e in zip(bits[:2], bits[2:], strict=True)):
            found.add(nan_order)
    common = set.intersection(*matches.values())
    print(f"torch {torch.__version__}: eager's order for float topks of 33 to 128 results: {sorted(common)}")
    assert common, matches


def _network_cases() -> list[tuple[str, Any, list[Any]]]:
    """Orders run through the shared-memory network, rows long enough for many warps."""
    return [("stable_4096_int64", aten.sort.stable, [ties(1, 4096, torch.int64, 5)]),
            ("stable_1000_f16_desc", aten.sort.stable, [ties(3, 1000, torch.float16, 6)]),
            ("stable_100_int32", aten.sort.stable, [ties(5, 100, torch.int32, 7)]),
            ("topk_4096_64_int64", aten.topk.default, [ties(2, 4096, torch.int64, 8), 64]),
            ("topk_3000_300_int32", aten.topk.default, [ties(2, 3000, torch.int32, 9), 300, -1, False])]


def _network_kwargs(name: str) -> dict[str, Any]:
    return {"stable": True, "descending": name.endswith("desc")} if name.startswith("stable") else {}


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_the_network_compiles_at_every_block_size(tmp_path: Path) -> None:
    sources = {}
    for name, op, args in _network_cases():
        plan = _plan(_cuda_card(op, args, _network_kwargs(name)))
        for block in plan.knob_space("cuda", H200).choices["threads_per_block"]:
            sources[f"{name}_{block}"] = plan.render("cuda", {"threads_per_block": block}, H200)
    rc, err = nvcc_object(cuda_bundle(sources), tmp_path / "network.cu")
    assert rc == 0 and "warning" not in err, err[-4000:]


@pytest.mark.skipif(not GPU, reason="compares with eager's cuda kernels")
def test_the_network_gives_eagers_order_at_every_block_size(tmp_path: Path) -> None:
    """Passes of small strides wait only for their own warp: any block size must still give eager's order."""
    runs = []
    for name, op, args in _network_cases():
        plan = _plan(_cuda_card(op, args, _network_kwargs(name)))
        for block in plan.knob_space("cuda", H200).choices["threads_per_block"]:
            runs.append((f"{name}_{block}", op, args, plan.render("cuda", {"threads_per_block": block}, H200)))
    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        libraries = list(pool.map(lambda run: compile_cuda(run[3], tmp_path), runs))
    for (name, op, args, _), library in zip(runs, libraries, strict=True):
        x = args[0].cuda()
        expected = op(x, *args[1:], **_network_kwargs(name.rsplit("_", 1)[0]))
        outputs = [torch.empty_like(e) for e in expected]
        for _ in range(3):  # a race shows on some launches only
            assert run_kernel(library, [x], outputs) == 0, name
            torch.cuda.synchronize()
            assert all(torch.equal(g.view(torch.int16) if g.is_floating_point() else g,
                                   e.view(torch.int16) if e.is_floating_point() else e)
                       for g, e in zip(outputs, expected, strict=True)), name

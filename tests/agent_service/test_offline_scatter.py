"""index_add and index_add_: each case compiled with g++ and run against eager on indices that repeat,
along inner and outer dims of strided tensors, in float, half and integer dtypes; an index out of range
leaves the output untouched and reports an error, as eager raises."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import (
    aten_card,
    compile_cpu,
    compile_cuda_each,
    cuda_bundle,
    nvcc_object,
    on_cuda,
    root_and_revisions,
    run_kernel,
    to_cuda_keeping_strides,
)

aten = torch.ops.aten
bf16 = torch.bfloat16
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
REPEATS = torch.tensor([0, 2, 2, 5, 0, 1, 2, 5, 5])  # rows 0, 2 and 5 take several sources, 3 and 4 none


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)


CASES: dict[str, Callable[[], tuple[list[Any], dict[str, Any]]]] = {
    "rows_f32": lambda: ([r(6, 33), 0, REPEATS, r(9, 33)], {}),
    "rows_f32_alpha": lambda: ([r(6, 33), 0, REPEATS, r(9, 33)], {"alpha": -0.75}),
    "columns_of_a_transposed_bf16": lambda: ([r(33, 6, dtype=bf16).t(), 1, REPEATS.flip(0)[:4], r(6, 4, dtype=bf16)],
                                             {}),
    "middle_dim_of_a_slice_int32_index": lambda: ([r(2, 7, 40)[:, :6, ::2], 1, REPEATS.int(), r(2, 9, 20)], {}),
    "vector_f64": lambda: ([r(6, dtype=torch.float64), 0, REPEATS, r(9, dtype=torch.float64)], {"alpha": 3.0}),
    "rows_f64_alpha_a_tenth": lambda: ([r(6, 5, dtype=torch.float64), 0, REPEATS, r(9, 5, dtype=torch.float64)],
                                       {"alpha": 0.1}),
    "rows_int64_wrap": lambda: ([torch.full((6, 3), 2**62), 0, REPEATS, torch.full((9, 3), 2**62)], {"alpha": 3}),
    "rows_int8_wrap": lambda: ([torch.full((6, 3), 100, dtype=torch.int8), 0, REPEATS,
                                torch.full((9, 3), 90, dtype=torch.int8)], {}),
    "rows_f16_last_index": lambda: ([r(6, 8, dtype=torch.float16), -2, REPEATS[:3], r(3, 8, dtype=torch.float16)],
                                    {}),
}


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scatter_kernels")


@pytest.mark.parametrize("name", list(CASES))
def test_index_add_is_eagers_bit_for_bit(name: str, build_dir: Path) -> None:
    """Sources are added in index order and rounded after each add, as eager's cpu kernel adds them."""
    args, kwargs = CASES[name]()
    card, (expected,) = aten_card(aten.index_add.default, args, kwargs)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "index_add"
        got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype).fill_(7)
        assert run_kernel(compile_cpu(source, build_dir), tensors, [got]) == 0
        assert torch.equal(got, expected), (name, knobs, (got.double() - expected.double()).abs().max())


def test_in_place_index_add_adds_into_the_output_it_is_given(build_dir: Path) -> None:
    x, source = r(4, 6, 5)[:, 1:], r(4, 9, 5)
    card, _ = aten_card(aten.index_add_.default, [x.clone(), 1, REPEATS % 5, source])
    plan = plan_for_card(card, "cpu")
    assert plan.family == "index_add" and card.mutated_inputs == [0]
    target = x.clone()
    library = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    assert run_kernel(library, [torch.full_like(x, 77.0), REPEATS % 5, source], [target]) == 0  # self is read in place
    assert torch.equal(target, x.clone().index_add_(1, REPEATS % 5, source))


def test_an_index_out_of_range_writes_nothing_and_is_reported(build_dir: Path) -> None:
    """Eager raises on an index past the dim or below zero; the kernel checks every index before it
    writes, so an in-place call is never half applied when its caller then runs eager."""
    x, source = r(6, 4), r(9, 4)
    card, _ = aten_card(aten.index_add_.default, [x.clone(), 0, REPEATS, source])
    library = compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), build_dir)
    for bad in (6, -1, 2**40):
        index = REPEATS.clone()
        index[5] = bad
        target = x.clone()
        assert run_kernel(library, [x, index, source], [target]) != 0
        assert torch.equal(target, x)
        with pytest.raises((IndexError, RuntimeError), match="out of"):
            x.clone().index_add_(0, index, source)


def _refusal(args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    card, _ = aten_card(aten.index_add.default, args, kwargs)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def test_calls_the_template_does_not_cover_are_refused_with_a_reason() -> None:
    assert "nothing to add" in _refusal([r(6, 3), 0, REPEATS[:0], r(0, 3)])
    assert "not templated" in _refusal([torch.zeros(6, 3, dtype=torch.complex64), 0, REPEATS,
                                        torch.ones(9, 3, dtype=torch.complex64)])


@pytest.mark.parametrize("in_place", [False, True])
def test_the_cuda_kernels_build_for_sm_90(in_place: bool, tmp_path: Path) -> None:
    op = aten.index_add_.default if in_place else aten.index_add.default
    for args, kwargs in ([r(64, 512, dtype=bf16), 0, REPEATS.repeat(20), r(180, 512, dtype=bf16)], {}), \
            ([r(8, 64, 33)[:, :, :32], 2, REPEATS.int(), r(8, 64, 9)], {"alpha": 2.0}), \
            ([torch.zeros(6, 3, dtype=torch.int64), 0, REPEATS, torch.ones(9, 3, dtype=torch.int64)], {"alpha": 5}), \
            ([torch.zeros(6, 3, dtype=torch.int8), 0, REPEATS, torch.ones(9, 3, dtype=torch.int8)], {}):
        card, _ = aten_card(op, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], kwargs)
        card = on_cuda(card)
        for source, knobs in root_and_revisions(card, H200):
            unit = tmp_path / f"k{len(list(tmp_path.iterdir()))}.cu"
            rc, log = nvcc_object(source, unit)
            assert rc == 0 and unit.with_suffix(".o").stat().st_size > 0, (knobs, log)


def _scatter_case(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """self (5, 7), an index (6, 4) whose columns repeat targets and leave some out, a source (8, 6)."""
    x = (r(5, 7) * 4).to(dtype)
    index = torch.randint(0, 5, (6, 4), generator=torch.Generator().manual_seed(3))
    source = (r(8, 6) * 4).to(dtype)
    return x, index, source


SCATTER_CASES: dict[str, Callable[[], tuple[Any, list[Any], dict[str, Any]]]] = {
    **{f"scatter_reduce_{reduce}_{str(dtype).removeprefix('torch.')}_{'self' if include else 'no_self'}": (
        lambda reduce=reduce, dtype=dtype, include=include: (
            aten.scatter_reduce.two, [_scatter_case(dtype)[0], 0, _scatter_case(dtype)[1], _scatter_case(dtype)[2],
                                      reduce], {"include_self": include}))
       for reduce in ("sum", "mean", "amax", "amin") for dtype in (torch.float32, bf16, torch.int64)
       for include in (True, False)},
    "scatter_add_f32_of_transposed_along_1": lambda: (
        aten.scatter_add.default, [r(7, 5).t(), 1, torch.randint(0, 7, (5, 9), generator=torch.Generator()),
                                   r(6, 9)], {}),
    "scatter_add_f16_expanded_index": lambda: (
        aten.scatter_add.default, [r(5, 8, dtype=torch.float16), 0, REPEATS.remainder(5).view(-1, 1).expand(9, 8),
                                   r(9, 8, dtype=torch.float16)], {}),
    "scatter_src_last_source_wins_bf16": lambda: (
        aten.scatter.src, [r(5, 7, dtype=bf16), 0, _scatter_case(bf16)[1], r(8, 6, dtype=bf16)], {}),
    "scatter_value_int64_along_1": lambda: (
        aten.scatter.value, [torch.arange(35).view(5, 7), 1, torch.randint(0, 7, (5, 3), generator=torch.Generator()),
                             -(2**40)], {}),
    "scatter_value_f16": lambda: (aten.scatter.value, [r(5, 7, dtype=torch.float16), 0, _scatter_case(bf16)[1], 0.1],
                                  {}),
    "scatter_src_bool_top_p_mask_back_to_vocabulary_order": lambda: (
        aten.scatter.src, [r(6, 40) > 0.5, 1, torch.stack([torch.randperm(40, generator=torch.Generator().manual_seed(
            row)) for row in range(6)]), r(6, 40) > 0.3], {}),
    "scatter_value_bool_nan_is_true": lambda: (
        aten.scatter.value, [r(6, 40) > 2.0, 1, torch.randint(0, 40, (6, 3), generator=torch.Generator()),
                             float("nan")], {}),
    "scatter_reduce_amax_with_nans": lambda: (
        aten.scatter_reduce.two, [torch.tensor([[float("nan"), 1.0], [2.0, 3.0]]), 0, torch.tensor([[0, 1], [0, 1]]),
                                  torch.tensor([[5.0, float("nan")], [-1.0, 0.5]]), "amax"], {}),
}


@pytest.mark.parametrize("name", list(SCATTER_CASES))
def test_scatter_reductions_are_eagers_bit_for_bit(name: str, build_dir: Path) -> None:
    """Each column in order, half sums in float rounded once, a mean dividing the rounded sum, a NaN
    kept by max and min, include_self=False starting from the first source: eager's cpu results."""
    op, args, kwargs = SCATTER_CASES[name]()
    card, (expected,) = aten_card(op, args, kwargs)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    for source, knobs in root_and_revisions(card, CPU):
        assert knobs["family"] == "scatter_reduce"
        got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype).fill_(7)
        assert run_kernel(compile_cpu(source, build_dir), tensors, [got]) == 0
        assert torch.equal(got.nan_to_num(9.5), expected.nan_to_num(9.5)), (name, knobs, got, expected)
        assert torch.equal(got.isnan(), expected.isnan())


def test_in_place_scatter_add_writes_self_and_an_index_out_of_range_writes_nothing(build_dir: Path) -> None:
    x, index, source = _scatter_case(torch.float32)
    card, _ = aten_card(aten.scatter_reduce_.two, [x.clone(), 0, index, source, "mean"], {"include_self": False})
    one_hot, _ = aten_card(aten.scatter_.value, [torch.zeros(6, 5), 1, index[:, :1], 1.0])
    assert plan_for_card(one_hot, "cpu").family == "scatter_reduce" and one_hot.mutated_inputs == [0]
    plan = plan_for_card(card, "cpu")
    assert plan.family == "scatter_reduce" and card.mutated_inputs == [0]
    library = compile_cpu(plan.render("cpu", {}, CPU), build_dir)
    target = x.clone()
    assert run_kernel(library, [torch.full_like(x, 77.0), index, source], [target]) == 0
    assert torch.equal(target, x.clone().scatter_reduce_(0, index, source, "mean", include_self=False))
    for bad in (5, -1):
        wrong, target = index.clone(), x.clone()
        wrong[4, 2] = bad
        assert run_kernel(library, [x, wrong, source], [target]) != 0
        assert torch.equal(target, x)
        with pytest.raises(RuntimeError, match="out of bounds"):
            x.clone().scatter_reduce_(0, wrong, source, "mean", include_self=False)


def test_every_scatter_case_builds_for_sm_90_and_means_take_a_count_workspace(tmp_path: Path) -> None:
    """Sums, means, max, min, writes by sources or one value, with and without self: one nvcc for all."""
    sources = {}
    for name, make in SCATTER_CASES.items():
        plan = plan_for_card(on_cuda(aten_card(*make())[0]), "cuda")
        for walk in plan.knob_space("cuda", H200).choices["walk"]:
            sources[f"{name}_{walk}"] = plan.render("cuda", {"walk": walk}, H200)
            assert ("kf_workspace_bytes" in sources[f"{name}_{walk}"]) == ("_mean_" in name), name
    assert len(sources) > len(SCATTER_CASES)
    rc, log = nvcc_object(cuda_bundle(sources), tmp_path / "scatter.cu")
    assert rc == 0, log[-3000:]


def test_only_order_free_scatters_walk_by_sources_and_many_sources_a_column_walk_so_first() -> None:
    """Atomics only where every order gives the same bits (max, min, integer sums, one value); float
    sums keep the in-order walk. Message passing (20000 edges into 500 nodes) starts from sources."""
    x, index, source = _scatter_case(torch.float32)
    walks = {reduce: plan_for_card(on_cuda(aten_card(aten.scatter_reduce.two, [x, 0, index, source, reduce])[0]),
                                   "cuda").knob_space("cuda", H200).choices["walk"]
             for reduce in ("sum", "mean", "amax", "amin")}
    assert walks["sum"] == walks["mean"] == ("columns",) and set(walks["amax"]) == set(walks["amin"]) == {
        "columns", "sources"}
    ints = plan_for_card(on_cuda(aten_card(aten.scatter_add.default, [x.long(), 0, index, source.long()])[0]), "cuda")
    assert ints.order_free
    edges = torch.randint(0, 500, (20000, 1)).expand(20000, 64)
    messages = aten_card(aten.scatter_reduce.two, [torch.zeros(500, 64), 0, edges, torch.randn(20000, 64), "amax"])
    assert plan_for_card(on_cuda(messages[0]), "cuda").knob_space("cuda", H200).choices["walk"][0] == "sources"
    wide = aten_card(aten.scatter_reduce.two, [torch.zeros(4, 65536), 0, torch.randint(0, 4, (8, 65536)),
                                               torch.randn(8, 65536), "amin"])
    assert plan_for_card(on_cuda(wide[0]), "cuda").knob_space("cuda", H200).choices["walk"][0] == "columns"


def _cuda_cases() -> list[tuple[Any, list[Any], dict[str, Any]]]:
    """index_add and every scatter case of the cpu tests whose eager result is one on cuda (a write
    where several sources reach one element keeps any of them there), a write through a
    permutation, and a large sum whose rows repeat often."""
    cases: list[tuple[Any, list[Any], dict[str, Any]]] = [(aten.index_add.default, *CASES[name]()) for name in CASES]
    cases += [SCATTER_CASES[name]() for name in SCATTER_CASES if name != "scatter_src_last_source_wins_bf16"]
    permutation = torch.randperm(9, generator=torch.Generator().manual_seed(5))
    cases.append((aten.scatter.src, [r(9, 7, dtype=bf16), 0, permutation.view(-1, 1).expand(9, 7).contiguous(),
                                     r(9, 7, dtype=bf16)], {}))
    cases.append((aten.index_add.default, [r(64, 512, dtype=bf16), 0, REPEATS.repeat(20), r(180, 512, dtype=bf16)],
                  {}))
    cases.append((aten.scatter_reduce.two, [r(64, 512, dtype=bf16), 0, REPEATS.repeat(40).view(-1, 1).expand(360, 512),
                                            r(360, 512, dtype=bf16), "mean"], {"include_self": False}))
    edges = torch.randint(0, 500, (20000, 1), generator=torch.Generator().manual_seed(9)).expand(20000, 64)
    for reduce, dtype in (("amax", torch.float32), ("amin", bf16), ("sum", torch.int64), ("mean", torch.int32)):
        messages = (r(20000, 64) * 50).to(dtype)
        cases.append((aten.scatter_reduce.two, [torch.zeros(500, 64, dtype=dtype), 0, edges, messages, reduce],
                      {"include_self": reduce != "amax"}))
    return cases


def _each_walk(op: Any, args: list[Any], kwargs: dict[str, Any]) -> list[str]:
    """The case's cuda kernel at its root knobs, and at each other walk its plan offers."""
    card = on_cuda(aten_card(op, args, kwargs)[0])
    plan = plan_for_card(card, "cuda")
    walks = plan.knob_space("cuda", H200).choices.get("walk", ("",))
    return [next(root_and_revisions(card, H200, revisions=0))[0],
            *(plan.render("cuda", {"walk": walk}, H200) for walk in walks[1:])]


def _adds(op: Any, args: list[Any]) -> bool:
    """Whether the op's result is a sum (or mean) of sources, whose rounding depends on the order."""
    return op in (aten.index_add.default, aten.scatter_add.default) or args[4:5] in (["sum"], ["mean"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="runs the cuda kernels on the device")
def test_cuda_scatters_match_eager_on_the_device_and_repeat_their_bits(tmp_path: Path) -> None:
    """Each column walked in order, and where the order cannot matter each source by its own thread:
    sums and means as close to the exact result as eager's atomic adds are, max, min and writes
    eager's own bits (NaNs too), and the same bits on every call (the sandbox's determinism check
    rejected atomic float adds)."""
    runs = [(op, args, kwargs, source) for op, args, kwargs in _cuda_cases() for source in _each_walk(op, args, kwargs)]
    libraries = compile_cuda_each([source for *_, source in runs], tmp_path)
    for (op, args, kwargs, _), library in zip(runs, libraries, strict=True):
        cuda_args = [to_cuda_keeping_strides(a) if isinstance(a, torch.Tensor) else a for a in args]
        expected = op(*[a.clone() if isinstance(a, torch.Tensor) else a for a in cuda_args], **kwargs).cpu()
        tensors = [a for a in cuda_args if isinstance(a, torch.Tensor)]
        results = []
        for _ in range(2):
            got = torch.empty_strided(expected.shape, expected.stride(), dtype=expected.dtype, device="cuda").fill_(7)
            assert run_kernel(library, tensors, [got]) == 0
            results.append(got.cpu())
        assert torch.equal(results[0].nan_to_num(9.5), results[1].nan_to_num(9.5)), op
        if not _adds(op, args):
            assert torch.equal(results[0].nan_to_num(9.5), expected.nan_to_num(9.5)), (op, args[4:], results[0])
            assert torch.equal(results[0].isnan(), expected.isnan()), op
        elif expected.dtype in (bf16, torch.float16):
            # each add rounds to the dtype, here as in eager's atomics, in another order: compare
            # the two errors against the exact sum (orders alone moved a bf16 element by 0.69)
            exact = op(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args],
                       **kwargs)
            ours, eagers = (results[0].double() - exact).norm(), (expected.double() - exact).norm()
            assert ours <= 2 * eagers + 1e-3 * exact.norm(), (op, ours, eagers)
        elif expected.is_floating_point():
            torch.testing.assert_close(results[0], expected, rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(results[0], expected), op

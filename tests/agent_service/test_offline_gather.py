"""The gather families plan what they copy exactly and refuse, with a reason, what they would convert."""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.gather import fill_bits
from kforge_domain.device import DeviceInfo
from tests.agent_service.agent_cards import (
    NVCC,
    aten_card,
    compile_cpu,
    compile_cuda,
    cuda_bundle,
    nvcc_object,
    on_cuda,
    run_kernel,
)
from tests.agent_service.test_offline_cpu import CPU

H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)

aten = torch.ops.aten
bf16 = torch.bfloat16


def _refusal(op: Any, args: list[Any], kwargs: dict[str, Any] | None = None) -> str:
    card, _ = aten_card(op, args, kwargs)
    with pytest.raises(UnsupportedCard) as refused:
        plan_for_card(card, "cpu")
    return str(refused.value)


def test_calls_that_convert_or_select_a_data_dependent_count_are_refused() -> None:
    assert "converts" in _refusal(aten.cat.default, [[torch.randn(2, 3), torch.randn(2, 3).to(bf16)], 1])
    assert "2 index tensors" in _refusal(aten.index.Tensor, [torch.randn(4, 5), [torch.tensor([1]), torch.tensor([2])]])
    assert "mask" in _refusal(aten.index.Tensor, [torch.randn(4, 5), [torch.tensor([True, False, True, True])]])
    assert "mode replicate" in _refusal(aten.pad.default, [torch.randn(1, 2, 6), [-1, 2], "replicate"])  # a crop
    assert "tensor value" in _refusal(aten.masked_fill.Tensor,
                                      [torch.randn(3, 4), torch.randn(3, 4) > 0, torch.tensor(1.0)])
    complex_x = torch.randn(3, dtype=torch.complex64)
    assert "complex" in _refusal(aten.where.ScalarOther, [torch.randn(3) > 0, complex_x, 1.0])
    assert "int64" in _refusal(aten.gather.default, [torch.randn(4, 5), 1, torch.zeros(4, 2, dtype=torch.int32)])
    assert "bool" in _refusal(aten.where.self, [torch.ones(3, dtype=torch.uint8), torch.randn(3), torch.randn(3)])
    assert "repeats given as a tensor" in _refusal(aten.repeat_interleave.self_Tensor,
                                                  [torch.randn(3, 4), torch.tensor([1, 0, 2]), 0])
    assert "repeats given as a tensor" in _refusal(aten.repeat_interleave.Tensor, [torch.tensor([1, 0, 2])])
    assert "is a view in eager" in _refusal(aten.reshape.default, [torch.randn(4, 6), [6, 4]])
    assert "is a view in eager" in _refusal(aten.flatten.using_ints, [torch.randn(2, 3, 4)[:, :, :2], 0, 1])


def test_an_embedding_index_out_of_range_is_reported_and_never_read(tmp_path: Path) -> None:
    """embedding does not wrap a negative index as ``index`` does: eager raises on it and on one past the
    last row, and the cpu kernel returns an error (its caller then runs eager, which raises)."""
    weight = torch.randn(10, 4)
    card, _ = aten_card(aten.embedding.default, [weight, torch.tensor([1, 2, 3])])
    library = compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), tmp_path)
    for bad in (10, -1, 2**40):
        assert run_kernel(library, [weight, torch.tensor([1, bad, 3])], [torch.empty(3, 4)]) != 0
    out = torch.empty(3, 4)
    assert run_kernel(library, [weight, torch.tensor([9, 0, 3])], [out]) == 0
    assert torch.equal(out, weight[[9, 0, 3]])


def test_one_hot_is_eagers_and_a_class_out_of_range_is_reported(tmp_path: Path) -> None:
    """one_hot of a transposed index tensor is eager's exactly; a class past the count or negative makes
    eager raise, and the cpu kernel returns an error; a class count taken from the values, and
    where(condition), whose output shape depends on the values, are refused."""
    classes = torch.tensor([[0, 4, 2], [3, 3, 1]]).t()
    card, _ = aten_card(aten.one_hot.default, [classes, 5])
    library = compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), tmp_path)
    out = torch.full((3, 2, 5), 7)
    assert run_kernel(library, [classes], [out]) == 0
    assert torch.equal(out, torch.nn.functional.one_hot(classes, 5))
    for bad in (5, -1, 2**40):
        assert run_kernel(library, [torch.tensor([[0, bad, 2], [3, 3, 1]]).t()], [out]) != 0
        with pytest.raises(RuntimeError, match="Class values"):
            torch.nn.functional.one_hot(torch.tensor([[0, bad, 2], [3, 3, 1]]).t(), 5)
    assert "depends on them" in _refusal(aten.one_hot.default, [classes])
    assert "depends on the values" in _refusal(aten.where.default, [torch.tensor([True, False, True])])


def test_fill_constants_are_the_bits_eager_stores() -> None:
    assert fill_bits(float("-inf"), "bfloat16") == "(uint16_t)0xff80ULL"
    assert fill_bits(0.5, "float32") == "(uint32_t)0x3f000000ULL"
    assert fill_bits(-1, "int64") == "(int64_t)0xffffffffffffffffULL"
    assert fill_bits(True, "bool") == "(uint8_t)0x1ULL"
    with pytest.raises(UnsupportedCard):
        fill_bits(1j, "float32")


def test_nearest_maps_without_a_formula_are_embedded_as_tables() -> None:
    exact, _ = aten_card(aten._upsample_nearest_exact2d.vec, [torch.randn(1, 2, 6, 6), None, [1.5, 0.7]])
    plan = plan_for_card(exact, "cpu")
    assert [t.name for t in plan.tables] == ["kf_src2", "kf_src3"]
    assert plan.tables[0].values == (0, 1, 1, 2, 3, 3, 4, 5, 5)  # floor((o + 0.5) / 1.5)
    doubled, _ = aten_card(aten.upsample_nearest2d.vec, [torch.randn(1, 2, 6, 6), None, [2.0, 2.0]])
    assert not plan_for_card(doubled, "cpu").tables


def test_a_gather_index_out_of_range_is_reported_and_never_read(tmp_path: Path) -> None:
    """gather wraps no negative index: eager raises on it and on one past the dim's end, and the cpu
    kernel returns an error (its caller then runs eager, which raises)."""
    x = torch.randn(3, 5)
    card, _ = aten_card(aten.gather.default, [x, 1, torch.tensor([[0, 4], [1, 2], [3, 3]])])
    library = compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), tmp_path)
    for bad in (5, -1, 2**40):
        assert run_kernel(library, [x, torch.tensor([[0, 4], [1, bad], [3, 3]])], [torch.empty(3, 2)]) != 0
    index, out = torch.tensor([[4, 0], [2, 2], [1, 3]]), torch.empty(3, 2)
    assert run_kernel(library, [x, index], [out]) == 0
    assert torch.equal(out, torch.gather(x, 1, index))


def test_where_converts_each_operand_to_the_result_dtype_as_eager(tmp_path: Path) -> None:
    """An int tensor beside a Python float promotes to the default float dtype, a float number is stored
    as bfloat16 stores it: every element is eager's bits."""
    mask = torch.tensor([True, False, True, False, False, True])
    cases = [(aten.where.ScalarOther, [mask, torch.tensor([1, -2, 3, 2**40, 5, -7]), 0.1]),
             (aten.where.self, [mask, torch.tensor([1.5, -2, 3, 1e30, 5, -7]).to(bf16), torch.arange(6)]),
             (aten.where.ScalarSelf, [mask, -1e4, torch.arange(6, dtype=torch.uint8)])]
    for op, args in cases:
        card, (expected,) = aten_card(op, args)
        library = compile_cpu(plan_for_card(card, "cpu").render("cpu", {}, CPU), tmp_path)
        got = torch.empty_like(expected)
        assert run_kernel(library, [a for a in args if isinstance(a, torch.Tensor)], [got]) == 0
        assert got.dtype == expected.dtype and torch.equal(got, expected), (op, got, expected)


def _triangles() -> list[tuple[Any, list[Any]]]:
    """triu and tril over batched, transposed, bool and half matrices, diagonals inside and far outside."""
    return [(aten.triu.default, [torch.randn(3, 5, 7)]), (aten.tril.default, [torch.randn(5, 7), -2]),
            (aten.triu.default, [torch.randn(4, 9).t(), 3]), (aten.tril.default, [torch.rand(6, 6) > 0.5, 100]),
            (aten.triu.default, [torch.randn(6, 6).to(bf16), -100]), (aten.tril.default, [torch.randn(64, 512), 7])]


def test_triu_and_tril_keep_eagers_side_of_the_diagonal(tmp_path: Path) -> None:
    for op, args in _triangles():
        card, (expected,) = aten_card(op, args)
        plan = plan_for_card(card, "cpu")
        assert plan.family == "gather_triangle"
        got = torch.full_like(expected, 1)
        assert run_kernel(compile_cpu(plan.render("cpu", {}, CPU), tmp_path), [args[0]], [got]) == 0
        assert torch.equal(got, expected), (op, args[1:])


def _tied_rows(rows: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Rows of five distinct values, a few NaNs and signed zeros: the first index of the best decides."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-2, 3, (rows, n), generator=gen).to(torch.float32)
    x[torch.rand(rows, n, generator=gen) < 0.1] = -0.0
    x[torch.rand(rows, n, generator=gen) < 2.0 / n] = float("nan")
    return x.to(dtype)


def _cuda_plan(op: Any, args: list[Any]) -> Any:
    return plan_for_card(on_cuda(aten_card(op, args)[0]), "cuda")


def test_cuda_argmax_of_long_inner_rows_shares_each_row_among_a_warp_or_block() -> None:
    for args, first in (([torch.randn(64, 3000), -1], "warp"), ([torch.randn(64, 3000), 0], "flat"),
                        ([torch.randn(64, 40), -1], "flat"), ([torch.randn(200, 8192), -1], "block")):
        modes = _cuda_plan(aten.argmax.default, args).knob_space("cuda", H200).choices["mode"]
        assert modes[0] == first and "split" not in modes, args[1:]


def test_cuda_argmax_of_few_long_rows_splits_each_row_among_blocks() -> None:
    """A sampler's argmax over a vocabulary gives a block or a warp per row too few blocks to fill the
    device: each row is cut into pieces, a block each, and a second kernel merges the pieces."""
    logits = torch.randn(8, 151936, dtype=bf16)
    space = _cuda_plan(aten.argmax.default, [logits, -1]).knob_space("cuda", H200)
    assert space.choices["mode"][0] == "split"
    assert space.choices["per_thread"][0] == 16  # 8 rows of 38 pieces: 304 blocks, each multiprocessor one
    assert _cuda_plan(aten.argmax.default, [logits[:1]]).knob_space("cuda", H200).choices["per_thread"][0] == 4
    source = _cuda_plan(aten.argmax.default, [logits, -1]).render("cuda", {"mode": "split"}, H200)
    assert "kf_arg_pieces<<<304, 256, 0, s>>>" in source and "kf_arg_merge<<<2, 128, 0, s>>>" in source
    assert 'extern "C" int64_t kf_workspace_bytes(void) { return ((int64_t)304LL' in source
    middling = _cuda_plan(aten.argmax.default, [torch.randn(100, 8192), -1]).knob_space("cuda", H200)
    assert middling.choices["mode"] == ("block", "warp", "flat", "split")  # 100 blocks leave 32 of 132 idle
    column = _cuda_plan(aten.argmin.default, [torch.randn(20000, 3), 0]).knob_space("cuda", H200)
    assert column.choices["mode"] == ("split", "block", "warp", "flat")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda argmax")
def test_every_cuda_argmax_mode_takes_eagers_index_for_ties_and_nans(tmp_path: Path) -> None:
    shapes = (((33, 3000), torch.bfloat16, [-1]), ((5, 700), torch.float32, [1, True]),
              ((1, 151936), torch.float16, []), ((300, 64), torch.float32, [0]), ((8, 151936), torch.bfloat16, [-1]),
              ((20000, 3), torch.float32, [0]), ((4, 9001), torch.float64, [1, True]))
    cases = [(op, [_tied_rows(*shape, dtype, seed), *rest]) for seed, (shape, dtype, rest) in enumerate(shapes)
             for op in (aten.argmax.default, aten.argmin.default)]
    cases.append((aten.argmax.default, [torch.randint(-3, 3, (16, 5000)), -1]))
    cases.append((aten.argmin.default, [torch.randint(-3, 3, (2, 70000)), -1]))
    cases += [(aten.max.dim, [_tied_rows(8, 151936, torch.bfloat16, 11), -1]),
              (aten.min.dim, [_tied_rows(33, 3000, torch.float32, 12), 1, True]),
              (aten.max.dim, [_tied_rows(20000, 3, torch.float16, 13), 0])]
    runs: list[tuple[Any, list[Any], dict[str, Any]]] = []
    for op, args in cases:
        choices = _cuda_plan(op, args).knob_space("cuda", H200).choices
        for mode, block in itertools.product(choices["mode"], (128, 512)):
            for per_thread in choices["per_thread"] if mode == "split" else choices["per_thread"][:1]:
                runs.append((op, args, {"mode": mode, "threads_per_block": block, "per_thread": per_thread}))

    def build(run: tuple[Any, list[Any], dict[str, Any]]) -> Any:
        op, args, knobs = run
        return compile_cuda(_cuda_plan(op, args).render("cuda", knobs, H200), tmp_path)

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:  # one nvcc per kernel, side by side
        libraries = list(pool.map(build, runs))
    for (op, args, knobs), library in zip(runs, libraries, strict=True):
        expected = op(args[0].cuda(), *args[1:])
        expected = list(expected) if isinstance(expected, tuple) else [expected]
        got = [torch.full_like(e, -7) for e in expected]
        assert run_kernel(library, [args[0].cuda()], got) == 0
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.isnan(), e.isnan()) and torch.equal(g.nan_to_num(0.5), e.nan_to_num(0.5)), \
                (op, args[1:], knobs)


def _store_cases() -> list[tuple[Any, list[Any]]]:
    h = torch.randn(64, 2048, dtype=bf16)
    return [(aten.gt.Scalar, [h, 0.5]), (aten.masked_fill.Scalar, [h, h < 0, 0.0]),
            (aten.where.self, [h > 0, h.float(), torch.randn(64, 2048)]),
            (aten.cat.default, [[h.double(), h.double()], -1]),
            (aten.remainder.Scalar, [torch.randint(-9, 9, (64, 512)), 8]),
            (aten.constant_pad_nd.default, [torch.randn(64, 30), [0, 1]])]


def _load_cases() -> list[tuple[Any, list[Any]]]:
    """Gathers whose rows read runs of adjacent input elements: a run of outputs is one load too."""
    h, ids = torch.randn(64, 2048, dtype=bf16), torch.randint(0, 64, (96,))
    return [(aten.embedding.default, [h, ids]), (aten.index.Tensor, [h, [ids]]),
            (aten.cat.default, [[h, h[:32]], 0]), (aten.flip.default, [h.float(), [0]]),
            (aten.constant_pad_nd.default, [h, [0, 0, 0, 2], -1.0]),
            (aten.upsample_nearest2d.vec, [torch.randn(1, 8, 32, 64, dtype=bf16), None, [2.0, 2.0]]),
            (aten.repeat_interleave.self_int, [h[:8, :512].float(), 4, 1])]


def _piece_cases() -> list[tuple[Any, list[Any]]]:
    """Rows fewer than a wave of blocks, each cut in pieces, the last one short."""
    return [(aten.__and__.Scalar, [torch.randint(-9, 9, (4100,)), 3]),
            (aten.index.Tensor, [torch.randn(16, 10000, dtype=bf16), [torch.randint(0, 16, (3,))]]),
            (aten.gt.Scalar, [torch.randn(2, 5000), 0.0]),
            (aten.clamp.default, [torch.randint(-99, 99, (3, 4096)), -7, 30])]


def test_rows_fewer_than_a_wave_are_cut_in_pieces_of_whole_block_steps() -> None:
    one_row = _cuda_plan(*_piece_cases()[0]).render("cuda", {"store_bytes": 16}, H200)
    assert "kf_u < 9LL" in one_row and "kf_from = kf_u % 9LL * 512LL" in one_row  # 4100 int64: 9 steps of 256 x 2
    assert "kf_c0 = kf_from + (int64_t)threadIdx.x * 2; kf_c0 < kf_to;" in one_row
    assert "kf_gather<<<9, 256" in one_row
    loads = _cuda_plan(*_piece_cases()[1]).render("cuda", {"store_bytes": 8}, H200)
    assert "kf_u < 30LL" in loads and "const int64_t row = kf_u / 10LL" in loads and "kf_run.whole" in loads
    single = _cuda_plan(*_piece_cases()[0]).render("cuda", {"store_bytes": 8}, H200)
    assert "for (int64_t c = kf_from + threadIdx.x; c < kf_to; c += 256)" in single
    many_rows = _cuda_plan(aten.__and__.Scalar, [torch.randint(-9, 9, (4096, 64)), 3]).render(
        "cuda", {"mode": "rows"}, H200)
    assert "kf_u" not in many_rows and "for (int64_t row = blockIdx.x; row < 4096LL;" in many_rows


def test_reads_along_the_row_are_loaded_for_a_whole_run_where_only_data_picks_the_branch() -> None:
    masked = _cuda_plan(*_store_cases()[1]).render("cuda", {"store_bytes": 8}, H200)
    assert ("kf_s0.whole = *reinterpret_cast<const uint32_t *>(in1 + ((o0) * 2048LL) + kf_c0);" in masked
            and "kf_s1.whole = *reinterpret_cast<const uint2 *>(in0 + ((o0) * 2048LL) + kf_c0);" in masked)
    assert "if (kf_s0.lane[kf_j]) v = (uint16_t)0x0ULL;" in masked and "else v = kf_s1.lane[kf_j];" in masked
    h = torch.randn(64, 2048, dtype=bf16)
    in_place, _ = aten_card(aten.masked_fill_.Scalar, [h.clone(), h < -1.0, 0.0])
    own = plan_for_card(on_cuda(in_place), "cuda").render("cuda", {"store_bytes": 8}, H200)
    assert "*reinterpret_cast<const uint2 *>(out + ((o0) * 2048LL) + kf_c0);" in own  # self's old values, in place
    assert "kf_s0" not in _cuda_plan(*_store_cases()[1]).render("cuda", {"store_bytes": 2}, H200)  # one per store
    assert "kf_s0" not in _cuda_plan(*_store_cases()[0]).render("cuda", {"store_bytes": 16}, H200)  # 32 bytes of bf16
    for pad in (_store_cases()[5], _store_cases()[3]):  # the condition reads the coordinate: the read may be outside
        assert "kf_s0" not in _cuda_plan(*pad).render("cuda", {}, H200)
    broadcast = _cuda_plan(aten.masked_fill.Scalar, [h, torch.rand(2048) < 0.5, 0.0]).render("cuda", {}, H200)
    assert "*reinterpret_cast<const uint32_t *>(in1 + (0) + kf_c0);" in broadcast  # one mask row for every row
    offset = _cuda_plan(aten.gt.Scalar, [torch.randn(64, 2049)[:, 1:], 0.0]).render("cuda", {"store_bytes": 4}, H200)
    assert "kf_s0" not in offset  # rows of 2049 floats, one element in: no load of a run is aligned


def test_rows_reading_adjacent_inputs_load_a_run_of_outputs_at_once() -> None:
    embedding = _cuda_plan(*_load_cases()[0]).render("cuda", {}, H200)
    assert "kf_run.whole = *reinterpret_cast<const uint2 *>(in0 + ((j) * 2048LL) + kf_c0);" in embedding
    assert embedding.count("int64_t j = (int64_t)in1[") == 1  # the row's index read once per row
    cat = _cuda_plan(*_load_cases()[2]).render("cuda", {"store_bytes": 16}, H200)
    assert "if (o0 < 64LL) { kf_run.whole = *reinterpret_cast<const uint4 *>(in0 + ((o0) * 2048LL) + kf_c0); }" in cat
    assert "else { kf_run.whole = *reinterpret_cast<const uint4 *>(in1 + ((o0 - 64LL) * 2048LL) + kf_c0); }" in cat
    # a run of 4 upsampled outputs is 2 inputs, each repeated twice
    upsample = _cuda_plan(*_load_cases()[5]).render("cuda", {"mode": "rows", "store_bytes": 8}, H200)
    assert ("union { uint32_t whole; T lane[2]; } kf_in; kf_in.whole = *reinterpret_cast<const uint32_t *>"
            "(in0 + ((o0) * 16384LL + (o1) * 2048LL + (o2 / 2LL) * 64LL) + kf_c0 / 2LL);") in upsample
    assert "kf_run.lane[kf_j] = kf_in.lane[kf_j / 2];" in upsample
    assert "kf_run" not in _cuda_plan(*_load_cases()[6]).render("cuda", {"store_bytes": 8}, H200)  # 2 of 4 repeats
    assert "kf_in.lane[kf_j / 4]" in _cuda_plan(*_load_cases()[6]).render("cuda", {"store_bytes": 16}, H200)
    assert "kf_run" not in _cuda_plan(*_load_cases()[6]).render("cuda", {"store_bytes": 4}, H200)
    assert "kf_run" not in _cuda_plan(*_load_cases()[0]).render("cuda", {"store_bytes": 2}, H200)
    assert "kf_run" not in _cuda_plan(*_load_cases()[4]).render("cuda", {}, H200)  # the fill is no read
    h, ids = torch.randn(64, 2048, dtype=bf16), torch.randint(0, 64, (96,))
    for op, args in ((aten.embedding.default, [h.t().contiguous().t(), ids]),  # a column-major table
                     (aten.index.Tensor, [h, [None, torch.randint(0, 2048, (2048,))]]),  # the row itself indexed
                     (aten.cat.default, [[h, h], -1]),  # each run's part depends on its place in the row
                     (aten.embedding.default, [torch.randn(64, 2049, dtype=bf16)[:, 1:], ids])):  # rows of 4098 B
        assert "kf_run" not in _cuda_plan(op, args).render("cuda", {"store_bytes": 16}, H200), op


def test_rows_of_dense_aligned_outputs_are_written_a_run_of_outputs_per_store() -> None:
    widths = [_cuda_plan(op, args).knob_space("cuda", H200).choices["store_bytes"] for op, args in _store_cases()]
    assert widths == [(8, 16, 4, 1), (8, 16, 4, 2), (8, 16, 4), (16, 8), (16, 8), (4,)]  # 1026 floats: 4104 bytes
    plan = _cuda_plan(*_store_cases()[0])
    assert "*reinterpret_cast<uint2 *>(out + row * 2048LL + kf_c0)" in plan.render("cuda", {}, H200)
    assert "*reinterpret_cast<uint32_t *>(out + row * 2048LL + kf_c0)" in plan.render("cuda", {"store_bytes": 4}, H200)
    assert "kf_pack" not in plan.render("cuda", {"store_bytes": 1}, H200)
    assert "kf_pack" not in plan.render("cuda", {"mode": "flat", "store_bytes": 16}, H200)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_store_width_compiles_for_sm90_without_warnings(tmp_path: Path) -> None:
    sources = {f"case{i}_{width}": _cuda_plan(op, args).render("cuda", {"store_bytes": width}, H200)
               for i, (op, args) in enumerate(_store_cases() + _load_cases() + _piece_cases() + _triangles())
               for width in _cuda_plan(op, args).knob_space("cuda", H200).choices["store_bytes"]}
    rc, err = nvcc_object(cuda_bundle(sources), tmp_path / "stores.cu")
    assert rc == 0, err[-4000:]
    assert "warning" not in err, err[-4000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda kernels")
def test_every_store_width_writes_eagers_result(tmp_path: Path) -> None:
    runs = [(op, args, width) for op, args in _store_cases() + _load_cases() + _piece_cases() + _triangles()
            for width in _cuda_plan(op, args).knob_space("cuda", H200).choices["store_bytes"]]

    def build(run: tuple[Any, list[Any], int]) -> Any:
        op, args, width = run
        return compile_cuda(_cuda_plan(op, args).render("cuda", {"store_bytes": width}, H200), tmp_path)

    with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
        libraries = list(pool.map(build, runs))
    for (op, args, width), library in zip(runs, libraries, strict=True):
        cuda_args = [a.cuda() if isinstance(a, torch.Tensor) else [t.cuda() for t in a] if isinstance(a, list)
                     and a and isinstance(a[0], torch.Tensor) else a for a in args]
        expected = op(*cuda_args)
        got = torch.empty_like(expected)
        tensors = [t for a in cuda_args for t in (a if isinstance(a, list) else [a]) if isinstance(t, torch.Tensor)]
        assert run_kernel(library, tensors, [got]) == 0
        assert torch.equal(got, expected), (op, width)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compares with eager's cuda kernels")
def test_an_in_place_masked_fill_keeps_selfs_values_at_every_store_width(tmp_path: Path) -> None:
    """The kernel reads self's old values from its output, pre-filled, a run at a time where it can."""
    h = torch.randn(300, 2048, dtype=bf16)
    for mask in (h < -1.0, torch.rand(2048) < 0.5):
        card, _ = aten_card(aten.masked_fill_.Scalar, [h.clone(), mask, 0.0])
        plan = plan_for_card(on_cuda(card), "cuda")
        x, m = h.cuda(), mask.cuda()
        expected = x.clone().masked_fill_(m, 0.0)
        for width in plan.knob_space("cuda", H200).choices["store_bytes"]:
            got = x.clone()
            library = compile_cuda(plan.render("cuda", {"store_bytes": width}, H200), tmp_path)
            assert run_kernel(library, [x, m], [got]) == 0
            assert torch.equal(got, expected), width


def test_max_and_min_along_a_dim_write_eagers_values_and_indices(tmp_path: Path) -> None:
    """max.dim and min.dim: the element eager picks (first of equal values, the first NaN) and its index,
    in any layout of the input and of both outputs."""
    nan = float("nan")
    rows = torch.tensor([[1.0, 3.0, 3.0, -2.0], [nan, 5.0, nan, 1.0], [-0.0, 0.0, -1.0, -1.0], [2.0, 2.0, 2.0, 2.0],
                         [-5.0, nan, 7.0, -7.0], [0.5, -0.5, 0.25, 0.5]])
    cases = [(aten.max.dim, [rows, 1]), (aten.min.dim, [rows, 0, True]), (aten.max.dim, [rows.t().to(bf16), 0]),
             (aten.min.dim, [torch.randn(3, 7, 5)[:, 1:], 1]),
             (aten.max.dim, [torch.tensor([[3, 9, 9], [-4, -4, 2]]), -1])]
    for op, args in cases:
        card, expected = aten_card(op, args)
        plan = plan_for_card(card, "cpu")
        assert plan.family == "arg_extreme"
        got = [torch.full_like(e, -7) for e in expected]
        assert run_kernel(compile_cpu(plan.render("cpu", {}, CPU), tmp_path), [args[0]], got) == 0
        for g, e in zip(got, expected, strict=True):
            assert torch.equal(g.view(torch.int8) if g.is_floating_point() else g,
                               e.view(torch.int8) if e.is_floating_point() else e), (op, args[1:], got, expected)
    for op, args in [(aten.max.default, [rows]), (aten.max.other, [rows, rows])]:
        card, _ = aten_card(op, args)
        with pytest.raises(UnsupportedCard, match="only the dim overload"):
            plan_for_card(card, "cpu")


def test_argmax_and_argmin_take_eagers_index_for_ties_nans_and_signed_zeros(tmp_path: Path) -> None:
    """The first of equal values, the first NaN over any number, -0.0 equal to 0.0: every row's index is eager's."""
    nan = float("nan")
    rows = torch.tensor([[1.0, 3.0, 3.0, -2.0], [nan, 5.0, nan, 1.0], [-0.0, 0.0, -1.0, -1.0], [2.0, 2.0, 2.0, 2.0],
                         [-5.0, nan, 7.0, -7.0], [0.5, -0.5, 0.25, 0.5]])
    cases = [(aten.argmax.default, [rows, 1]), (aten.argmin.default, [rows, 1]), (aten.argmax.default, [rows, 0, True]),
             (aten.argmin.default, [rows.t(), 0]), (aten.argmax.default, [rows]), (aten.argmin.default, [rows[:, 1:]]),
             (aten.argmax.default, [rows.to(bf16), -1]),
             (aten.argmax.default, [torch.tensor([[3, 9, 9], [-4, -4, 2]]), 1])]
    for op, args in cases:
        card, (expected,) = aten_card(op, args)
        plan = plan_for_card(card, "cpu")
        assert plan.family == "arg_extreme"
        got = torch.full_like(expected, -7)
        assert run_kernel(compile_cpu(plan.render("cpu", {}, CPU), tmp_path), [args[0]], [got]) == 0
        assert torch.equal(got, expected), (op, args[1:], got, expected)

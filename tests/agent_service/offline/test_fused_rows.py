"""The fuser's row kernels: chains around reductions over one dim, written out as users write them.

Each module is captured as capture captures it (a real exported program), its cpu kernel compiled
with g++ and run against eager at the root knobs and two revisions, and its cuda source compiled
with nvcc at every structural knob value; chains the fuser does not cover say why.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.fused import fused_plan
from agent_service.offline.fused_rows import FusedRowPlan
from agent_service.offline.proposer import propose_offline
from kforge_domain.card import OperatorCard
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ParentCandidate, ProposeRequest
from tests.agent_service.agent_cards import (
    NVCC,
    compile_cpu,
    compile_cuda_each,
    cuda_bundle,
    fresh_like,
    module_card,
    nvcc_object,
    on_cuda,
    run_kernel,
    to_cuda_keeping_strides,
)

bf16, f16 = torch.bfloat16, torch.float16
CPU = DeviceInfo(backend="cpu", name="test cpu", sm_count=2)
H200 = DeviceInfo(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132, l2_bytes=60 << 20)
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.2e-2}


def r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


class HandRMSNorm(nn.Module):
    """RMS norm written out in the forward (no class the catalog lists)."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class ZeroCentredRMSNorm(nn.Module):
    """Gemma's form: computed in fp32 with a zero-centred weight, cast back to the input's dtype."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim) * 0.1)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class SoftmaxWrittenOut(nn.Module):
    """Two reductions, the second over values that depend on the first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)


class ResidualRMSNorm(nn.Module):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x + residual
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)


class StandardiseWrittenOut(nn.Module):
    """Layer norm by hand, plus the unbiased std: mean, biased var and std share their first sweep."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5) + x.std(dim=-1, keepdim=True)


class NormaliseRows(nn.Module):
    """``F.normalize``: an L2 norm clamped away from zero, expanded over the row."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(x, dim=-1)


class LogSoftmaxWrittenOut(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - torch.logsumexp(x, -1, keepdim=True)


class MaxAbsScale(nn.Module):
    """Rows scaled by their infinity norm (absmax quantisation's scale) and shifted by their L1 norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / x.norm(p=float("inf"), dim=-1, keepdim=True) + x.norm(p=1, dim=-1, keepdim=True)


class RowLogSumExp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, -1, keepdim=True).expand_as(x).contiguous()


class SumOverFirstDim(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0, keepdim=True) * x


class ChannelsFirstLayerNorm(nn.Module):
    """A layer norm of NCHW inputs as ConvNeXt writes it: mean and variance over dim 1, the affine
    by channel (held here as [C, 1, 1] parameters)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, 1))
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight * x + self.bias


class IndexedAffineNorm(ChannelsFirstLayerNorm):
    """ConvNeXt's own form, the affine by ``weight[:, None, None]``: views of the parameters, read through."""

    def __init__(self, channels: int) -> None:
        super().__init__(channels)
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = x.mean(1, keepdim=True)
        x = (x - u) / torch.sqrt((x - u).pow(2).mean(1, keepdim=True) + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class SumsOverTwoDims(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(0, keepdim=True) * x.sum(-1, keepdim=True)


class SumWithoutKeepdim(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x.sum(-1).unsqueeze(-1)


class FiveSweeps(nn.Module):
    """Two stds and a softmax: more passes over each row than the fuser makes."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True) + x.std(-1, keepdim=True) + (x * 2).std(-1, keepdim=True)


CASES: list[tuple[str, Any, list[torch.Tensor]]] = [
    ("rms_norm_f32", lambda: HandRMSNorm(96), [r(5, 96)]),
    ("rms_norm_bf16", lambda: HandRMSNorm(64).to(bf16), [r(2, 3, 64, dtype=bf16)]),
    ("zero_centred_rms_norm_bf16", lambda: ZeroCentredRMSNorm(128).to(bf16), [r(6, 128, dtype=bf16)]),
    ("zero_centred_rms_norm_f32", lambda: ZeroCentredRMSNorm(40), [r(3, 40)]),
    ("softmax_f32", SoftmaxWrittenOut, [r(4, 70)]),
    ("softmax_short_rows_f16", SoftmaxWrittenOut, [r(3, 5, 40, dtype=f16)]),
    ("residual_rms_norm_bf16", ResidualRMSNorm, [r(4, 256, dtype=bf16), r(4, 256, dtype=bf16)]),
    ("residual_rms_norm_broadcast_residual", ResidualRMSNorm, [r(3, 4, 48), r(4, 48)]),
    ("standardise_f32", StandardiseWrittenOut, [r(4, 33)]),
    ("rms_norm_of_transposed_view", lambda: HandRMSNorm(32), [r(3, 32, 7).transpose(1, 2)]),
    ("normalise_f32", NormaliseRows, [r(6, 80)]),
    ("normalise_bf16", NormaliseRows, [r(6, 80, dtype=bf16)]),
    ("log_softmax_written_out_f32", LogSoftmaxWrittenOut, [r(5, 100)]),
    ("max_abs_scale_f16", MaxAbsScale, [r(4, 64, dtype=f16)]),
    # Rows along another dim than the last
    ("sum_over_first_dim", SumOverFirstDim, [r(4, 16)]),
    ("channels_first_layer_norm_f32", lambda: ChannelsFirstLayerNorm(24), [r(2, 24, 5, 7)]),
    ("channels_first_layer_norm_bf16", lambda: ChannelsFirstLayerNorm(32).to(bf16), [r(3, 32, 4, 4, dtype=bf16)]),
    ("convnext_layer_norm_indexed_affine", lambda: IndexedAffineNorm(16), [r(2, 16, 6, 5)]),
]


def _card(factory: Any, args: list[torch.Tensor]) -> tuple[OperatorCard, nn.Module]:
    module = factory()
    card, _ = module_card(module, args)
    return card, module


def _check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert not torch.isnan(got).any(), "kernel left elements unwritten"
    tol = TOLERANCE[want.dtype]
    got64, want64 = got.double(), want.double()
    rel_l2 = ((got64 - want64).norm() / max(want64.norm().item(), 1e-12)).item()
    max_scaled = ((got64 - want64).abs().max() / max(want64.abs().max().item(), 1e-12)).item()
    assert rel_l2 <= tol and max_scaled <= 4 * tol, (rel_l2, max_scaled)


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fused_rows")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_a_chain_around_reductions_runs_as_one_row_kernel_matching_eager(
        case: tuple[str, Any, list[torch.Tensor]], build_dir: Path) -> None:
    _, factory, args = case
    card, module = _card(factory, args)
    state = [t.detach() for _, t in module.named_parameters()]
    parent, tried = None, []
    for step in range(3):  # the root, then two revisions
        proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu", parent=parent,
                                                   tried_knobs=tried, seed=step))
        assert proposal.has_proposal, proposal.no_proposal_reason
        assert proposal.knobs["family"] == "fused_rows"
        lib = compile_cpu(proposal.source, build_dir)
        for sample in range(2):
            inputs = fresh_like(card, torch.Generator().manual_seed(sample))[: len(args)] + state
            with torch.inference_mode():
                want = module(*inputs[: len(args)])
            out = torch.empty_strided(want.shape, want.stride(), dtype=want.dtype).fill_(float("nan"))
            assert run_kernel(lib, inputs, [out]) == 0
            _check(out, want)
        tried.append(proposal.knobs)
        parent = ParentCandidate(candidate_id=f"c{step}", source=proposal.source, knobs=proposal.knobs)


def test_each_call_is_rounded_to_its_dtype_and_the_sum_accumulates_in_fp32(build_dir: Path) -> None:
    """A bf16 RMS norm over 4096 ones and a large value: a bf16 accumulator would lose the ones."""
    module = HandRMSNorm(4096).to(bf16)
    x = torch.ones(2, 4096, dtype=bf16)
    x[:, 0] = 64.0
    card, _ = module_card(module, [x])
    plan = fused_plan(card)
    assert isinstance(plan, FusedRowPlan)
    source = plan.render("cpu", plan.knob_space("cpu", CPU).default(), CPU)
    assert "kf_from_f32<kf_bf16>(x0 * x0)" in source  # pow rounded to bf16 before the mean
    out = torch.empty_like(x)
    assert run_kernel(compile_cpu(source, build_dir), [x, module.weight.detach()], [out]) == 0
    with torch.inference_mode():
        torch.testing.assert_close(out, module(x), rtol=0, atol=0)


def test_infinite_and_nan_rows_reduce_as_eager_reduces_them(build_dir: Path) -> None:
    """logsumexp shifts an infinite max by 0 (a row of -inf gives -inf, not NaN); amax keeps NaN."""
    x = r(4, 80)  # long enough for the cpu's lane sums under simd, the plain loop without
    x[1] = float("-inf")
    x[2, 3] = float("inf")
    x[3, 5] = float("nan")
    for module in (RowLogSumExp(), SoftmaxWrittenOut()):
        plan = fused_plan(module_card(module, [x])[0])
        for simd in (True, False):
            knobs = {**plan.knob_space("cpu", CPU).default(), "simd": simd}
            out = torch.empty_like(x)
            assert run_kernel(compile_cpu(plan.render("cpu", knobs, CPU), build_dir), [x], [out]) == 0
            torch.testing.assert_close(out, module(x), equal_nan=True)


def test_the_var_and_mean_of_one_row_share_a_sweep() -> None:
    card, _ = _card(StandardiseWrittenOut, [r(4, 33)])
    plan = fused_plan(card)
    assert isinstance(plan, FusedRowPlan)
    assert len(plan.loops()) == 4  # the mean (shared by var and std), two squared deviations, the write


def test_cuda_knobs_cover_row_per_thread_warp_and_block_with_vectors_and_a_cached_row() -> None:
    card, _ = _card(lambda: HandRMSNorm(4096).to(bf16), [r(8, 4096, dtype=bf16)])
    space = plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200).choices
    assert space["mode"] == ("block", "warp") and space["vector"] == (8, 1) and space["cache_row"] == (True, False)
    card, _ = _card(SoftmaxWrittenOut, [r(16, 40)])
    assert plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200).choices["mode"] == ("warp", "block", "thread")
    # two operands of 65536 bf16 are 128 floats per thread even at 1024 threads: caching is not offered
    card, _ = _card(ResidualRMSNorm, [r(2, 65536, dtype=bf16), r(2, 65536, dtype=bf16)])
    assert plan_for_card(on_cuda(card), "cuda").knob_space("cuda", H200).choices["cache_row"] == (False,)


def test_rows_whose_elements_lie_apart_are_walked_by_neighbouring_lanes_first() -> None:
    """A channels-first norm reduces over dim 1 of NCHW maps: a warp sharing one row would read 32
    elements a whole map apart; columns (32 neighbouring rows per block) and a row per thread read
    neighbouring elements, and columns keeps the row in registers up to 32 * 64 channels."""
    card, _ = _card(lambda: ChannelsFirstLayerNorm(384), [r(2, 384, 8, 8)])
    plan = plan_for_card(on_cuda(card), "cuda")
    assert isinstance(plan, FusedRowPlan) and plan.strided_rows()
    space = plan.knob_space("cuda", H200).choices
    assert space["mode"] == ("columns", "thread", "warp", "block") and space["cache_row"] == (True, False)
    card, _ = _card(lambda: HandRMSNorm(96), [r(5, 96)])
    assert not plan_for_card(on_cuda(card), "cuda").strided_rows()


CUDA_KNOBS: list[dict[str, Any]] = [
    {}, {"mode": "warp", "vector": 1, "cache_row": False}, {"mode": "block", "reduce": "smem_tree"},
    {"mode": "thread"}, {"fast_math": False}, {"mode": "columns", "threads_per_block": 1024},
    {"mode": "columns", "threads_per_block": 128, "cache_row": False},
]


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_cuda_row_kernel_compiles_with_nvcc(tmp_path: Path) -> None:
    cases = [*CASES, ("rms_norm_long_rows_bf16", lambda: HandRMSNorm(4096).to(bf16), [r(8, 4096, dtype=bf16)])]
    sources: dict[str, str] = {}
    for name, factory, args in cases:
        plan = fused_plan(_card(factory, args)[0])
        space = plan.knob_space("cuda", H200)
        for i, knobs in enumerate(CUDA_KNOBS):
            if knobs.get("mode", space.default()["mode"]) in space.choices["mode"]:
                sources[f"{name}_{i}"] = plan.render("cuda", {**space.default(), **knobs}, H200)
    assert "kf_load_vec<__nv_bfloat16, 8>" in sources["rms_norm_long_rows_bf16_0"]
    status, stderr = nvcc_object(cuda_bundle(sources), tmp_path / "fused_rows.cu")
    assert status == 0, stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="runs the row kernels on a cuda device")
def test_every_cuda_row_kernel_matches_eager_on_the_device(tmp_path: Path) -> None:
    cases = [*CASES, ("channels_first_layer_norm_wide", lambda: ChannelsFirstLayerNorm(768), [r(2, 768, 9, 7)]),
             ("channels_first_layer_norm_many_rows", lambda: ChannelsFirstLayerNorm(32), [r(4, 32, 33, 31)])]
    runs: list[tuple[Any, list[torch.Tensor], str]] = []
    for _, factory, args in cases:
        card, module = _card(factory, args)
        plan = plan_for_card(on_cuda(card), "cuda")
        space = plan.knob_space("cuda", H200)
        for knobs in CUDA_KNOBS:
            if knobs.get("mode", space.default()["mode"]) in space.choices["mode"]:
                runs.append((module, args, plan.render("cuda", {**space.default(), **knobs}, H200)))
    libraries = compile_cuda_each([source for _, _, source in runs], tmp_path)
    for (module, args, _), library in zip(runs, libraries, strict=True):
        module = module.cuda()
        inputs = [to_cuda_keeping_strides(a) for a in args] + [t.detach() for _, t in module.named_parameters()]
        with torch.inference_mode():
            want = module(*inputs[: len(args)])
        out = torch.empty_strided(want.shape, want.stride(), dtype=want.dtype, device="cuda").fill_(float("nan"))
        assert run_kernel(library, inputs, [out]) == 0
        torch.cuda.synchronize()
        _check(out.cpu(), want.cpu())


@pytest.mark.parametrize(("module", "args", "reason"), [
    (SumsOverTwoDims(), [r(4, 16)], "reduces over dim 1, another reduction over dim 0"),
    (SumWithoutKeepdim(), [r(4, 16)], "without keepdim=True"),
    (FiveSweeps(), [r(4, 16)], "sweeps each row more than 4 times"),
    (HandRMSNorm(16).double(), [r(4, 16).double()], "returns float64; the fuser computes float dtypes"),
], ids=["two_dims", "no_keepdim", "five_sweeps", "float64"])
def test_a_chain_the_row_kernel_does_not_cover_is_refused_with_its_reason(
        module: nn.Module, args: list[torch.Tensor], reason: str) -> None:
    card, _ = module_card(module, args)
    with pytest.raises(UnsupportedCard, match=re.escape(reason)):
        fused_plan(card)
    proposal = propose_offline(ProposeRequest(card=card, device=CPU))
    assert not proposal.has_proposal and reason in proposal.no_proposal_reason

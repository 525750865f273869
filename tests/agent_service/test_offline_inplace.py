"""The in-place elementwise templates (``relu_``, ``add_``, ...): compiled with g++ and run against
eager with the mutated input as the output, pre-filled, as the kernel contract passes it; and
their cuda variants compiled with nvcc (compile only). Beside test_offline_cpu.py and
test_offline_cuda.py, whose helpers they use, since their cases write fresh outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agent_service.offline.call import UnsupportedCard
from agent_service.offline.catalog import plan_for_card
from agent_service.offline.proposer import propose_offline
from kforge_domain.card import OperatorCard
from kforge_domain.propose_request import ParentCandidate, ProposeRequest
from tests.agent_service.agent_cards import (
    NVCC,
    aten_card,
    compile_cpu,
    cuda_bundle,
    fresh_like,
    nvcc_object,
    on_cuda,
    reference,
    run_kernel,
)
from tests.agent_service.test_offline_cpu import CPU, Case, _check, _cl, r
from tests.agent_service.test_offline_cuda import H200

aten = torch.ops.aten
bf16, f16 = torch.bfloat16, torch.float16
FAMILY, GATHER_FAMILY = "elementwise_inplace", "gather_select_inplace"
COPY_FAMILY, FILL_FAMILY = "gather_copy_inplace", "gather_fill_inplace"


def _kv_cache_slot(dtype: torch.dtype = bf16) -> torch.Tensor:
    """``cache[:, :, 5]`` of a [batch, heads, positions, head_dim] cache: a view with gaps."""
    return r(2, 4, 16, 8, dtype=dtype)[:, :, 5]


CASES = [
    Case("relu_", FAMILY, lambda: (aten.relu_.default, [r(4, 33)])),
    Case("relu_transposed", FAMILY, lambda: (aten.relu_.default, [r(16, 8).t()])),
    Case("sigmoid_f16", FAMILY, lambda: (aten.sigmoid_.default, [r(5, 40, dtype=f16)])),
    Case("hardtanh_", FAMILY, lambda: (aten.hardtanh_.default, [r(50), -0.5, 0.5])),
    Case("add_same", FAMILY, lambda: (aten.add_.Tensor, [r(8, 32), r(8, 32)])),
    Case("add_row_broadcast_bf16_alpha", FAMILY, lambda: (aten.add_.Tensor, [r(4, 64, dtype=bf16), r(64, dtype=bf16)]),
         kwargs={"alpha": 2}),
    Case("add_scalar_channels_last", FAMILY, lambda: (aten.add_.Tensor, [_cl(r(2, 8, 5, 5)), 1.5])),
    Case("mul_scalar", FAMILY, lambda: (aten.mul_.Scalar, [r(8, 32), 0.5])),
    Case("sub_column", FAMILY, lambda: (aten.sub_.Tensor, [r(8, 32), r(8, 1)])),
    Case("div_f32_by_bf16", FAMILY, lambda: (aten.div_.Tensor, [r(8, 32), r(32, dtype=bf16)]), positive=(1,)),
    Case("masked_fill_row_mask_bf16", GATHER_FAMILY,
         lambda: (aten.masked_fill_.Scalar, [r(2, 4, 8, dtype=bf16), r(8) > 0, -1e4])),
    Case("masked_fill_transposed", GATHER_FAMILY,
         lambda: (aten.masked_fill_.Scalar, [r(16, 8).t(), r(8, 16) > 0, -3.0])),
    Case("masked_fill_into_kv_cache_slot", GATHER_FAMILY,
         lambda: (aten.masked_fill_.Scalar, [_kv_cache_slot(), r(8) > 0, -1e4])),
    Case("copy_into_kv_cache_slot_bf16", COPY_FAMILY,
         lambda: (aten.copy_.default, [_kv_cache_slot(), r(2, 4, 8, dtype=bf16)])),
    Case("copy_row_broadcast_f32_into_f16", COPY_FAMILY, lambda: (aten.copy_.default, [r(6, 32, dtype=f16), r(32)])),
    Case("copy_f64_into_transposed_f32", COPY_FAMILY,
         lambda: (aten.copy_.default, [r(16, 8).t(), r(8, 16).double()]), kwargs={"non_blocking": True}),
    Case("copy_int64_into_bf16", COPY_FAMILY,
         lambda: (aten.copy_.default, [r(4, 10, dtype=bf16), torch.randint(-300, 300, (4, 10))])),
    Case("fill_tensor_0dim_into_bf16", COPY_FAMILY,
         lambda: (aten.fill_.Tensor, [r(5, 7, dtype=bf16), torch.tensor(2.5)])),
    Case("fill_scalar_into_kv_cache_slot", FILL_FAMILY, lambda: (aten.fill_.Scalar, [_kv_cache_slot(f16), 0.3])),
    Case("zero_f32", FILL_FAMILY, lambda: (aten.zero_.default, [r(9, 33)])),
]


def _card(case: Case) -> tuple[Any, OperatorCard]:
    op, args = case.make()
    card, _ = aten_card(op, args, case.kwargs)
    assert card.mutated_inputs == [0]
    return op, card


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_in_place_template_updates_the_prefilled_output_as_eager_does(case: Case, tmp_path: Path) -> None:
    """The root proposal and two knob revisions: each compiles, and run on the input itself as its
    output gives eager's values there while the other inputs stay as they were."""
    op, card = _card(case)
    parent, tried = None, []
    for step in range(3):
        proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu", parent=parent,
                                                   tried_knobs=tried, seed=step))
        assert proposal.has_proposal, proposal.no_proposal_reason
        assert proposal.knobs["family"] == case.family and proposal.knobs not in tried
        library = compile_cpu(proposal.source, tmp_path)
        for sample in range(2):
            inputs = fresh_like(card, torch.Generator().manual_seed(sample), case.positive)
            for t in inputs[1:]:  # a mask of random bits (fresh_like's nonzero draws are all true)
                if t.dtype == torch.bool:
                    t.copy_(torch.randn(t.shape, generator=torch.Generator().manual_seed(sample)) > 0)
            before = [t.clone() for t in inputs]
            expected = reference(card, op, [inputs[0].clone(), *inputs[1:]])
            assert not torch.equal(expected[0], before[0]), "eager changed nothing: a kernel writing nothing passes"
            assert run_kernel(library, inputs, [inputs[0]]) == 0
            _check([inputs[0]], expected, card.inputs[0].dtype)
            if case.family == GATHER_FAMILY:  # raw bits: kept exactly where the mask is false
                assert torch.equal(inputs[0] == before[0], expected[0] == before[0]), "kept where eager keeps"
            assert all(torch.equal(a, b) for a, b in zip(inputs[1:], before[1:], strict=True)), "wrote another input"
        tried.append(proposal.knobs)
        parent = ParentCandidate(candidate_id=f"c{step}", source=proposal.source, knobs=proposal.knobs)


def test_a_card_mutating_another_input_or_a_module_card_that_mutates_gets_no_proposal() -> None:
    _, card = _card(CASES[4])
    for wrong in ([1], [0, 1]):
        proposal = propose_offline(ProposeRequest(card=card.model_copy(update={"mutated_inputs": wrong}),
                                                  device=CPU, backend="cpu"))
        assert not proposal.has_proposal and "mutates" in proposal.no_proposal_reason
    card, _ = aten_card(aten.index_put_.default, [r(4, 8), [torch.tensor([1, 3])], r(8)])
    assert card.mutated_inputs == [0]
    proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu"))
    assert not proposal.has_proposal and "mutates" in proposal.no_proposal_reason


def test_a_copy_into_a_cache_slot_writes_the_slot_and_leaves_the_rest_of_the_cache(tmp_path: Path) -> None:
    cache, k = r(2, 4, 16, 8), r(2, 4, 8, dtype=bf16)
    card, _ = aten_card(aten.copy_.default, [cache[:, :, 5], k])
    library = compile_cpu(propose_offline(ProposeRequest(card=card, device=CPU, backend="cpu")).source, tmp_path)
    expected = cache.clone()
    expected[:, :, 5] = k
    slot = cache[:, :, 5]
    assert run_kernel(library, [slot, k], [slot]) == 0
    assert torch.equal(cache, expected)


def test_copies_between_devices_or_of_complex_tensors_are_refused_with_the_reason() -> None:
    cross, _ = aten_card(aten.copy_.default, [r(4, 8), r(4, 8)])
    tensors = [cross.key["tensors"][0], {**cross.key["tensors"][1], "device": "cuda"}]
    with pytest.raises(UnsupportedCard, match="an input lives on cuda"):
        plan_for_card(cross.model_copy(update={"key": {**cross.key, "tensors": tensors}}), "cpu")
    complex_, _ = aten_card(aten.copy_.default, [r(4, 8), torch.randn(4, 8, dtype=torch.complex64)])
    with pytest.raises(UnsupportedCard, match="complex"):
        plan_for_card(complex_, "cpu")
    into_complex, _ = aten_card(aten.copy_.default, [torch.zeros(4, 8, dtype=torch.complex64), r(4, 8)])
    with pytest.raises(UnsupportedCard, match="complex"):
        plan_for_card(into_complex, "cpu")


def _cuda_sources() -> dict[str, str]:
    """Each case's cuda plan at every knob set that changes the kernel's shape (mode, vector)."""
    sources = {}
    for case in CASES:
        plan = plan_for_card(on_cuda(_card(case)[1]), "cuda")
        space = plan.knob_space("cuda", H200)
        for mode in space.choices["mode"]:
            for vector in space.choices.get("vector", (1,)):
                knobs = {**space.default(), "mode": mode, **({"vector": vector} if "vector" in space.choices else {})}
                sources[f"{case.name}_{mode}_{vector}"] = plan.render("cuda", knobs, H200)
    return sources


def test_cuda_in_place_kernels_read_the_target_through_the_output_pointer() -> None:
    """Self aliases the output: the elementwise kernels read it through the output's pointer (no
    restrict on it, no read-only cache load of it); masked_fill_ rereads the output and never self."""
    for name, source in _cuda_sources().items():
        if name.startswith("masked_fill"):
            assert "in0[" not in source and "v = out[" in source, name
            continue
        if name.startswith(("copy_", "fill_", "zero_")):  # overwritten whole: self is never read
            assert "in0[" not in source and "out[" in source, name
            continue
        assert "const float *in0," in source.replace("__nv_bfloat16", "float").replace("__half", "float"), name
        assert "(const " in source and "*)outputs[0].data, " in source, name
        assert "__ldg(in0" not in source, name


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_every_cuda_in_place_variant_compiles_for_sm90(tmp_path: Path) -> None:
    rc, err = nvcc_object(cuda_bundle(_cuda_sources()), tmp_path / "inplace.cu")
    assert rc == 0 and "warning" not in err, err[-4000:]

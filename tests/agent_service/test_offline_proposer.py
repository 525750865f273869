"""The offline proposer's answers: honest refusals, determinism, knobs that travel."""

from __future__ import annotations

import asyncio

import torch

from agent_service.offline.proposer import OfflineProposer, propose_offline
from agent_service.proposer import Proposer, make_proposer
from kforge_domain.device import DeviceInfo
from kforge_domain.propose_request import ParentCandidate, ProposeRequest
from tests.agent_service.agent_cards import aten_card, module_card
from tests.agent_service.agent_modules import LlamaRMSNorm

aten = torch.ops.aten
CPU = DeviceInfo(backend="cpu", sm_count=2)


def _request(card, **kw) -> ProposeRequest:  # type: ignore[no-untyped-def]
    return ProposeRequest(card=card, device=CPU, **kw)


def test_make_proposer_offline_satisfies_the_protocol() -> None:
    proposer = make_proposer("offline")
    assert isinstance(proposer, OfflineProposer) and isinstance(proposer, Proposer)
    card, _ = aten_card(aten.relu.default, [torch.randn(4, 4)])
    proposal = asyncio.run(proposer.propose(_request(card)))
    assert proposal.has_proposal and 'extern "C" int kf_launch' in proposal.source
    assert '#include "kf_abi.h"' in proposal.source and "torch" not in proposal.source


def test_same_request_gives_the_same_source() -> None:
    card, _ = aten_card(aten._softmax.default, [torch.randn(4, 16), -1, False])
    parent = propose_offline(_request(card))
    req = _request(card, parent=ParentCandidate(source=parent.source, knobs=parent.knobs), tried_knobs=(parent.knobs,))
    a, b = propose_offline(req), propose_offline(req)
    assert a.source == b.source and a.knobs == b.knobs and a.knobs != parent.knobs
    assert "→" in a.description


def test_unsupported_cards_get_a_reason() -> None:
    matmul, _ = aten_card(aten.mm.default, [torch.randn(4, 4), torch.randn(4, 4)])
    assert "no offline template covers aten::mm.default" in propose_offline(_request(matmul)).no_proposal_reason
    ones = torch.ones(4, dtype=torch.complex64)
    complex_add, _ = aten_card(aten.add.Tensor, [ones, ones])
    assert "float" in propose_offline(_request(complex_add)).no_proposal_reason
    gappy, _ = aten_card(aten.sum.dim_IntList, [torch.randn(3, 4, 5), [0, 2]])
    assert "not adjacent" in propose_offline(_request(gappy)).no_proposal_reason
    strided, _ = aten_card(aten._softmax.default, [torch.randn(8, 12)[:, ::2], -1, False])
    assert "neither contiguous nor dense" in propose_offline(_request(strided)).no_proposal_reason
    cl = torch.channels_last
    # Group norm with batch and channels swapped in storage: its groups are neither runs nor channels-last blocks.
    grouped, _ = aten_card(aten.group_norm.default, [torch.randn(4, 2, 8, 3).transpose(0, 1), 2])
    assert "not contiguous" in propose_offline(_request(grouped)).no_proposal_reason
    # Channels-last [N, C, H, W] summed over C and H: storage holds H before C, against their logical order.
    apart, _ = aten_card(aten.sum.dim_IntList, [torch.randn(2, 8, 4, 4).contiguous(memory_format=cl), [1, 2]])
    assert "out of their logical order" in propose_offline(_request(apart)).no_proposal_reason
    overlapping, _ = aten_card(aten.sum.dim_IntList, [torch.randn(4, 1).expand(4, 6), [1]])
    assert "neither contiguous nor dense" in propose_offline(_request(overlapping)).no_proposal_reason
    on_cpu = propose_offline(ProposeRequest(card=matmul.model_copy(update={"op": "aten::relu.default"}),
                                             backend="cuda", device=CPU))
    assert not on_cpu.has_proposal


def test_copies_that_leave_a_plain_copy_on_one_device_get_a_reason() -> None:
    """``x.to(copy=True)`` is to.dtype_layout naming x's own dtype, layout and device: a plain copy,
    templated on cpu and cuda (where the runtime checks the device's index). Another device, layout
    or memory format, pinned memory, or a _to_copy naming a cuda device, is not."""
    x = torch.randn(2, 3, 4, 5)

    def reason(op: torch._ops.OpOverload, kwargs: dict[str, object], on_cuda: bool = False,
               pinned: bool = False) -> str:
        card, _ = aten_card(op, [x], kwargs)
        template = card.template
        if pinned:  # pinned memory needs a cuda build to call eager with
            template = {**template, "kwargs": {**template["kwargs"], "pin_memory": True}}
        tensors = card.key["tensors"]
        if on_cuda:
            tensors = [{**t, "device": "cuda"} for t in tensors]
            template = {**template, "kwargs": {**template["kwargs"], "device": {"device": "cuda"}}}
        card = card.model_copy(update={"device": "cuda" if on_cuda else "cpu",
                                       "key": {**card.key, "tensors": tensors, "template": template}})
        proposal = propose_offline(ProposeRequest(card=card, device=CPU, backend=card.device))
        return proposal.no_proposal_reason

    own = {"dtype": torch.bfloat16, "layout": torch.strided, "device": torch.device("cpu")}
    assert reason(aten.to.dtype_layout, own) == "" and reason(aten.to.dtype_layout, own, on_cuda=True) == ""
    assert reason(aten.to.dtype_layout, {**own, "memory_format": torch.contiguous_format}) == ""
    assert "memory_format=torch.channels_last" in reason(aten.to.dtype_layout,
                                                         {**own, "memory_format": torch.channels_last})
    assert "pin_memory=True" in reason(aten._to_copy.default, own, pinned=True)
    assert "index its key does not record" in reason(aten._to_copy.default, own, on_cuda=True)
    assert "between devices" in reason(aten._to_copy.default, {**own, "device": torch.device("meta")})
    assert "to.dtype and to.dtype_layout" in reason(aten.to.device, {"device": torch.device("cpu"),
                                                                     "dtype": torch.bfloat16})


def test_module_card_without_its_templates_attribute_goes_to_the_fuser() -> None:
    # The RMS norm template reads variance_epsilon from the card; the fuser reads the captured program.
    card, _ = module_card(LlamaRMSNorm(8), [torch.randn(2, 8)], attributes={})
    proposal = propose_offline(_request(card))
    assert proposal.has_proposal and proposal.knobs["family"] == "fused_rows"


def test_exhausted_space_says_so() -> None:
    card, _ = aten_card(aten.neg.default, [torch.randn(8)])
    tried: list[dict[str, object]] = []
    for _ in range(400):
        proposal = propose_offline(_request(card, tried_knobs=tried))
        if not proposal.has_proposal:
            assert "every knob set" in proposal.no_proposal_reason
            return
        tried.append(proposal.knobs)
    raise AssertionError("the knob space never ran out")


def test_other_proposers_knob_sets_neither_block_nor_steer_the_templates() -> None:
    card, _ = aten_card(aten.relu.default, [torch.randn(8, 8)])
    root = propose_offline(_request(card))
    llm_knobs = {"proposer": "openai/gpt-4o", "source_sha256": "0123456789abcdef"}
    again = propose_offline(_request(card, tried_knobs=(llm_knobs,),
                                     parent=ParentCandidate(source="/* llm */", knobs=llm_knobs)))
    assert again.knobs == root.knobs


def test_malformed_template_is_refused_with_the_cause() -> None:
    card, _ = aten_card(aten._softmax.default, [torch.randn(4, 8), -1, False])
    template = {"args": [{"tensor": 0}, "last", False], "kwargs": {}}
    broken = card.model_copy(update={"key": {**card.key, "template": template}})
    proposal = propose_offline(_request(broken))
    assert not proposal.has_proposal and "malformed" in proposal.no_proposal_reason


def test_torch_modules_that_run_one_templated_op_point_to_their_aten_card() -> None:
    for module, x, op in [(torch.nn.BatchNorm2d(4).eval(), torch.randn(2, 4, 3, 3), "batch_norm"),
                          (torch.nn.LayerNorm(8), torch.randn(2, 8), "layer_norm"),
                          (torch.nn.Softmax(dim=-1), torch.randn(2, 8), "softmax")]:
        card, _ = module_card(module, [x])
        proposal = propose_offline(_request(card))
        assert not proposal.has_proposal
        assert proposal.no_proposal_reason.endswith(f"covered by its aten card ({op})"), proposal.no_proposal_reason

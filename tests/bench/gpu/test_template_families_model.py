"""The template-family model captures, on the cpu, into cards the offline proposer covers: one
run of it on a GPU checks every gather, comparison, integer, conversion, in-place, scan and histc
family's cuda kernels."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_service.offline.catalog import plan_for_card
from bench.gpu import template_families_model as families
from tests.bench.gpu.bench_models import capture_model

#: An op of each family the model is there to check.
FAMILY_OPS = {
    "aten::embedding.default", "aten::upsample_nearest2d.vec", "aten::cat.default", "aten::index.Tensor",
    "aten::pad.default", "aten::masked_fill.Scalar", "aten::where.self", "aten::repeat_interleave.self_int",
    "aten::__and__.Tensor", "aten::gt.Scalar", "aten::lt.Scalar", "aten::cumsum.default", "aten::relu_.default",
    "aten::add_.Tensor", "aten::masked_fill_.Scalar", "aten::copy_.default", "aten::fill_.Scalar",
    "aten::to.dtype_layout", "aten::histc.default", "aten::reshape.default", "aten::flatten.using_ints",
    "aten::sort.stable", "aten::topk.default", "aten::floor_divide.default", "aten::remainder.Scalar",
    "aten::__xor__.Scalar", "aten::__or__.Tensor", "aten::__and__.Scalar", "aten::to.dtype",
    "aten::where.ScalarOther", "aten::gather.default", "aten::softplus.default", "aten::argmax.default",
    "aten::round.default", "aten::sign.default", "aten::flip.default",
}


def test_every_family_op_of_the_model_is_a_card_the_offline_proposer_covers(tmp_path: Path) -> None:
    cards = capture_model(families, tmp_path)
    covered = set()
    for card in cards.cards:
        if card.kind == "aten" and card.op in FAMILY_OPS:
            try:
                plan_for_card(card, "cpu")
            except Exception as refusal:
                pytest.fail(f"{card.op}: {refusal}")
            covered.add(card.op)
    assert covered == FAMILY_OPS

"""The coverage table on a real capture: aten templates, cards a covered module serves, and the
share of the time outside vendor ops."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from bench.gpu._coverage import card_table, offline_refusal
from capture_service.options import CaptureOptions
from capture_service.session import capture_loaded
from capture_service.spec import LoadedModel
from forge_service.scheduler import runs_only_inside
from kforge_domain.card import CardSet
from tests.agent_service.agent_modules import SiluAndMul
from tests.bench.gpu.bench_models import FAST


class GatedBlock(nn.Module):
    """A projection (vendor), a gated activation whose halves are slices (views no template
    serves, inside a module card the proposer covers), a running maximum no template covers and a
    transpose (a view) outside any module."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 64)
        self.act = SiluAndMul()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.proj(x))
        return torch.cummax(y, dim=-1).values.t()


@pytest.fixture(scope="module")
def cards(tmp_path_factory: pytest.TempPathFactory) -> CardSet:
    torch.manual_seed(0)
    loaded = LoadedModel(GatedBlock().eval(), (torch.randn(8, 16),))
    return capture_loaded("gated", loaded, CaptureOptions(samples=1), tmp_path_factory.mktemp("gated"), timing=FAST)


def test_a_view_inside_a_covered_module_counts_only_in_the_figure_with_modules(cards: CardSet) -> None:
    refusal = offline_refusal()
    assert callable(refusal)
    table = card_table(cards, refusal, top=100)
    module = next(c for c in cards.cards if c.kind == "module" and c.op.endswith("SiluAndMul"))
    assert not refusal(module)
    slices = [c for c in cards.cards if c.op == "aten::slice.Tensor"]
    assert slices and all(refusal(c) and runs_only_inside(c, module) for c in slices)
    rows = {r["op"]: r for r in table["top_cards"]}
    assert rows["aten::slice.Tensor"]["served_by_module"] == module.op
    assert rows["aten::slice.Tensor"]["offline_covered"] is False
    assert rows["aten::silu.default"]["offline_covered"] and rows["aten::silu.default"]["served_by_module"] is None
    assert rows["aten::cummax.default"]["served_by_module"] is None  # it runs at the root, outside the module

    aten = [c for c in cards.cards if c.kind == "aten"]
    by_template = sum(c.time_share for c in aten if not refusal(c))
    served = sum(c.time_share for c in slices)
    assert table["offline_covered_share"] == pytest.approx(by_template)
    assert table["offline_covered_share_with_modules"] == pytest.approx(by_template + served)
    vendor = sum(c.time_share for c in aten if c.vendor_op)
    assert vendor > 0 and table["vendor_share"] == pytest.approx(vendor)
    assert table["offline_covered_non_vendor_share"] == pytest.approx(by_template / (1 - vendor))
    with_modules = table["offline_covered_non_vendor_share_with_modules"]
    assert with_modules == pytest.approx((by_template + served) / (1 - vendor))


def test_the_uncovered_list_names_what_nothing_serves_with_its_reason(cards: CardSet) -> None:
    refusal = offline_refusal()
    assert callable(refusal)
    uncovered = {e["op"]: e for e in card_table(cards, refusal)["uncovered_top"]}
    assert "aten::slice.Tensor" not in uncovered and "aten::linear.default" not in uncovered
    assert uncovered["aten::cummax.default"]["reasons"] == ["no offline template covers aten::cummax.default"]
    vendor = sum(c.time_share for c in cards.cards if c.kind == "aten" and c.vendor_op)
    entry = uncovered["aten::cummax.default"]
    assert entry["non_vendor_share"] == pytest.approx(entry["time_share"] / (1 - vendor))
    transpose = uncovered["aten::t.default"]
    assert transpose["reasons"][0].startswith("card is not optimisable: view")
    assert card_table(cards, refusal)["uncovered_not_optimisable_non_vendor_share"] == pytest.approx(
        transpose["non_vendor_share"])


def test_without_the_catalog_the_table_says_why_and_claims_no_share(cards: CardSet) -> None:
    table = card_table(cards, "agent_service unavailable: ImportError")
    assert table["offline_covered_share"] is None
    assert table["offline_coverage_error"] == "agent_service unavailable: ImportError"
    assert all("offline_covered" not in row for row in table["top_cards"])


def test_the_paper_bench_reads_every_configuration_by_name() -> None:
    from bench import paper_coverage

    assert paper_coverage._selected("qwen35_moe:decode,resnet50") == [
        ("qwen35_moe", "decode"), ("resnet50", "b1_fp32"), ("resnet50", "b32_bf16")]
    assert len(paper_coverage._selected("")) == len(paper_coverage.CONFIGURATIONS)


def test_the_capture_is_reused_when_present(cards: CardSet, tmp_path: Path) -> None:
    from bench import paper_coverage

    cards.save(tmp_path)
    again = paper_coverage.capture("no_such_spec", "", tmp_path)  # no capture runs: the spec does not exist
    assert [c.id for c in again.cards] == [c.id for c in cards.cards]


def test_a_card_planned_but_never_rendered_is_not_covered() -> None:
    """Coverage asks the proposer for a candidate, not the catalog for a plan: an output with gaps is
    refused only when the elementwise source is rendered."""
    from agent_service.offline.catalog import plan_for_card
    from tests.agent_service.agent_cards import aten_card

    card, _ = aten_card(torch.ops.aten.relu.default, [torch.randn(4, 33)])
    gapped = card.model_copy(update={"outputs": [card.outputs[0].model_copy(update={"stride": [66, 1]})]})
    assert plan_for_card(gapped, "cpu").family == "elementwise_unary"
    refusal = offline_refusal()
    assert callable(refusal)
    assert refusal(card) == ""
    assert "gaps" in refusal(gapped)

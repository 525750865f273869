"""Which captured cards the offline proposer covers, and how much eager time they hold.

Shared by the benchmarks that capture a model (gpu/paper_models, gpu/forge_e2e, paper_coverage).
Shares are over aten cards, which partition the forward's work; module cards overlap them.

Two covered figures are reported, so that neither hides the other: an aten card is covered by an
aten template when the offline proposer renders a candidate for it, and covered through a module
when, beside that, every one of its calls ran inside one module card the proposer covers
(``forge_service.scheduler.runs_only_inside``): a deployed module kernel replaces the module's
whole forward, those calls included. The issue's target reads the covered share of the time
outside vendor ops, so each figure is also given as covered / (1 - vendor share).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from importlib import import_module
from typing import Any

TOP_CARDS = 10
TOP_UNCOVERED = 15

#: Why the offline proposer has no template for a card; "" when it has one.
RefusalFn = Callable[[Any], str]


def offline_refusal() -> RefusalFn | str:
    """Why the offline proposer makes no candidate for a card on the card's own device ("" when it
    makes one), or why that cannot be told here. The root candidate is rendered, not only planned,
    so a refusal that only rendering finds (a layout, a dtype) is counted as uncovered."""
    try:
        propose = import_module("agent_service.offline.proposer").propose_offline
        request = import_module("kforge_domain.propose_request").ProposeRequest
        device_info = import_module("kforge_domain.device").DeviceInfo
    except Exception as exc:
        return f"agent_service unavailable: {type(exc).__name__}: {exc}"
    # the devices the templates are sized for; a candidate's source, not its speed, is asked for
    devices = {"cpu": device_info(backend="cpu", name="cpu", sm_count=os.cpu_count() or 1),
               "cuda": device_info(backend="cuda", name="NVIDIA H200", arch="sm_90", sm_count=132,
                                   l2_bytes=60 << 20, copy_bandwidth_gbps=4000.0)}

    def refusal(card: Any) -> str:
        backend = "cuda" if str(card.device).startswith("cuda") else str(card.device)
        device = devices.get(backend, device_info(backend=backend))
        try:
            proposal = propose(request(card=card, device=device, backend=backend, parent=None, tried_knobs=[], seed=0))
        except Exception as exc:
            return f"the catalog failed: {type(exc).__name__}: {exc}"
        return "" if proposal.has_proposal else (proposal.no_proposal_reason or "no proposal")

    return refusal


def _runs_only_inside() -> Callable[[Any, Any], bool]:
    scheduler = import_module("forge_service.scheduler")
    only_inside: Callable[[Any, Any], bool] = scheduler.runs_only_inside
    return only_inside


def card_table(cards: Any, refusal: RefusalFn | str, top: int = TOP_CARDS) -> dict[str, Any]:
    """Top aten cards by time share, the shares the offline proposer covers, and what it leaves."""
    aten = [c for c in cards.cards if c.kind == "aten"]
    modules = [c for c in cards.cards if c.kind == "module"]
    vendor_share = sum(c.time_share for c in aten if c.vendor_op)
    table: dict[str, Any] = {
        "n_cards": len(cards.cards),
        "n_aten_cards": len(aten),
        "n_module_cards": len(modules),
        "captured_eager_us": cards.total_eager_us,
        "vendor_share": vendor_share,
        "non_vendor_share": 1.0 - vendor_share,
    }
    why = {c.id: refusal(c) for c in [*aten, *modules]} if callable(refusal) else {}
    served_by: dict[str, str] = {}
    if callable(refusal):
        only_inside = _runs_only_inside()
        covered_modules = [m for m in modules if not why[m.id]]
        for card in aten:
            host = next((m for m in covered_modules if only_inside(card, m)), None)
            if why[card.id] and not card.vendor_op and host is not None:
                served_by[card.id] = host.op
    rows = []
    for card in sorted(aten, key=lambda c: c.time_share, reverse=True)[:top]:
        row = {
            "op": card.op,
            "input_shapes": [spec.shape for spec in card.inputs],
            "dtypes": sorted({spec.dtype for spec in card.inputs}),
            "calls": card.call_count,
            "eager_us": card.eager_us,
            "time_share": card.time_share,
            "vendor_op": card.vendor_op,
        }
        if callable(refusal):
            row["offline_covered"] = not why[card.id]
            row["served_by_module"] = served_by.get(card.id)
            row["refusal"] = why[card.id] or None
        rows.append(row)
    table["top_cards"] = rows
    if not callable(refusal):
        table["offline_covered_share"] = None
        table["offline_coverage_error"] = refusal
        return table
    table.update(_covered_shares(aten, why, served_by, vendor_share))
    table["offline_covered_module_cards"] = sum(1 for m in modules if not why[m.id])
    table["offline_covered_modules"] = sorted({m.op for m in modules if not why[m.id]})
    table["uncovered_top"] = uncovered_ops(aten, why, served_by, vendor_share)
    return table


def _covered_shares(aten: list[Any], why: dict[str, str], served_by: dict[str, str],
                    vendor_share: float) -> dict[str, float | None]:
    """Covered shares of all captured time and of the time outside vendor ops, with and without modules."""
    by_template = sum(c.time_share for c in aten if not why[c.id])
    by_module = sum(c.time_share for c in aten if c.id in served_by)
    non_vendor = 1.0 - vendor_share
    covered_non_vendor = sum(c.time_share for c in aten if not why[c.id] and not c.vendor_op)

    def of_non_vendor(share: float) -> float | None:
        return share / non_vendor if non_vendor > 0 else None

    # what no kernel can serve as captured: views, in-place ops, factories, degenerate variants
    not_optimisable = sum(c.time_share for c in aten if why[c.id] and c.id not in served_by and not c.vendor_op
                          and (not c.optimisable or c.degenerate))
    return {
        "offline_covered_share": by_template,
        "offline_covered_share_with_modules": by_template + by_module,
        "offline_covered_non_vendor_share": of_non_vendor(covered_non_vendor),
        "offline_covered_non_vendor_share_with_modules": of_non_vendor(covered_non_vendor + by_module),
        "uncovered_not_optimisable_non_vendor_share": of_non_vendor(not_optimisable),
    }


def uncovered_ops(aten: list[Any], why: dict[str, str], served_by: dict[str, str], vendor_share: float,
                  top: int = TOP_UNCOVERED) -> list[dict[str, Any]]:
    """The non-vendor ops left uncovered, by summed share, each with its cards' first reason."""
    non_vendor = 1.0 - vendor_share
    ops: dict[str, dict[str, Any]] = {}
    for card in aten:
        if card.vendor_op or not why[card.id] or card.id in served_by:
            continue
        entry = ops.setdefault(card.op, {"op": card.op, "cards": 0, "time_share": 0.0, "reasons": []})
        entry["cards"] += 1
        entry["time_share"] += card.time_share
        if why[card.id] not in entry["reasons"]:
            entry["reasons"].append(why[card.id])
    ranked = sorted(ops.values(), key=lambda e: -e["time_share"])[:top]
    for entry in ranked:
        entry["non_vendor_share"] = entry["time_share"] / non_vendor if non_vendor > 0 else None
    return ranked

"""Tables the pages show, built from plain data as pandas frames (pure: no Streamlit).

Columns carry their units in their names (``eager µs``, ``cost $``) so the frames read well
both on screen and in tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone

import pandas as pd

from ui.models import CardSummary, CardTree, RunSummary
from ui.numbers import spread_text
from ui.run_story import outcome_word

OTHER_CARDS = "other cards"


def runs_frame(runs: Sequence[RunSummary]) -> pd.DataFrame:
    """One row per run: what it optimises, how far it got (a bar while active, how it ended once
    finished) and what it cost."""
    return pd.DataFrame(
        [
            {
                "run": r.run_id, "model": r.model, "backend": r.backend, "proposer": r.proposer, "status": r.status,
                "progress": r.progress if r.active else None, "outcome": outcome_word(r),
                "evaluations": f"{r.evaluations_done}/{r.evaluations_budget}",
                "cards": f"{r.cards_done}/{r.cards_total}", "cost $": r.cost_usd,
                "e2e speedup": r.best_e2e_speedup,
                "started": datetime.fromtimestamp(r.created_at, tz=timezone.utc) if r.created_at else None,
            }
            for r in runs
        ],
        columns=["run", "model", "backend", "proposer", "status", "progress", "outcome", "evaluations", "cards",
                 "cost $", "e2e speedup", "started"],
    )


def cards_frame(cards: Sequence[CardSummary]) -> pd.DataFrame:
    """The card table of a run: time share, eager latency (median ± IQR, as text) and best latency,
    speedup, % of floor, verdict; each card by the first 8 characters of its id, as the rest of the
    dashboard shows it."""
    return pd.DataFrame(
        [
            {
                "card": c.card_id[:8], "op": c.op, "share": c.time_share, "calls": c.call_count,
                "eager µs": spread_text(c.eager_us, c.eager_spread_us),
                "best µs": c.best_us, "speedup": c.speedup, "% of floor": c.pct_of_floor, "status": c.status,
                "class": c.audit_class, "evaluations": c.evaluations, "granted": c.budget or None,
                "cost $": c.cost_usd, "reason": c.reason or None,
            }
            for c in cards
        ],
        columns=["card", "op", "share", "calls", "eager µs", "best µs", "speedup", "% of floor", "status", "class",
                 "evaluations", "granted", "cost $", "reason"],
    )


def kernel_replaces_eager(card: CardSummary) -> bool:
    """A card whose best kernel beats eager: the runtime would dispatch it."""
    return card.speedup is not None and card.speedup > 1.0 and card.audit_class != "fallback"


def time_breakdown(cards: Sequence[CardSummary], top: int = 8) -> pd.DataFrame:
    """Where one model call's time goes, per card, before and after the best kernels.

    Eager time is the card's per-call latency times its call count; with a kernel that beats
    eager it shrinks by the measured speedup. Cards past the ``top`` heaviest are summed as
    "other cards". These are per-card estimates; the end-to-end figure is measured separately.
    """
    rows: list[tuple[str, float, float]] = []
    for c in cards:
        if not c.eager_us:
            continue
        eager = c.eager_us * max(c.call_count, 1)
        after = eager / c.speedup if kernel_replaces_eager(c) and c.speedup else eager
        rows.append((f"{c.op} [{c.card_id[:8]}]", eager, after))
    rows.sort(key=lambda r: r[1], reverse=True)
    if len(rows) > top:
        rest = rows[top:]
        rows = [*rows[:top], (OTHER_CARDS, sum(r[1] for r in rest), sum(r[2] for r in rest))]
    records = []
    for label, eager, after in rows:
        records.append({"card": label, "phase": "eager", "time µs": eager})
        records.append({"card": label, "phase": "with best kernels", "time µs": after})
    return pd.DataFrame(records, columns=["card", "phase", "time µs"])


def candidates_frame(tree: CardTree) -> pd.DataFrame:
    """The candidates of a card, in the order the search expanded the tree with them, with the
    search's visits and value of each one's subtree."""
    best = set(tree.best_lineage())
    return pd.DataFrame(
        [
            {
                "order": n.order or None, "candidate": n.candidate_id, "parent": n.parent_id or "eager",
                "depth": n.depth, "status": n.status,
                "latency µs": n.latency_us, "speedup": n.speedup, "visits": n.visits, "value": n.value,
                "best lineage": n.candidate_id in best, "description": n.description,
            }
            for n in tree.nodes
        ],
        columns=["order", "candidate", "parent", "depth", "status", "latency µs", "speedup", "visits", "value",
                 "best lineage", "description"],
    )


def geomean_card_speedup(cards: Sequence[CardSummary]) -> float | None:
    """Geometric mean over searched cards of the speedup kept (1.0 where eager stays)."""
    searched = [c for c in cards if c.evaluations > 0]
    if not searched:
        return None
    kept = [c.speedup if kernel_replaces_eager(c) and c.speedup else 1.0 for c in searched]
    return math.exp(sum(math.log(s) for s in kept) / len(kept))


def providers_frame(runs: Sequence[RunSummary], cards_by_run: dict[str, list[CardSummary]]) -> pd.DataFrame:
    """Runs of one model side by side: speedup reached against dollars and evaluations spent."""
    records = []
    for r in runs:
        cards = cards_by_run.get(r.run_id, [])
        records.append({
            "proposer": r.proposer, "run": r.run_id, "status": r.status, "e2e speedup": r.best_e2e_speedup,
            "card speedup (geomean)": geomean_card_speedup(cards),
            "cards improved": sum(kernel_replaces_eager(c) for c in cards), "cost $": r.cost_usd,
            "evaluations": r.evaluations_done, "LLM calls": r.llm_calls,
        })
    return pd.DataFrame(records, columns=["proposer", "run", "status", "e2e speedup", "card speedup (geomean)",
                                          "cards improved", "cost $", "evaluations", "LLM calls"])

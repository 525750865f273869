"""One run: progress, the card table and where the model's time goes before and after."""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import streamlit as st

from ui.models import CardSummary, EndToEnd, EndToEndMode, RunSummary
from ui.tables import cards_frame, time_breakdown
from ui.views.formatting import (
    HIDDEN,
    SHARE_COLUMN,
    SPEEDUP_COLUMN,
    US_COLUMN,
    USD_COLUMN,
    ms_text,
    number_column,
    render_table,
    speedup_text,
    status_icon,
    text_column,
    usd_text,
)


def render_progress(run: RunSummary) -> None:
    """Status, evaluations against budget, cards done, cost and the end-to-end speedup."""
    st.caption(f"{run.model} · {run.backend} · proposer {run.proposer} · {run.run_dir}")
    cols = st.columns(5)
    cols[0].metric("Status", run.status, icon=status_icon(run.status))
    cols[1].metric("Spent / granted", f"{run.evaluations_done} / {run.evaluations_budget}",
                   help="evaluations: candidates evaluated, against those granted to the cards searched "
                        "(a card still improving when its share runs out is granted more)")
    cols[2].metric("Cards done", f"{run.cards_done}/{run.cards_total}")
    budget = f" of ${run.budget_usd:.2f}" if run.budget_usd is not None else ""
    cols[3].metric("Cost", usd_text(run.cost_usd) + budget)
    cols[4].metric("End-to-end speedup", speedup_text(run.best_e2e_speedup),
                   help="the model with the .cast applied, guards on, measured after the search")
    if run.active:
        st.progress(run.progress, text=f"{run.progress:.0%} of the evaluation budget")
    else:
        st.caption(outcome_text(run))
    if run.status == "failed":
        st.error(f"The run failed: {run.error or 'no reason recorded'}")
    elif run.status == "cancelled":
        st.warning("The run was cancelled; `kforge resume " + run.run_id + "` continues it.")


def outcome_text(run: RunSummary) -> str:
    """How a finished run ended against its budget: a bar stuck at 60% would read as still running."""
    used = f"{run.evaluations_done} of {run.evaluations_budget} budgeted evaluations"
    if run.status == "done" and run.evaluations_done >= run.evaluations_budget:
        return f"done: the evaluation budget is spent ({used})"
    if run.status == "done":
        return (f"done: stopped before its budget was spent, {used} (a time limit, or cards that got no "
                "proposal or stopped improving)")
    return f"{run.status} after {used}"


NOT_COMPILED = "not measured: the run skipped torch.compile"
RUNS_AS_EAGER = "the .cast holds no kernel for eager use on this device, so the model runs as eager"
MODE_HELP = {
    ".cast": "eager PyTorch with the .cast applied, guards on",
    "torch.compile": "torch.compile alone",
    "cast.compile": "torch.compile with the .cast's kernels in its graphs (as torch.compile where it kept none)",
}


def render_end_to_end(e2e: EndToEnd) -> None:
    """The model end to end: the .cast beside torch.compile and cast.compile, each against eager."""
    if not e2e.measured:
        st.info(f"End to end not measured: {e2e.error or 'no reason recorded'}")
        return
    modes = [e2e.cast, e2e.compile or EndToEndMode("torch.compile", None, None),
             e2e.cast_compile or EndToEndMode("cast.compile", None, None)]
    for col, mode in zip(st.columns(len(modes)), modes, strict=True):
        if mode.name == ".cast":
            why = RUNS_AS_EAGER if e2e.cast_runs_as_eager else MODE_HELP[mode.name]
        else:
            why = MODE_HELP[mode.name] if e2e.compile else NOT_COMPILED
        col.metric(f"{mode.name} end to end", speedup_text(mode.speedup), help=why)
    cast = "runs as eager" if e2e.cast_runs_as_eager else ms_text(e2e.cast.ms)
    st.caption(f"Model latency per call: eager {ms_text(e2e.eager_ms)} · .cast {cast} · "
               + " · ".join(f"{mode.name} {ms_text(mode.ms)}" for mode in modes[1:]) + "; speedups are over eager.")


#: Fixed widths that fit the page at 1400 px (a long op name wraps); the call count is on the Card
#: page and each card's reason, which can run long, is listed under the table. Eager time is text,
#: its median ± IQR, wide enough for ``500.00 ± 5.00`` on one line.
CARD_COLUMNS = {
    "card": text_column(70), "op": text_column(124), "share": SHARE_COLUMN, "calls": HIDDEN,
    "eager µs": text_column(108, help="median ± IQR of the timed eager calls"), "best µs": US_COLUMN,
    "speedup": SPEEDUP_COLUMN,
    "% of floor": number_column(64, "%.0f%%", "% floor", help="the bandwidth floor's share of the best latency"),
    "status": text_column(66), "class": text_column(110),
    "evaluations": number_column(50, label="evals", help="candidates evaluated"),
    "granted": number_column(60, help="evaluations granted to the card, raised while it improves"),
    "cost $": USD_COLUMN, "reason": HIDDEN,
}


def render_card_table(cards: Sequence[CardSummary]) -> None:
    """Time share, eager and best latency, speedup, % of the bandwidth floor, status and class;
    below, why each card that has a reason ended as it did."""
    if not cards:
        st.info("No cards yet: the model has not been captured.")
        return
    shown = [c for c in cards if c.optimisable or c.evaluations]
    hidden = len(cards) - len(shown)
    render_table(cards_frame(shown), column_config=CARD_COLUMNS, wrap=True)
    if hidden:
        st.caption(f"{hidden} card{'s' if hidden > 1 else ''} that cannot be optimised "
                   f"{'are' if hidden > 1 else 'is'} not shown.")
    reasons = [c for c in shown if c.reason]
    if reasons:
        with st.expander(f"Why {len(reasons)} card{'s' if len(reasons) > 1 else ''} ended as "
                         f"{'they' if len(reasons) > 1 else 'it'} did"):
            st.markdown("\n".join(f"- `{c.op}` [{c.card_id[:8]}] · {c.status}: {c.reason}" for c in reasons))


def time_chart(cards: Sequence[CardSummary]) -> alt.Chart | None:
    """Grouped bars: eager time per card beside its time with the best kernel."""
    frame = time_breakdown(cards)
    if frame.empty:
        return None
    return (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            y=alt.Y("card:N", sort=None, title=None, axis=alt.Axis(labelLimit=320)),
            yOffset="phase:N",
            x=alt.X("time µs:Q", title="µs per model call"),
            color=alt.Color("phase:N", title=None, scale=alt.Scale(range=["#adb5bd", "#2f9e44"])),
            tooltip=["card", "phase", alt.Tooltip("time µs:Q", format=".2f")],
        )
    )


KIND_LABELS = {"aten": "aten ops", "module": "modules"}


def render_time_plot(cards: Sequence[CardSummary]) -> None:
    """The time plot of one kind of card at a time: a module card's time includes its aten ops'."""
    st.subheader("Where the time goes")
    kinds = [k for k in KIND_LABELS if any(c.kind == k and c.eager_us for c in cards)]
    if len(kinds) > 1:
        kind = st.radio("Cards", kinds, format_func=KIND_LABELS.__getitem__, horizontal=True, key="time_plot_kind",
                        help="module cards contain the aten ops they run, so the two views are not added up")
        cards = [c for c in cards if c.kind == kind]
    chart = time_chart(cards)
    if chart is None:
        st.info("No eager timings yet.")
        return
    st.altair_chart(chart)
    st.caption("Per-card eager time (latency × calls) and the same with the best kernel that beats eager. "
               "The end-to-end speedup above is measured on the whole model, not summed from these.")


def render_report(markdown: str) -> None:
    with st.expander("Report"):
        st.markdown(markdown)

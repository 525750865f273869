"""The audit of a .cast: which cards run custom kernels, backend wrappers or eager, and why."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.cast_audit import CLASS_MEANING, CastAudit
from ui.views.formatting import SPEEDUP_COLUMN, number_column, render_table, text_column


def kernels_frame(audit: CastAudit) -> pd.DataFrame:
    """The packaged kernels, with the numbers that earned each its place."""
    return pd.DataFrame(
        [
            {"card": r.card_id, "op": r.op, "class": r.audit_class, "arch": r.arch, "speedup": r.speedup,
             "with guard": r.effective_speedup, "why": r.why}
            for r in audit.rows if r.audit_class != "fallback"
        ],
        columns=["card", "op", "class", "arch", "speedup", "with guard", "why"],
    )


def fallbacks_frame(audit: CastAudit) -> pd.DataFrame:
    """The cards left on eager PyTorch, each with its reason."""
    return pd.DataFrame(
        [{"card": r.card_id, "op": r.op, "why": r.why} for r in audit.rows if r.audit_class == "fallback"],
        columns=["card", "op", "why"],
    )


def fallback_reasons(audit: CastAudit) -> pd.DataFrame:
    """How many cards stay on eager for each reason, the commonest first."""
    frame = fallbacks_frame(audit)
    counts = frame.groupby("why").size().sort_values(ascending=False)
    return pd.DataFrame({"reason": counts.index, "cards": counts.to_numpy()})


#: Fixed widths that fit the page at 1400 px; rows grow to fit the longest text.
KERNEL_COLUMNS = {
    "card": text_column(130), "op": text_column(180), "class": text_column(100), "arch": text_column(90),
    "speedup": SPEEDUP_COLUMN, "with guard": number_column(80, "×%.2f"), "why": text_column(272),
}
REASON_COLUMNS = {"reason": text_column(820), "cards": number_column(60)}
#: In an expander, whose padding leaves a table less room.
FALLBACK_COLUMNS = {"card": text_column(130), "op": text_column(180), "why": text_column(570)}


def render_audit(audit: CastAudit) -> None:
    st.caption(f"model {audit.model_name or audit.model_spec} · run {audit.run_id} · {audit.producer} · "
               f"built {audit.created_at} · min speedup ×{audit.min_speedup:g} · "
               f"{'signed' if audit.signed else 'unsigned'}")
    cols = st.columns(3)
    for col, audit_class in zip(cols, CLASS_MEANING, strict=True):
        col.metric(audit_class.replace("_", " "), audit.count(audit_class), help=CLASS_MEANING[audit_class])
    if audit.archs:
        st.caption(f"architectures: {', '.join(audit.archs)} · toolchains: {', '.join(audit.toolchains)}")
    if not audit.rows:
        st.info("This package lists no cards.")
        return
    st.subheader("Kernels")
    kernels = kernels_frame(audit)
    if kernels.empty:
        st.info("No kernel beat eager with its guard: the package leaves the whole model on eager PyTorch.")
    else:
        render_table(kernels, column_config=KERNEL_COLUMNS, wrap=True)
    fallbacks = fallbacks_frame(audit)
    if not fallbacks.empty:
        st.subheader("On eager PyTorch")
        render_table(fallback_reasons(audit), column_config=REASON_COLUMNS, wrap=True)
        with st.expander(f"All {len(fallbacks)} cards on eager"):
            render_table(fallbacks, column_config=FALLBACK_COLUMNS, wrap=True)

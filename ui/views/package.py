"""The audit of a .cast: which cards run custom kernels, backend wrappers or eager, and why."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ui.cast_audit import CLASS_MEANING, CastAudit
from ui.views.formatting import SPEEDUP_COLUMN


def audit_frame(audit: CastAudit) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"card": r.card_id, "op": r.op, "class": r.audit_class, "arch": r.arch, "speedup": r.speedup,
             "with guard": r.effective_speedup, "why": r.why}
            for r in audit.rows
        ],
        columns=["card", "op", "class", "arch", "speedup", "with guard", "why"],
    )


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
    st.dataframe(audit_frame(audit), hide_index=True,
                 column_config={"speedup": SPEEDUP_COLUMN, "with guard": SPEEDUP_COLUMN,
                                "why": st.column_config.TextColumn(width="large")})
    if not audit.count("custom") and not audit.count("backend_wrapper"):
        st.info("No kernel beat eager with its guard: the package leaves the whole model on eager PyTorch.")

"""A run's failed candidates: how many failed each way, then each one's error, log tail and source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import streamlit as st

from ui.failures import STATUS_MEANING, FailedCandidate
from ui.models import CandidateDetail
from ui.views.candidate import SOURCE_LANGUAGE
from ui.views.formatting import number_column, render_table, text_column


def summary_frame(groups: Mapping[str, Sequence[FailedCandidate]]) -> pd.DataFrame:
    """One row per way of failing: how many candidates failed so, and what it means."""
    return pd.DataFrame(
        [{"status": status, "candidates": len(failed), "meaning": STATUS_MEANING.get(status)}
         for status, failed in groups.items()],
        columns=["status", "candidates", "meaning"],
    )


#: Fixed widths that fit the page at 1400 px.
SUMMARY_COLUMNS = {"status": text_column(130), "candidates": number_column(90), "meaning": text_column(660)}


def status_title(status: str, count: int) -> str:
    return f"{status.lower().replace('_', ' ').capitalize()} ({count})"


def render_summary(groups: Mapping[str, Sequence[FailedCandidate]], evaluated: int) -> None:
    failed = sum(len(g) for g in groups.values())
    st.caption(f"{failed} of {evaluated} evaluated candidate{'s' if evaluated != 1 else ''} failed.")
    if groups:
        render_table(summary_frame(groups), column_config=SUMMARY_COLUMNS, wrap=True)


def failure_title(failed: FailedCandidate) -> str:
    node = failed.node
    order = f"#{node.order} · " if node.order else ""
    return f"{order}{node.candidate_id} · {failed.card.op} · {node.description or 'no description'}"


def render_failure(run_id: str, failed: FailedCandidate, detail: CandidateDetail | None) -> None:
    """One failed candidate: its error and log tail in view, its source a tab away."""
    with st.expander(failure_title(failed)):
        st.page_link("screens/candidate.py", label="Open on the Candidate page", icon=":material/science:",
                     query_params={"run": run_id, "card": failed.card.card_id, "candidate": failed.node.candidate_id})
        if detail is None:
            st.caption("Its error, log and source are on the Candidate page.")
            return
        error_tab, log_tab, source_tab = st.tabs(["Error", "Log tail", "Source"])
        with error_tab:
            if detail.error_message:
                st.code(detail.error_message, language=None, wrap_lines=True)
            else:
                st.caption("No error message was recorded.")
        with log_tab:
            if detail.log_tail:
                st.code(detail.log_tail, language=None, wrap_lines=True)
            else:
                st.caption("No log was recorded.")
        with source_tab:
            if detail.source:
                st.code(detail.source, language=SOURCE_LANGUAGE, line_numbers=True)
            else:
                st.caption("No source: the proposer returned nothing usable.")

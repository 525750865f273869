"""One candidate: source, diff against its parent, logs, numerics, timings and LLM exchanges."""

from __future__ import annotations

import json

import streamlit as st

from ui.models import CandidateDetail
from ui.numbers import spread_text
from ui.source_diff import source_diff
from ui.views.formatting import speedup_text, us_text, usd_text

SOURCE_LANGUAGE = "cpp"


def render_verdict(cand: CandidateDetail) -> None:
    """Status, timings with spread, numerical error, and how the verdict was reached."""
    st.caption(f"card {cand.card_id} · parent {cand.parent_id or 'eager PyTorch'} · proposer {cand.proposer}"
               + (f" · {cand.audit_class}" if cand.audit_class else ""))
    if cand.description:
        st.markdown(f"**{cand.description}**")
    if not cand.evaluated:
        st.info("Not evaluated yet.")
        return
    if cand.status == "PASSED":
        again = ", re-measured in a fresh process" if cand.remeasured else ""
        if cand.speedup is not None and cand.speedup > 1.0:
            st.success(f"PASSED: {speedup_text(cand.speedup)} against eager{again}")
        else:  # correct, but no reason to ship it: the .cast keeps eager for this card
            st.warning(f"PASSED but not faster than eager: {speedup_text(cand.speedup)}{again}")
    else:
        st.warning(f"{cand.status}: {cand.error_message or 'no message'}")
    cols = st.columns(4)
    cols[0].metric("Kernel", spread_text(cand.latency_us, cand.latency_spread_us, "µs"), help="median ± IQR")
    cols[1].metric("Eager, same series", spread_text(cand.eager_latency_us, cand.eager_spread_us, "µs"),
                   help="timed interleaved with this kernel, so Speedup is this over Kernel")
    cols[2].metric("Speedup", speedup_text(cand.speedup))
    floor = f"{100 * cand.floor_us / cand.latency_us:.0f}% of floor" if cand.floor_us and cand.latency_us else None
    cols[3].metric("Bandwidth floor", us_text(cand.floor_us), floor, delta_color="off", delta_arrow="off")
    cols = st.columns(4)
    cols[0].metric("Rel. L2 error", f"{cand.rel_l2_error:.2e}" if cand.rel_l2_error is not None else "—")
    cols[1].metric("Max scaled error", f"{cand.max_scaled_error:.2e}" if cand.max_scaled_error is not None else "—")
    cols[2].metric("Compile", f"{cand.compile_s:.2f} s")
    cols[3].metric("Evaluation", f"{cand.total_s:.2f} s")


def render_source(cand: CandidateDetail) -> None:
    if not cand.source:
        st.info("No source: the proposer returned nothing usable.")
        return
    st.code(cand.source, language=SOURCE_LANGUAGE, line_numbers=True)


def render_diff(cand: CandidateDetail, parent: CandidateDetail | None) -> None:
    if parent is None:
        st.info("This candidate is a first revision: its parent is eager PyTorch, so there is no source to diff.")
        return
    diff = source_diff(parent.source, cand.source, f"{parent.candidate_id} (parent)", cand.candidate_id)
    if not diff:
        st.info("The source is identical to its parent's (the revision changed only knobs).")
        return
    st.code(diff, language="diff")


def render_logs(cand: CandidateDetail) -> None:
    if cand.error_message:
        st.markdown("**Error**")
        st.code(cand.error_message, language=None)
    if cand.log_tail:
        st.markdown("**Compile and run log (tail)**")
        st.code(cand.log_tail, language=None)
    if not (cand.error_message or cand.log_tail):
        st.info("No log: the candidate compiled and ran cleanly.")
    details = {
        "compiler flags": cand.compiler_flags, "toolchain": cand.toolchain, "arch": cand.arch,
        "sandbox": cand.sandbox_id,
    }
    st.table({k: [v] for k, v in details.items() if v})
    if cand.knobs_json and cand.knobs_json != "{}":
        st.markdown("**Knobs**")
        st.json(json.loads(cand.knobs_json))


def render_llm(cand: CandidateDetail) -> None:
    if not cand.exchanges:
        st.info(f"Proposed by {cand.proposer or 'the offline proposer'} without an LLM call.")
        return
    st.metric("Cost", usd_text(cand.usd),
              f"{cand.prompt_tokens} prompt + {cand.completion_tokens} completion tokens", delta_color="off")
    for i, ex in enumerate(cand.exchanges, 1):
        with st.expander(f"Exchange {i}: {ex.model} · {usd_text(ex.usd)} · {ex.latency_s:.1f} s", expanded=i == 1):
            if ex.error:
                st.error(f"The LLM call failed: {ex.error}")
            st.markdown("**Prompt**")
            st.code(ex.prompt, language="markdown", wrap_lines=True)
            st.markdown("**Answer**")
            st.code(ex.response, language="markdown", wrap_lines=True)

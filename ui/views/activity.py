"""A run as it happens: its phase, elapsed time and estimate, and the feed of its events."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from ui.models import RunEvent, RunSummary
from ui.run_story import RunStory
from ui.views.formatting import duration_text, render_table, text_column, verdict_text

#: The feed shows the latest events; a long run logs thousands.
FEED_ROWS = 200
KIND_WORDS = {
    "status": "status", "capture": "capture", "card_started": "card started", "candidate": "candidate",
    "card_done": "card done", "log": "note", "run_done": "run done",
}


def render_story(run: RunSummary, story: RunStory) -> None:
    """Phase, elapsed time and the estimate; a finished run gets no estimate, only its duration."""
    st.markdown(f"**Phase:** {story.phase}")  # a metric would cut a long phase short
    cols = st.columns(4)
    cols[0].metric("Elapsed" if run.active else "Took", duration_text(story.elapsed_s),
                   help="from the run's first event to now" if run.active else "from its first event to its last")
    if run.active:
        cols[1].metric("Search left", duration_text(story.remaining_s) if story.remaining_s is not None
                       else "not known yet",
                       help="the evaluations left at the pace so far, capped by the time limit; packaging and "
                            "the end-to-end timing come after")
    elif run.time_limit_s is not None:
        cols[1].metric("Time limit", duration_text(run.time_limit_s))


def feed_frame(run: RunSummary, events: Sequence[RunEvent]) -> pd.DataFrame:
    """The latest events first, each at its time since the run's first event."""
    start = events[0].timestamp if events else run.created_at
    return pd.DataFrame(
        [
            {
                "at": duration_text(max(e.timestamp - start, 0.0)), "what": KIND_WORDS.get(e.kind, e.kind),
                "message": e.message, "card": e.card_id[:8] or None, "candidate": e.candidate_id or None,
                "verdict": verdict_text(e.candidate_status, e.speedup) if e.candidate_status else None,
            }
            for e in reversed(events[-FEED_ROWS:])
        ],
        columns=["at", "what", "message", "card", "candidate", "verdict"],
    )


#: Fixed widths that fit the page at 1400 px; rows grow to fit the longest message.
FEED_COLUMNS = {
    "at": text_column(62), "what": text_column(92), "message": text_column(378), "card": text_column(80),
    "candidate": text_column(106), "verdict": text_column(202),
}


def render_feed(run: RunSummary, events: Sequence[RunEvent]) -> None:
    st.subheader("Activity")
    if not events:
        st.info("No events recorded for this run." if not run.active else "Waiting for the run's first event.")
        return
    render_table(feed_frame(run, events), column_config=FEED_COLUMNS, wrap=True)
    if len(events) > FEED_ROWS:
        st.caption(f"The latest {FEED_ROWS} of {len(events)} events, newest first.")
    else:
        st.caption("Newest first.")

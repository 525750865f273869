"""Which run, card or candidate a page shows: kept in the URL (``?run=…&card=…``) so links and
reloads land on the same thing, remembered across pages (the sidebar's links carry no query), and
offered in a select box for changing it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from ui.models import RunSummary
from ui.views.formatting import run_label


def choose(label: str, param: str, options: Sequence[str], *, page: str,
           format_func: Callable[[str], str] = str, default: str | None = None) -> str:
    """The option named by query parameter ``param`` (else the one last chosen on any page, else
    ``default``, else the first), chosen in a select box.

    The URL wins over a remembered choice because it changes only by navigation; the select
    box writes its choice back to the URL. The choice is also kept outside the widget's state,
    which Streamlit drops on a page that does not draw the widget, so going Run → Card by the
    sidebar stays on the same run.
    """
    if not options:
        raise ValueError(f"no {label.lower()} to choose from")
    key = f"{page}:{param}"
    last_key = f"last:{param}"
    wanted = st.query_params.get(param)
    if wanted in options:
        st.session_state[key] = wanted
    elif st.session_state.get(key) not in options:
        last = st.session_state.get(last_key)
        fallback = last if last in options else default if default in options else options[0]
        if wanted:
            st.warning(f"{label} {wanted!r} was not found; showing {fallback!r} instead.")
        st.session_state[key] = fallback
    st.query_params[param] = st.session_state[last_key] = st.session_state[key]

    def remember() -> None:
        st.query_params[param] = st.session_state[last_key] = st.session_state[key]

    st.selectbox(label, list(options), key=key, format_func=format_func, on_change=remember)
    chosen: str = st.session_state[key]
    return chosen


def choose_run(runs: Sequence[RunSummary], *, page: str) -> str:
    """The run a page shows (see :func:`choose`); with no run at all the page says where to start
    one and ends."""
    if not runs:
        st.info("No runs yet: start one on the Runs page.")
        st.stop()
    labels = {r.run_id: run_label(r) for r in runs}
    return choose("Run", "run", list(labels), page=page, format_func=labels.__getitem__)

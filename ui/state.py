"""The one forge client of the app and the data it fetches, cached the Streamlit way.

The client lives in ``st.cache_resource`` (one channel per target for the whole server);
answers live in ``st.cache_data`` for a few seconds, so reruns and several viewers do not
hammer the forge while live pages still refresh. Every function takes the target's key, so
two targets never share cached answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NoReturn, TypeVar

import streamlit as st

from ui.client import ForgeClient, ForgeError
from ui.connection import ForgeTarget
from ui.models import CandidateDetail, CardSummary, CardTree, EndToEnd, RunEvent, RunSummary

LIVE_TTL_S = 2.0
T = TypeVar("T")


def target_key() -> str:
    """This process's forge target (from the environment ``kforge ui`` set), as a cache key."""
    return json.dumps(ForgeTarget.from_environ().to_environ(), sort_keys=True)


def forge_address() -> str:
    return ForgeTarget.from_environ().address


@st.cache_resource(show_spinner=False)
def _client(key: str) -> ForgeClient:
    return ForgeClient(ForgeTarget.from_environ(json.loads(key)))


def forge_client() -> ForgeClient:
    return _client(target_key())


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def list_runs(key: str) -> list[RunSummary]:
    return _client(key).list_runs()


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def get_run(key: str, run_id: str) -> RunSummary:
    return _client(key).get_run(run_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def run_events(key: str, run_id: str) -> list[RunEvent]:
    return _client(key).run_events(run_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def list_cards(key: str, run_id: str) -> list[CardSummary]:
    return _client(key).list_cards(run_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def card_tree(key: str, run_id: str, card_id: str) -> CardTree:
    return _client(key).card_tree(run_id, card_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def candidate(key: str, run_id: str, candidate_id: str) -> CandidateDetail:
    return _client(key).candidate(run_id, candidate_id)


@st.cache_data(ttl=LIVE_TTL_S, show_spinner=False)
def end_to_end(key: str, run_id: str) -> EndToEnd:
    return _client(key).end_to_end(run_id)


@st.cache_data(ttl=60, show_spinner=False, max_entries=8)
def exported_cast(key: str, run_id: str) -> bytes:
    return _client(key).export_cast(run_id)


def forget_cached_answers() -> None:
    """After a change (a run started or cancelled), show the forge's new state at once."""
    st.cache_data.clear()


def show_error_and_stop(error: Exception) -> NoReturn:
    """Show a failure on the page, with what to do when the service is down, and end this run."""
    st.error(str(error), icon="⚠️")
    if isinstance(error, ForgeError) and error.unavailable:
        st.caption("Start one with `kforge ui` (no --forge) or `kforge serve forge`, or point --forge at it.")
    st.stop()


def fetch(func: Callable[..., T], *args: str) -> T:
    """``func(target_key(), *args)``, or the error shown in place of the page."""
    try:
        return func(target_key(), *args)
    except ForgeError as exc:
        show_error_and_stop(exc)

"""The runs list, the form that starts a run and the control that cancels one."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from kforge_domain.backends import BACKEND_CHOICES
from ui.models import RunSummary
from ui.tables import runs_frame
from ui.views.formatting import HIDDEN, USD_COLUMN, number_column, render_table, status_icon, text_column

#: Fixed widths that fit the page at 1400 px, a progress column included; how many cards a run
#: has done is on its Run page.
RUNS_COLUMNS = {
    "run": text_column(162), "model": text_column(90), "backend": text_column(64), "proposer": text_column(98),
    "status": text_column(66),
    "progress": st.column_config.ProgressColumn("progress", min_value=0.0, max_value=1.0, format="percent",
                                                help="an active run's evaluations done against its budget", width=72),
    "outcome": text_column(96, help="how a finished run ended against its evaluation budget"),
    "evaluations": text_column(50, "evals", help="evaluations done / budgeted"),
    "cards": HIDDEN,
    "cost $": USD_COLUMN,
    "e2e speedup": number_column(64, "×%.2f", "speedup", help="end to end: the model with its .cast against eager"),
    "started": st.column_config.DatetimeColumn("started", format="MMM D HH:mm", help="UTC", width=84),
}


def render_runs_table(runs: Sequence[RunSummary]) -> None:
    """Every run with status, model, backend, proposer, progress against budget, cost, speedup."""
    if not runs:
        st.info("No runs yet. Start one below, or with `kforge optimize MODEL_SPEC`.")
        return
    frame = runs_frame(runs)
    if not any(r.active for r in runs):  # a column of empty bars would only take room
        frame = frame.drop(columns="progress")
    render_table(frame, column_config=RUNS_COLUMNS)
    failed = [r for r in runs if r.status == "failed"]
    for r in failed[:3]:
        st.warning(f"Run {r.run_id} failed: {r.error or 'no reason recorded'}")


def render_open_run(runs: Sequence[RunSummary]) -> None:
    """Links to each run's page."""
    if not runs:
        return
    st.subheader("Open a run")
    for r in runs[:20]:
        st.page_link("screens/run.py", label=f"{r.run_id} · {r.model} · {r.proposer} · {r.status}",
                     icon=status_icon(r.status), query_params={"run": r.run_id})


def start_run_form() -> forge_pb2.RunConfig | None:
    """The new-run form; the configuration once submitted and valid, else None."""
    with st.form("start_run"):
        st.subheader("Start a run")
        model_spec = st.text_input(
            "Model spec", key="new_run_model_spec", placeholder="examples/small_cnn.py or package.module:factory",
            help="a .py file defining get_model() and get_inputs(), on the forge service's host",
        )
        left, mid, right = st.columns(3)
        backend = left.selectbox("Backend", BACKEND_CHOICES, key="new_run_backend")
        proposer = mid.text_input("Proposer", key="new_run_proposer", value="offline",
                                  help='"offline" or a litellm model string')
        api_base = right.text_input("API base", key="new_run_api_base",
                                    help="endpoint of an OpenAI-compatible or other litellm server")
        left, mid, right = st.columns(3)
        budget = left.number_input("Evaluations per card", key="new_run_budget", min_value=1, max_value=10_000,
                                   value=8, step=1)
        max_cards = mid.number_input("Cards to search", key="new_run_max_cards", min_value=1, max_value=1_000,
                                     value=5, step=1)
        budget_usd = right.number_input("Dollar budget (0: none)", key="new_run_budget_usd", min_value=0.0,
                                        value=0.0, step=0.5)
        submitted = st.form_submit_button("Start run", type="primary")
    if not submitted:
        return None
    if not model_spec.strip():
        st.error("Give a model spec: a .py file defining get_model() and get_inputs(), or package.module:factory.")
        return None
    config = forge_pb2.RunConfig(
        model_spec=model_spec.strip(), backend=backend, proposer=proposer.strip() or "offline",
        api_base=api_base.strip(), budget_per_card=int(budget), max_cards=int(max_cards),
    )
    if budget_usd > 0:
        config.budget_usd = float(budget_usd)
    return config


def cancel_run_picker(runs: Sequence[RunSummary]) -> str | None:
    """The id of an active run the user asked to cancel, or None."""
    active = [r.run_id for r in runs if r.active]
    if not active:
        return None
    st.subheader("Cancel a run")
    with st.form("cancel_run"):
        run_id = st.selectbox("Active run", active, key="cancel_run_id")
        confirmed = st.form_submit_button("Cancel run")
    return run_id if confirmed else None

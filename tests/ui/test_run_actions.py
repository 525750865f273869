"""Starting and cancelling a run from the Runs page, against real forge, capture and sandbox services
(the agent is reached only after capture, which these runs never finish)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernel_forge.forge.v1 import messages_pb2 as forge_pb2
from servicekit.security import Security
from tests.ui.apptest import open_page, texts
from tests.ui.forge_process import forge_process
from ui.client import ForgeClient
from ui.connection import FORGE_ENV_VAR, ForgeTarget

# Capture runs get_model() in a child process; this one takes long enough to be cancelled.
SLOW_MODEL = """
import time
import torch


def get_model():
    time.sleep(120)
    return torch.nn.ReLU()


def get_inputs():
    return torch.randn(4)
"""


@pytest.fixture
def fresh_forge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ForgeClient]:
    with forge_process("forge-with-capture", tmp_path / "runs") as address:
        monkeypatch.setenv(FORGE_ENV_VAR, address)
        yield ForgeClient(ForgeTarget(address, Security()))


def _wait_for_status(client: ForgeClient, run_id: str, status: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while (run := client.get_run(run_id)).status != status:
        assert run.status not in ("done", "failed", "cancelled"), f"run {run_id} ended {run.status}: {run.error}"
        assert time.monotonic() < deadline, f"run {run_id} stayed {run.status}"
        time.sleep(0.2)


def test_a_run_started_on_the_runs_page_can_be_cancelled_there(fresh_forge: ForgeClient, tmp_path: Path) -> None:
    spec = tmp_path / "slow_model.py"
    spec.write_text(SLOW_MODEL)
    at = open_page("runs")
    assert any("No runs yet" in i for i in texts(at.info))
    at.text_input(key="new_run_model_spec").input(str(spec))
    at.selectbox(key="new_run_backend").select("cpu")
    at.number_input(key="new_run_budget").set_value(2)
    at.button[-1].click().run()
    assert not at.exception and not at.error
    (run,) = fresh_forge.list_runs()
    assert any(f"Started run {run.run_id}" in s for s in texts(at.success))
    assert run.backend == "cpu" and run.model_spec == str(spec)
    _wait_for_status(fresh_forge, run.run_id, "running")

    at = open_page("runs")
    assert at.selectbox(key="cancel_run_id").value == run.run_id
    at.button[0].click().run()
    assert any(f"Run {run.run_id} is cancelled" in s for s in texts(at.success))
    assert fresh_forge.get_run(run.run_id).status == "cancelled"
    frame = at.dataframe[0].value.set_index("run")
    assert frame.loc[run.run_id, "status"] == "cancelled"


def test_a_run_without_a_model_spec_is_not_started(fresh_forge: ForgeClient) -> None:
    at = open_page("runs")
    at.button[-1].click().run()
    assert any("Give a model spec" in e for e in texts(at.error))
    assert fresh_forge.list_runs() == []
    assert os.environ[FORGE_ENV_VAR] == fresh_forge.address


def test_the_run_page_follows_an_active_run_and_cancels_it(fresh_forge: ForgeClient, tmp_path: Path) -> None:
    spec = tmp_path / "slow_model.py"
    spec.write_text(SLOW_MODEL)
    run = fresh_forge.start_run(forge_pb2.RunConfig(model_spec=str(spec), backend="cpu", budget_per_card=2))
    _wait_for_status(fresh_forge, run.run_id, "running")
    at = open_page("run", run=run.run_id)
    assert _metric(at, "Status") == "running"
    assert any("not been captured" in i for i in texts(at.info))
    next(b for b in at.button if b.label == "Cancel this run").click().run()
    assert not at.exception and not at.error
    assert fresh_forge.get_run(run.run_id).status == "cancelled"
    assert _metric(at, "Status") == "cancelled"


def _metric(at: object, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)  # type: ignore[attr-defined]

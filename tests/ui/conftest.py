"""A real forge service on loopback, shared by the dashboard's tests.

It holds a run made by a real small ``kforge optimize`` of ``examples/small_cnn.py`` on the cpu
backend, plus runs seeded through the forge's run store for states that run never reaches (an
LLM proposer with its prompts and dollars, a run that failed, a run whose candidates failed). The
forge is the embedded one ``kforge ui`` starts, with its own capture, agent and sandbox services,
served from a child process (``tests/service_process.py`` says why).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ui.forge_process import forge_process
from tests.ui.seeding import seed_failed_run, seed_failures_run, seed_llm_run
from ui.connection import FORGE_ENV_VAR

REPO = Path(__file__).resolve().parents[2]
MODEL_SPEC = REPO / "examples" / "small_cnn.py"
KFORGE = Path(sys.executable).with_name("kforge")
OPTIMIZE_TIMEOUT_S = 400


def optimize_small_cnn(runs_dir: Path) -> dict[str, object]:
    """``kforge optimize`` on the cpu backend, small enough for a test; returns its JSON outcome."""
    cmd = [str(KFORGE), "optimize", str(MODEL_SPEC), "--backend", "cpu", "--budget", "2", "--max-cards", "1",
           "--runs-dir", str(runs_dir), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=OPTIMIZE_TIMEOUT_S, cwd=REPO)
    assert proc.returncode == 0, f"kforge optimize failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    outcome: dict[str, object] = json.loads(proc.stdout)
    return outcome


@dataclass(frozen=True)
class SeededRuns:
    runs_dir: Path
    optimized_run_id: str  # the real kforge optimize run


@pytest.fixture(scope="session")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> SeededRuns:
    runs = tmp_path_factory.mktemp("runs")
    outcome = optimize_small_cnn(runs)
    seed_llm_run(runs, str(MODEL_SPEC))
    seed_failed_run(runs)
    seed_failures_run(runs)
    return SeededRuns(runs, str(outcome["run"]["run_id"]))  # type: ignore[index]


@pytest.fixture(scope="session")
def runs_dir(seeded: SeededRuns) -> Path:
    return seeded.runs_dir


@pytest.fixture(scope="session")
def optimized_run_id(seeded: SeededRuns) -> str:
    return seeded.optimized_run_id


@pytest.fixture(scope="session")
def forge_address(runs_dir: Path) -> Iterator[str]:
    with forge_process("embedded", runs_dir) as address:
        yield address


@pytest.fixture
def forge_env(forge_address: str) -> Iterator[str]:
    """Points the dashboard (this process's Streamlit scripts) at the test forge."""
    previous = os.environ.get(FORGE_ENV_VAR)
    os.environ[FORGE_ENV_VAR] = forge_address
    yield forge_address
    if previous is None:
        os.environ.pop(FORGE_ENV_VAR, None)
    else:
        os.environ[FORGE_ENV_VAR] = previous


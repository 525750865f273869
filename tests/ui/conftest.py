"""A real forge service on loopback holding seeded runs, shared by the dashboard's tests."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from forge_service import server as forge_server
from tests.ui.seeding import seed_failed_run, seed_llm_run
from ui.connection import FORGE_ENV_VAR
from ui.local_forge import background_forge

MODEL_SPEC = "examples/small_cnn.py"
# Nothing listens here: the forge only needs these to start new runs, not to serve stored ones.
NO_SERVICE = "127.0.0.1:9"


@contextlib.asynccontextmanager
async def forge_only(runs_dir: Path) -> AsyncIterator[str]:
    forge = await forge_server.start(runs_dir=runs_dir, capture=NO_SERVICE, agent=NO_SERVICE, sandboxes=[NO_SERVICE])
    try:
        yield forge.address
    finally:
        await forge.stop()


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    seed_llm_run(runs, str(Path(MODEL_SPEC).resolve()))
    seed_failed_run(runs)
    return runs


@pytest.fixture(scope="session")
def forge_address(runs_dir: Path) -> Iterator[str]:
    with background_forge(lambda: forge_only(runs_dir)) as address:
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

"""Several sandbox services serve one run; one dying costs only its in-flight candidates."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_service.store import DB_FILE

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(__file__).parent / "models" / "tiny_mlp.py"
BUDGET = 6


def start_sandbox(work: Path) -> tuple[subprocess.Popen[str], str]:
    """A `kforge serve sandbox` process on an ephemeral port; returns it and its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_service.cli", "serve", "sandbox", "--address", "127.0.0.1:0",
         "--backend", "cpu", "--work-dir", str(work)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if match := re.search(r"listening on (\S+:\d+)", line):
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError("sandbox service did not start")


@pytest.fixture
def two_sandboxes(tmp_path: Path) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    sandboxes = [start_sandbox(tmp_path / f"sandbox{i}") for i in range(2)]
    yield sandboxes
    for proc, _ in sandboxes:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def sandbox_ids(db: Path) -> list[str]:
    """The sandbox of each stored result; none while the run is still creating its database."""
    con = sqlite3.connect(db, timeout=10)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'results'").fetchone():
            return []
        return [json.loads(r[0]).get("sandboxId", "") for r in con.execute("SELECT result_json FROM results")]
    finally:
        con.close()


def test_candidates_spread_over_sandboxes_and_survive_one_dying(
        tmp_path: Path, two_sandboxes: list[tuple[subprocess.Popen[str], str]]) -> None:
    runs = tmp_path / "runs"
    cmd = [sys.executable, "-m", "forge_service.cli", "optimize", str(MODEL), "--backend", "cpu", "--budget",
           str(BUDGET), "--max-cards", "1", "--json", "--runs-dir", str(runs)]
    for _, address in two_sandboxes:
        cmd += ["--sandbox", address]
    run = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # wait until both sandboxes have returned a result, then kill one of them mid-run
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None:
        dbs = list(runs.glob(f"*/{DB_FILE}"))
        if dbs and len(set(sandbox_ids(dbs[0]))) >= 2:
            break
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before both sandboxes had worked"
    victim, _ = two_sandboxes[1]
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    out, err = run.communicate(timeout=900)
    assert run.returncode == 0, err[-3000:]
    final = json.loads(out)
    assert final["run"]["status"] == "done"
    assert final["run"]["evaluations_done"] == BUDGET
    db = next(runs.glob(f"*/{DB_FILE}"))
    ids = sandbox_ids(db)
    assert len(ids) == BUDGET and len(set(ids)) == 2
    con = sqlite3.connect(db)
    lost = [m for (m,) in con.execute("SELECT message FROM events WHERE kind = 'log' AND message LIKE '%lost%'")]
    con.close()
    assert lost, "the dead sandbox's candidate was not reported as retried"

"""A forge killed with SIGKILL at any point resumes without losing or repeating an evaluation."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from forge_service.store import DB_FILE

ROOT = Path(__file__).resolve().parents[2]
MODEL = Path(__file__).parent / "models" / "tiny_mlp.py"
BUDGET, CARDS = 3, 2


def start_optimize(runs: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "forge_service.cli", "optimize", str(MODEL), "--backend", "cpu", "--budget",
           str(BUDGET), "--max-cards", str(CARDS), "--parallel", "1", "--seed", "7", "--json", "--runs-dir", str(runs)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def run_db(runs: Path) -> Path | None:
    found = list(runs.glob(f"*/{DB_FILE}"))
    return found[0] if found else None


def query(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db, timeout=10)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def event_count(runs: Path) -> int:
    """Events the run has logged so far (0 while its store is still being created)."""
    db = run_db(runs)
    if db is None:
        return 0
    try:
        return int(query(db, "SELECT COUNT(*) FROM events")[0][0])
    except sqlite3.OperationalError:
        return 0


def kill_when(proc: subprocess.Popen[str], runs: Path, events: int, deadline_s: float = 300) -> None:
    """SIGKILL the whole process group once the run has logged ``events`` events."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end and proc.poll() is None:
        if event_count(runs) >= events:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_killed_runs_resume_losing_and_repeating_nothing(tmp_path: Path) -> None:
    rng = random.Random(2026)
    proc = start_optimize(tmp_path)
    # first kill somewhere in capture or the first card, the second later in the search
    kill_when(proc, tmp_path, events=rng.randint(5, 14))
    db = run_db(tmp_path)
    assert db is not None
    run_id = db.parent.name
    before: dict[str, str] = {}
    for round_ in range(2):
        before.update(dict(query(db, "SELECT candidate_id, result_json FROM results")))
        resume = subprocess.Popen(
            [sys.executable, "-m", "forge_service.cli", "resume", run_id, "--json", "--runs-dir", str(tmp_path)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        if round_ == 0:
            done_so_far = event_count(tmp_path)
            kill_when(resume, tmp_path, events=done_so_far + rng.randint(6, 12))
        else:
            out, err = resume.communicate(timeout=900)
            assert resume.returncode == 0, err[-3000:]
            final = json.loads(out)
    after = dict(query(db, "SELECT candidate_id, result_json FROM results"))
    # nothing finished was lost or re-measured
    assert all(after[cid] == result for cid, result in before.items())
    # nothing was evaluated twice, and the budget was spent exactly
    per_card = query(db, "SELECT c.card_id, COUNT(*) FROM results r JOIN candidates c ON c.id = r.candidate_id"
                         " GROUP BY c.card_id")
    assert final["run"]["status"] == "done"
    assert sorted(n for _, n in per_card) == [BUDGET] * CARDS
    assert final["run"]["evaluations_done"] == BUDGET * CARDS
    # each card's tree replays from its operation log with identical choices (resume checks this)
    ops = query(db, "SELECT card_id, op FROM tree_ops")
    assert {card for card, _ in ops} == {card for card, _ in per_card}


def test_an_interrupted_run_says_so_without_a_traceback_and_resumes(tmp_path: Path) -> None:
    """Ctrl-C while searching: the forge stops its run and its watchers before closing the run's
    store, so the terminal shows no traceback, and the run resumes to the end."""
    proc = start_optimize(tmp_path)
    end = time.monotonic() + 300
    while time.monotonic() < end and proc.poll() is None:
        db = run_db(tmp_path)
        if db is not None and event_count(tmp_path) and query(db, "SELECT COUNT(*) FROM results")[0][0]:
            break  # searching: its first evaluation is in
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert "interrupted" in err and "Traceback" not in err, err[-3000:]
    db = run_db(tmp_path)
    assert db is not None
    resume = subprocess.run([sys.executable, "-m", "forge_service.cli", "resume", db.parent.name, "--json",
                             "--runs-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert resume.returncode == 0, resume.stderr[-3000:]
    assert json.loads(resume.stdout)["run"]["status"] == "done"

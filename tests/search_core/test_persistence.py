import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from search_core import CorruptLogError, PersistenceError, SearchTree
from tests.search_core.scripted_search import config_for, run_script

WORKER = Path(__file__).with_name("scripted_search.py")
ROOT = Path(__file__).resolve().parents[2]


def scripted_tree(seed: int, operations: int, log_path: Path | None = None, snapshot_every: int = 1000) -> SearchTree:
    tree = SearchTree(config_for(seed), 100.0, log_path, snapshot_every=snapshot_every)
    run_script(tree, seed, operations, lambda _: None)
    return tree


@pytest.mark.parametrize("snapshot_every", [1, 7, 1000])
def test_reopening_a_log_rebuilds_the_identical_tree(tmp_path: Path, snapshot_every: int) -> None:
    log = tmp_path / "search.log"
    tree = scripted_tree(3, 400, log, snapshot_every)
    reopened = SearchTree.open(log, snapshot_every=snapshot_every)
    assert reopened.snapshot() == tree.snapshot()
    assert reopened.config == tree.config and reopened.log_path == log
    # the reopened tree keeps logging where the first one stopped
    run_script(reopened, 4, 50, lambda _: None)
    assert SearchTree.open(log).snapshot() == reopened.snapshot()


def test_an_unfinished_last_record_is_dropped(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    tree = scripted_tree(5, 120, log)
    with log.open("ab") as f:
        f.write(b'{"op":"tell","node":3,"pas')
    assert SearchTree.open(log).snapshot() == tree.snapshot()
    assert log.read_bytes().endswith(b"\n")


def test_a_damaged_record_is_reported_with_its_line(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    scripted_tree(5, 40, log)
    lines = log.read_bytes().splitlines(keepends=True)
    lines[5] = b"not json\n"
    log.write_bytes(b"".join(lines))
    with pytest.raises(CorruptLogError, match="line 6"):
        SearchTree.open(log)


def test_a_record_that_replays_differently_is_reported(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    scripted_tree(5, 40, log)
    text = log.read_text().replace('"op":"add_child","parent":0,"child":1', '"op":"add_child","parent":0,"child":9')
    log.write_text(text)
    with pytest.raises(CorruptLogError, match="add_child"):
        SearchTree.open(log)


def test_a_damaged_snapshot_costs_only_a_full_replay(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    tree = scripted_tree(6, 200, log, snapshot_every=10)
    Path(f"{log}.snapshot").write_bytes(b"{broken")
    assert SearchTree.open(log).snapshot() == tree.snapshot()


def test_logs_are_never_overwritten_and_missing_logs_are_named(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    scripted_tree(1, 10, log)
    with pytest.raises(PersistenceError, match=r"search\.log"):
        SearchTree(config_for(1), 100.0, log)
    with pytest.raises(PersistenceError, match=r"missing\.log"):
        SearchTree.open(tmp_path / "missing.log")
    (tmp_path / "empty.log").write_bytes(b"")
    with pytest.raises(CorruptLogError, match="no header"):
        SearchTree.open(tmp_path / "empty.log")


def test_a_restored_snapshot_continues_in_a_new_log(tmp_path: Path) -> None:
    tree = scripted_tree(8, 150)
    log = tmp_path / "continued.log"
    restored = SearchTree.restore(tree.snapshot(), log)
    assert restored.snapshot() == tree.snapshot()
    run_script(restored, 9, 60, lambda _: None)
    run_script(tree, 9, 60, lambda _: None)
    assert SearchTree.open(log).snapshot() == tree.snapshot() == restored.snapshot()


def test_checkpoint_makes_reopening_replay_nothing(tmp_path: Path) -> None:
    log = tmp_path / "search.log"
    tree = scripted_tree(2, 90, log)
    tree.checkpoint()
    log.write_bytes(log.read_bytes())  # the log stays the source of truth
    assert SearchTree.open(log).snapshot() == tree.snapshot()


@pytest.mark.parametrize(("seed", "kill_after"), [(11, 150), (12, 700), (13, 1500)])
def test_a_search_killed_mid_flight_reopens_as_the_tree_it_had(tmp_path: Path, seed: int, kill_after: int) -> None:
    log = tmp_path / "search.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [sys.executable, str(WORKER), str(log), str(seed), "13"], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    assert worker.stdout is not None
    reported = 0
    while reported < kill_after:
        line = worker.stdout.readline()
        assert line, f"worker exited early with {worker.wait()}"
        reported = int(line)
    os.kill(worker.pid, signal.SIGKILL)
    for line in worker.stdout:
        reported = int(line)
    assert worker.wait() == -signal.SIGKILL

    reopened = SearchTree.open(log, snapshot_every=13).snapshot()
    # The operation after the last reported one may have completed before the kill.
    expected = {}
    tree = SearchTree(config_for(seed), 100.0)

    def keep(done: int) -> None:
        if done >= reported:
            expected[done] = tree.snapshot()

    run_script(tree, seed, reported + 1, keep)
    assert reopened in (expected[reported], expected[reported + 1])

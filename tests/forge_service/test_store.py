import logging
from pathlib import Path

import pytest

from forge_service.store import CardRow, RunStore, best_candidate
from kernel_forge.common.v1 import types_pb2


def passed(candidate_id: str, latency: float, artifact: bytes = b"") -> types_pb2.CandidateResult:
    return types_pb2.CandidateResult(candidate_id=candidate_id, status=types_pb2.PASSED, latency_us=latency,
                                     eager_latency_us=10.0, speedup=10.0 / latency, artifact=artifact, arch="cpu")


def test_a_reopened_store_holds_everything_written(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r1", '{"model_spec": "m.py"}', "m")
    store.put_cards([CardRow("c1", "{}", 0, True, "pending", "", 4, 1.5)])
    store.add_candidate("a", "c1", "", 1, "offline", ("add_child", {"parent": 0, "node": 1, "candidate": "a"}))
    store.set_proposal("a", "int kf_launch(){}", "first", {"threads": 4}, {"usd": 0.0}, [], "c1", tree_op=None)
    store.put_result(passed("a", 5.0, b"ELF..."), "c1", ("tell", {"node": 1, "passed": True}))
    store.add_candidate("b", "c1", "a", 2, "offline", ("add_child", {"parent": 1, "node": 2, "candidate": "b"}))
    store.put_result(types_pb2.CandidateResult(candidate_id="b", status=types_pb2.WRONG_RESULT,
                                               error_message="max error 3.1"), "c1", ("tell", {"node": 2}))
    store.add_event("candidate", "a passed", "c1", "a")
    store.close()

    again = RunStore(tmp_path)
    assert again.run_row()["status"] == "pending"
    assert [c.state for c in again.candidates("c1")] == ["evaluated", "evaluated"]
    assert again.candidate("a").knobs == {"threads": 4}
    assert again.artifact("a") == b"ELF..." and again.artifact("b") is None
    assert again.result("b").error_message == "max error 3.1"  # type: ignore[union-attr]
    assert [op for op, _ in again.tree_ops("c1")] == ["add_child", "tell", "add_child", "tell"]
    assert again.evaluation_count() == 2
    best = best_candidate(again, "c1")
    assert best is not None and best[0].id == "a"
    assert [e["message"] for e in again.events()] == ["a passed"]


def test_a_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r1", "{}", "m")
    try:
        with store.transaction() as db:
            db.execute("INSERT INTO events (ts, kind, message) VALUES (1, 'log', 'half')")
            raise RuntimeError("killed mid-write")
    except RuntimeError:
        pass
    assert store.events() == []


def test_events_are_logged_as_they_are_stored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = RunStore(tmp_path)
    store.create_run("r1", "{}", "m")
    with caplog.at_level(logging.INFO, logger="forge_service.events"):
        store.add_event("card_started", "searching aten::softmax.default", "c1")
    assert [r.getMessage() for r in caplog.records] == ["card_started: searching aten::softmax.default"]


def test_verbose_shows_the_project_s_details_but_not_the_libraries(tmp_path: Path) -> None:
    from forge_service import cli

    root = logging.getLogger()
    saved_root = (root.level, list(root.handlers))
    saved_levels = {name: logging.getLogger(name).level for name in cli.PROJECT_LOGGERS}
    try:
        assert cli.main(["-v", "runs", "--runs-dir", str(tmp_path)]) == 0
        assert logging.getLogger("forge_service").getEffectiveLevel() == logging.DEBUG
        assert logging.getLogger("forge_service.events").isEnabledFor(logging.INFO)
        assert not logging.getLogger("grpc").isEnabledFor(logging.DEBUG)
    finally:
        root.setLevel(saved_root[0])
        root.handlers[:] = saved_root[1]
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)

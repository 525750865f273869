import json
import logging
import sqlite3
from pathlib import Path

import pytest

from forge_service.store import DB_FILE, CardRow, RunStore, audit_class, best_candidate
from kforge_domain.cost import Cost, LlmExchange
from kforge_domain.result import CandidateResult
from kforge_domain.verdict import BuildFailure, CandidateStatus, RunFigures


def passed(candidate_id: str, latency: float, artifact: bytes = b"") -> CandidateResult:
    return CandidateResult(candidate_id, RunFigures(CandidateStatus.PASSED, latency_us=latency, eager_latency_us=10.0),
                           artifact=artifact, arch="cpu", audit_class="custom")


def test_a_reopened_store_holds_everything_written(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r1", '{"model_spec": "m.py"}', "m")
    store.put_cards([CardRow("c1", "{}", 0, True, "pending", "", 4, 1.5)])
    store.add_candidate("a", "c1", "", 1, "offline", ("add_child", {"parent": 0, "node": 1, "candidate": "a"}))
    store.set_proposal("a", "int kf_launch(){}", "first", {"threads": 4}, Cost(), [], "c1", tree_op=None)
    store.put_result(passed("a", 5.0, b"ELF..."), "c1", ("tell", {"node": 1, "passed": True}))
    store.add_candidate("b", "c1", "a", 2, "offline", ("add_child", {"parent": 1, "node": 2, "candidate": "b"}))
    wrong = CandidateResult("b", RunFigures(CandidateStatus.WRONG_RESULT, "max error 3.1", rel_l2_error=3.1))
    store.put_result(wrong, "c1", ("tell", {"node": 2}))
    store.add_event("candidate", "a passed", "c1", "a")
    store.close()

    again = RunStore(tmp_path)
    assert again.run_row()["status"] == "pending"
    assert [c.state for c in again.candidates("c1")] == ["evaluated", "evaluated"]
    assert again.candidate("a").knobs == {"threads": 4}
    assert again.artifact("a") == b"ELF..." and again.artifact("b") is None
    assert again.result("b") == wrong and again.result("a") == passed("a", 5.0)  # artifacts are blobs
    assert [op for op, _ in again.tree_ops("c1")] == ["add_child", "tell", "add_child", "tell"]
    assert again.evaluation_count() == 2
    best = best_candidate(again, "c1")
    assert best is not None and best[0].id == "a" and audit_class(best[1]) == "custom"
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


def test_a_proposal_s_cost_and_exchanges_read_back_and_add_up(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    store.create_run("r1", "{}", "m")
    exchanges = [LlmExchange("openai/gpt-4.1", "write relu", "```cpp ...```", Cost(1200, 300, 0.0125, 1), 3.5),
                 LlmExchange("openai/gpt-4.1", "again", cost=Cost(800, 0, 0.004, 1), error="RateLimitError")]
    for cid in ("a", "b"):
        store.add_candidate(cid, "c1", "", 1, "openai/gpt-4.1", ("add_child", {"parent": 0, "node": 1}))
        store.set_proposal(cid, "src", "try", {}, Cost(2000, 300, 0.0165, 2), exchanges, "c1", tree_op=None)
    assert store.candidate("a").cost == Cost(2000, 300, 0.0165, 2)
    assert store.llm_calls("a") == exchanges
    assert store.total_cost("c1") == Cost(4000, 600, pytest.approx(0.033), 4)  # type: ignore[arg-type]
    assert store.total_cost("other") == Cost()


def test_a_run_stored_by_an_earlier_version_reads_back(tmp_path: Path) -> None:
    """Rows as earlier versions wrote them: results as json_format's JSON of the proto message
    (camelCase, the derived speedup, an int64 as a string), a free proposal's cost as ``{}``."""
    store = RunStore(tmp_path)
    store.create_run("r1", "{}", "m")
    store.close()
    db = sqlite3.connect(tmp_path / DB_FILE)
    db.executemany(
        "INSERT INTO candidates (id, card_id, parent_id, node_id, seq, source, proposer, state, cost_json, created_at)"
        " VALUES (?, 'c1', '', ?, ?, 'src', 'offline', 'evaluated', ?, 0)",
        [("a", 1, 0, "{}"), ("b", 2, 1, json.dumps({"prompt_tokens": 5, "completion_tokens": 2, "usd": 0.5,
                                                      "llm_calls": 1}))])
    stored = {
        "a": {"candidateId": "a", "status": "PASSED", "latencyUs": 4.0, "latencySpreadUs": 0.0,
              "eagerLatencyUs": 12.0, "speedup": 3.0, "auditClass": "custom", "arch": "sm_90",
              "floorUs": 1.5, "remeasured": True, "workspaceBytes": "4096"},
        "b": {"candidateId": "b", "status": "COMPILE_ERROR", "errorMessage": "expected ';'", "compileS": 0.5},
    }
    db.executemany("INSERT INTO results (candidate_id, status, result_json, created_at) VALUES (?, ?, ?, 0)",
                   [(cid, r["status"], json.dumps(r, indent=2)) for cid, r in stored.items()])
    db.commit()
    db.close()

    again = RunStore(tmp_path)
    assert again.result("a") == CandidateResult(
        "a", RunFigures(CandidateStatus.PASSED, latency_us=4.0, latency_spread_us=0.0, eager_latency_us=12.0,
                        floor_us=1.5, workspace_bytes=4096),
        audit_class="custom", arch="sm_90", remeasured=True)
    assert again.result("b") == CandidateResult("b", BuildFailure(CandidateStatus.COMPILE_ERROR, "expected ';'"),
                                                compile_s=0.5)
    assert [c.cost for c in again.candidates("c1")] == [Cost(), Cost(5, 2, 0.5, 1)]
    best = best_candidate(again, "c1")
    assert best is not None and best[0].id == "a" and best[1].speedup == 3.0

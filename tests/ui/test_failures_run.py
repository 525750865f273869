"""The seeded run whose candidates failed every way, and whose only kernel that passed is slower
than eager, on each page that tells its story: against a real forge service on loopback."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from tests.ui.apptest import code_texts, open_page, texts
from tests.ui.seeding import COMPILE_LOG, FAILED_RUN_ID, FAILURES, FAILURES_RUN_ID, LLM_RUN_ID, SLOWER_ID
from ui.tree_graph import BEST_COLOUR

pytestmark = pytest.mark.usefixtures("forge_env")


def test_run_page_tells_the_story_of_a_finished_run() -> None:
    at = open_page("run", run=FAILURES_RUN_ID)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Spent / granted"] == "5 / 6" and metrics["Status"] == "done"
    assert "Took" in metrics and "Search left" not in metrics
    assert "**Phase:** done" in texts(at.markdown)
    assert not at.get("progress")
    assert any(c.startswith("done: stopped before its budget was spent, 5 of 6") for c in texts(at.caption))
    feed = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert feed["message"].iloc[0] == "run finished" and feed["message"].iloc[-1] == "run started"
    verdicts = feed.set_index("candidate")["verdict"].dropna().to_dict()
    assert verdicts[SLOWER_ID] == "passed, ×0.87 (slower than eager)"
    assert {verdicts[cid] for cid, *_ in FAILURES} == {"compile error", "runtime error", "wrong result", "timeout"}
    links = {link.proto.label: link.proto.query_string for link in at.get("page_link")}
    assert links["4 failed candidates: their errors and logs"] == f"run={FAILURES_RUN_ID}"
    assert not at.error


def test_run_page_of_a_run_without_events_says_so() -> None:
    at = open_page("run", run=LLM_RUN_ID)
    assert "No events recorded for this run." in texts(at.info)
    assert any("1 failed candidate:" in link.proto.label for link in at.get("page_link"))


def test_failures_page_lists_every_failed_candidate_with_its_error_and_log() -> None:
    at = open_page("failures", run=FAILURES_RUN_ID)
    summary = at.dataframe[0].value.set_index("status")["candidates"].to_dict()
    assert summary == {"COMPILE_ERROR": 1, "RUNTIME_ERROR": 1, "WRONG_RESULT": 1, "TIMEOUT": 1}
    assert "4 of 5 evaluated candidates failed." in texts(at.caption)
    assert texts(at.subheader) == ["Compile error (1)", "Runtime error (1)", "Wrong result (1)",
                                                "Timeout (1)"]
    codes = code_texts(at)
    for _, _, _, _, error, log in FAILURES:
        assert error in codes and (not log or log in codes)
    assert COMPILE_LOG in codes
    queries = [parse_qs(link.proto.query_string) for link in at.get("page_link")]
    assert [(q["run"], q["candidate"]) for q in queries] == [([FAILURES_RUN_ID], [cid]) for cid, *_ in FAILURES]
    assert len(at.expander) == len(FAILURES) and not at.error


def test_failures_page_of_a_run_with_no_searched_card() -> None:
    at = open_page("failures")
    at.selectbox(key="failures:run").set_value(FAILED_RUN_ID).run()
    assert any("no candidate has failed" in i for i in texts(at.info))


def test_card_page_draws_no_best_lineage_to_a_kernel_slower_than_eager() -> None:
    at = open_page("card", run=FAILURES_RUN_ID)
    dot = at.get("graphviz_chart")[0].proto.spec
    assert BEST_COLOUR not in dot and "×0.87" in dot
    assert any("No kernel beats eager" in w for w in texts(at.warning))
    for order, (cid, *_) in enumerate(FAILURES, 2):
        assert f"{cid[:8]} #{order}" in dot and f"candidate={cid}" in dot
    frame = at.dataframe[0].value
    assert frame["order"].tolist() == [1, 2, 3, 4, 5] and not frame["best lineage"].any()


def test_candidate_page_shows_a_passed_kernel_slower_than_eager_as_slower() -> None:
    at = open_page("candidate", run=FAILURES_RUN_ID, candidate=SLOWER_ID)
    assert not at.success
    assert any(w.startswith("PASSED but not faster than eager: ×0.87") for w in texts(at.warning))


def test_runs_page_shows_how_finished_runs_ended_instead_of_a_partial_bar() -> None:
    frame = open_page("runs").dataframe[0].value.set_index("run")
    assert frame.loc[FAILURES_RUN_ID, ["outcome", "evaluations"]].tolist() == ["stopped early", "5/6"]
    assert frame.loc[LLM_RUN_ID, "outcome"] == "budget spent"
    assert "progress" not in frame.columns  # no run is active: no bar at all


def test_the_chosen_run_stays_chosen_from_the_run_page_to_failures() -> None:
    at = open_page("run", run=LLM_RUN_ID)
    at.query_params.clear()
    at.switch_page("screens/failures.py").run()
    assert not at.exception and at.selectbox(key="failures:run").value == LLM_RUN_ID
    assert "Compile error (1)" in texts(at.subheader)
